"""Runs one GEMM per sm90 tile and M (the built u4g128-sbf16 instance of each tile, plus the
u4g64-sbf16-zi and u4gc-sbf16 ones) on small shapes, for compute-sanitizer on the GPU machine
(scripts/gpu_sanitize.sh). Each result is also compared with the fp64 reference, so a run that
the sanitizer passes computed the right numbers as well.

Usage: python3 scripts/sanitize_sm90.py   (SANITIZE_PATTERN=REGEX narrows or widens the instances)
"""

import os
import re
import sys

import torch

import humming_aot as ha
from humming_aot import formats as F
from humming_aot import reference as R
from humming_aot import registry

# n needs padding and spans two 256-channel tiles; k is not a multiple of 256.
N, K = 264, 1024 + 128
PATTERN = os.environ.get(
    "SANITIZE_PATTERN", r"^sm90_wgmma_dense_a-bf16_w-u4(g128-sbf16|g64-sbf16-zi|gc-sbf16)_c-bf16_t"
)

names = sorted(i.name for i in registry.instances() if re.search(PATTERN, i.name))
if not names:
    sys.exit("sanitize_sm90.py: this build has no sm90 u4 bf16 instances")
bad = 0
for name in names:
    fmt = F.GemmFormat.parse(re.search(r"(a-.*_c-[a-z0-9]+)_t", name).group(1))
    q = R.quantize_weight(torch.randn(N, K, generator=torch.Generator().manual_seed(1)) * 0.02, fmt.weight)
    packed, w = ha.pack_weight(q, layout="sm90").to("cuda"), R.dequantize_weight(q).double()
    bm = int(re.search(r"_t(\d+)x", name).group(1))
    for m in sorted({1, max(bm - 1, 1), bm + 3}):
        x = torch.randn(m, K, generator=torch.Generator().manual_seed(m)).to(torch.bfloat16)
        out = ha.gemm(x.to("cuda"), packed, fmt, instance=name).double().cpu()
        ref = x.double() @ w.T
        err = ((out - ref).abs().max() / ref.abs().max()).item()
        bad += err >= 2e-2
        print(f"{name} m={m}: max error {err:.1e} of the largest output {'ok' if err < 2e-2 else 'WRONG'}", flush=True)
sys.exit(1 if bad else 0)
