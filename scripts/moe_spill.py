"""How much of a grouped W4A8 GEMM's time its experts' last, partly filled row tiles cost: one grouped
GEMM (gate-up or down of a model; e2m1 per channel x e4m3 per token, layout 4, the rows quantized
before the timed call, so the GEMM alone; or with --w4a16 u4 g128 x bf16, layout 3) timed with the expert loads of random routing (top-k of
seeded random logits, as scripts/bench_moe.py routes) and with the same rows spread evenly over the
experts, or all of them on the first expert (a dense GEMM's work through the grouped kernel), each by
the default choice and by the instances named in --instances. Graph replay after a 256 MiB read
flush (bench.Timer), median us.

With --glu ACTIVATION (silu or swiglu-oai) each gate-up instance is also timed with the experts'
gated activation: in its epilogue ("glu", where the instance computes it; an +experimental build)
and as the plain GEMM followed by the activation kernel ("then-activate").

Usage: python3 scripts/moe_spill.py MODEL:TOKENS[,MODEL:TOKENS...] [--parts gate-up,down]
                                    [--instances NAME,NAME] [--kinds random,even,one] [--iters 20] [--w4a16]
                                    [--glu silu]
"""

from __future__ import annotations

import argparse
import statistics

import torch

import humming_aot as ha
from humming_aot import _C as C
from humming_aot import bench, moe
from humming_aot import reference as R

ap = argparse.ArgumentParser()
ap.add_argument("points")
ap.add_argument("--parts", default="gate-up,down")
ap.add_argument("--instances", default="")
ap.add_argument("--kinds", default="random,even")
ap.add_argument("--iters", type=int, default=20)
ap.add_argument("--w4a16", action="store_true", help="u4g128 x bf16 (layout 3) instead of W4A8")
ap.add_argument("--glu", default="", help="also time gate-up with this activation, fused and after the GEMM")
args = ap.parse_args()

WFMT, ACT = ("u4g128-sbf16", "bf16") if args.w4a16 else ("e2m1gc-sbf16", "e4m3-pt")
LAYOUT = 3 if args.w4a16 else 4
FMT = f"a-{ACT}_w-{WFMT}_c-bf16"
timer = bench.Timer(256, "read")
sms = torch.cuda.get_device_properties(0).multi_processor_count
cc, _ = C.device_cc()


def loads(tokens: int, e: int, top_k: int) -> dict[str, torch.Tensor]:
    """Rows per expert: random routing, the same rows spread evenly (the remainder one each), or all on
    the first expert."""
    gen = torch.Generator(device="cuda").manual_seed(tokens)
    logits = torch.randn(tokens, e, device="cuda", generator=gen)
    counts = torch.bincount(torch.topk(logits, top_k, dim=1).indices.flatten(), minlength=e)
    rows = tokens * top_k
    even = torch.full((e,), rows // e, dtype=torch.int64, device="cuda")
    even[: rows % e] += 1
    one = torch.zeros(e, dtype=torch.int64, device="cuda")
    one[0] = rows
    return {"random": counts, "even": even, "one": one}


for point in args.points.split(","):
    model, tokens = point.split(":")
    tokens = int(tokens)
    e, top_k, h, f = bench.MOE_MODELS[model]
    for part in args.parts.split(","):
        n, k = (2 * f, h) if part == "gate-up" else (h, f)
        q = R.quantize_weight(torch.randn(n, k) * 0.02, WFMT)
        w = ha.pack_weight(q, layout="sm90" if args.w4a16 else "sm90a8").to("cuda")
        codes = torch.randint(-(2**31), 2**31 - 1, (e, *w.codes.shape), dtype=torch.int32, device="cuda")
        stack = moe.StackedExperts(codes, w.scales.unsqueeze(0).expand(e, *w.scales.shape).contiguous(), None, w)
        rows = tokens * top_k
        x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        xq, xs = (x, None) if args.w4a16 else ha.quantize_act(x, ACT)
        per_expert = max(1, rows // e)
        default = C.select_grouped_instance(FMT, LAYOUT, n, k, per_expert, e, rows, cc, sms)
        names = [default] + [i for i in args.instances.split(",") if i and i != default]
        for kind, counts in loads(tokens, e, top_k).items():
            if kind not in args.kinds.split(","):
                continue
            offs = torch.cat([counts.new_zeros(1), counts.cumsum(0)]).int()
            spill = sum(int(c) for c in counts.tolist())
            for name in names:

                def gemm(name=name, **kw):
                    return moe.moe_gemm(
                        xq, stack, offs, FMT, rows_per_expert=per_expert, assignments=rows, instance=name, a_scales=xs,
                        **kw,
                    )  # fmt: skip

                fns = {"": gemm}
                if args.glu and part == "gate-up":
                    fns[" glu"] = lambda: gemm(activation=args.glu)  # noqa: E731
                    fns[" then-activate"] = lambda: moe.activate(gemm(), args.glu)  # noqa: E731
                for how, fn in fns.items():
                    try:
                        us = statistics.median(timer.graph(fn, args.iters))
                        text = f"{us:.1f}"
                    except Exception as ex:  # an instance this build lacks, or one that refuses the shape
                        text = f"error {str(ex)[:80]}"
                    tag = "default" if name == default else "forced"
                    short = name.split("c-bf16_")[-1]
                    print(f"spill {model} T={tokens} {part}{how} {kind} rows={spill} {tag} {short}: {text}")
