"""Run cuBLASLt's FP8 GEMM (torch._scaled_mm, row-wise fp32 scales, bf16 out) a few times on one
shape, for ncu on the GPU machine beside scripts/profile_one.py's humming-aot GEMM.

Usage: python3 scripts/profile_scaled_mm.py N K M
"""

import sys

import torch

n, k, m = (int(v) for v in sys.argv[1:4])
a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
w = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
sa, sw = torch.ones(m, 1, device="cuda"), torch.ones(1, n, device="cuda")
for _ in range(4):
    torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sw, out_dtype=torch.bfloat16)
torch.cuda.synchronize()
