"""How far the 8-bit activation kernels' sums are from exact, on the GPU machine: for each format,
the layer's output against the fp64 product of the same quantized operands, next to the error of
rounding that exact product to the output type alone (what no kernel can do better than).

Usage: python3 scripts/a8_error.py [N K M]   (default 4096 8192 512; also K = 28672)
Prints per format and K: the relative RMS error ||y - ref|| / ||ref|| of the layer and of the
rounded reference, and the largest |y - ref| over the largest |ref|, with the dispatcher's instance.
"""

import sys

import torch

import humming_aot as ha
from humming_aot import formats as F
from humming_aot import reference as R

n, k0, m = (int(v) for v in sys.argv[1:4]) if len(sys.argv) >= 4 else (4096, 8192, 512)
cases = [
    ("e2m1gc-sbf16", "e4m3-pt"),
    ("u4gc-sbf16", "e4m3-pt"),
    ("e4m3gc-sf32", "e4m3-pt"),
    ("u4g128-sbf16", "e4m3-pt"),
]
for k in sorted({k0, 28672}):
    g = torch.Generator().manual_seed(k)
    lin = torch.nn.Linear(k, n, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(n, k, generator=g) * 0.02)
    x = torch.randn(m, k, generator=g).to("cuda", torch.bfloat16)
    for wfmt, act in cases:
        layer = ha.QuantLinear.from_linear(lin, wfmt, act, device="cuda")
        w = R.dequantize_weight(R.quantize_weight(lin.weight.detach(), wfmt)).to("cuda", torch.float64)
        a, s = ha.quantize_act(x, act)
        a_deq = R.dequantize_activation(a, s, F.parse_activation_format(act)).to("cuda", torch.float64)
        ref = a_deq @ w.T
        y = layer(x).double()
        rounded = ref.to(torch.bfloat16).double()

        def rel(v):
            return ((v - ref).norm() / ref.norm()).item()

        worst = ((y - ref).abs().max() / ref.abs().max()).item()
        name = layer.instance_for(m, "cuda")
        print(
            f"{wfmt:14s} x {act:8s} {n}x{k} m={m}: rel rms {rel(y):.3e} (bf16 rounding alone {rel(rounded):.3e}),"
            f" max {worst:.3e}  {name}",
            flush=True,
        )
