"""Run one humming-aot GEMM a few times (for ncu / compute-sanitizer on the GPU machine).

Usage: python3 scripts/profile_one.py N K M [weight_format] [layout] [activation_format] [instance]
(activation format e.g. e4m3-pt: quantized in each call, or - for the layer's own; instance: forced instead of
the dispatcher's)
"""

import sys

import torch

import humming_aot as ha
from humming_aot import reference as R

n, k, m = (int(v) for v in sys.argv[1:4])
fmt = sys.argv[4] if len(sys.argv) > 4 else "u4g128-sbf16"
layout = sys.argv[5] if len(sys.argv) > 5 else "auto"
act = sys.argv[6] if len(sys.argv) > 6 and sys.argv[6] not in ("", "-", "none") else None
if len(sys.argv) > 7:
    from humming_aot import dispatch

    dispatch.force(sys.argv[7])
lin = torch.nn.Linear(k, n, bias=False, device="cuda")  # quantize on the GPU: seconds, not minutes
layer = ha.QuantLinear.from_linear(lin, fmt, act, device="cuda", layout=layout)
x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    layer(x)
torch.cuda.synchronize()
print("instance", layer.instance_for(m, "cuda"))
