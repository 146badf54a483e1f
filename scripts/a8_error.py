"""How far the 8-bit activation kernels' sums are from exact, on the GPU machine: for each format,
the layer's output against the fp64 product of the same quantized operands, next to the error of
rounding that exact product to the output type alone (what no kernel can do better than).

Usage: python3 scripts/a8_error.py [N K M] [--moe REGEX] [--ks K,...] [--formats W,...]
    (default 4096 8192 512; also K = 28672, or the K values of --ks)
Prints per format and K: the relative RMS error ||y - ref|| / ||ref|| of the layer and of the
rounded reference, and the largest |y - ref| over the largest |ref|, with the dispatcher's instance.
With --moe, also every built grouped (MoE) instance of the format whose name matches REGEX, on the
same rows as one expert's (humming_aot.moe.moe_gemm with the instance forced): the grouped tiles
that hold their sums in the tensor cores for the whole K (DenseA8::kHeldSums) are measured so.
"""

import argparse
import re

import humming_aot as ha
from humming_aot import formats as F
from humming_aot import moe, registry
from humming_aot import reference as R

import torch

ap = argparse.ArgumentParser()
ap.add_argument("dims", nargs="*", type=int, help="N K M (default 4096 8192 512)")
ap.add_argument("--moe", default="", help="also the built grouped instances whose names match this regex")
ap.add_argument("--ks", default="", help="the K values (comma-separated) instead of K and 28672")
ap.add_argument("--formats", default="", help="only these weight formats (comma-separated) of the four")
args = ap.parse_args()
n, k0, m = args.dims if len(args.dims) == 3 else (4096, 8192, 512)
ks = [int(v) for v in args.ks.split(",")] if args.ks else sorted({k0, 28672})
cases = [
    ("e2m1gc-sbf16", "e4m3-pt"),
    ("u4gc-sbf16", "e4m3-pt"),
    ("e4m3gc-sf32", "e4m3-pt"),
    ("u4g128-sbf16", "e4m3-pt"),
]
if args.formats:
    cases = [c for c in cases if c[0] in args.formats.split(",")]
for k in ks:
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
        if not args.moe:
            continue
        # The same rows as one expert's, through each matching grouped instance of the format.
        fmt = f"a-{act}_w-{wfmt}_c-bf16"
        grouped = [
            i.name
            for i in registry.instances()
            if i.name.startswith(f"sm90_wgmma_moe_{fmt}_") and re.search(args.moe, i.name)
        ]
        if not grouped:
            continue
        packed = ha.pack_weight(R.quantize_weight(lin.weight.detach(), wfmt), layout="sm90a8").to("cuda")
        stack = moe.stack_experts([packed])
        offsets = torch.tensor([0, m], dtype=torch.int32, device="cuda")
        for name in grouped:
            y = moe.moe_gemm(a, stack, offsets, fmt, a_scales=s, instance=name).double()
            worst = ((y - ref).abs().max() / ref.abs().max()).item()
            print(f"{wfmt:14s} x {act:8s} {n}x{k} m={m}: rel rms {rel(y):.3e}, max {worst:.3e}  {name}", flush=True)
