"""DeepSeek-V3's group-limited routing on the GPU: the top-k kernel's own group choice against the
same rule in torch ops (humming_aot.moe._group_limited, then the scaling: the path topk_route took
for every group-limited routing before session 38, and still takes past 256 experts), in one run.

Usage: python3 scripts/bench_group_routing.py [--out results.json] [--tokens 1,8,64,256] [--iters 20]
Routing of DeepSeek-V3 (256 experts in 8 groups, the best 4 groups, top-8, sigmoid scores with a
correction bias, routed scaling 2.5) on seeded random logits; CUDA-graph replay after an L2 read
flush (humming_aot.bench.Timer), median us. Prints one JSON line per point and writes them to --out.
"""

import argparse
import json
import statistics

import torch

from humming_aot import moe
from humming_aot.bench import Timer

ap = argparse.ArgumentParser()
ap.add_argument("--out", default=None)
ap.add_argument("--tokens", default="1,8,64,256")
ap.add_argument("--iters", type=int, default=20)
args = ap.parse_args()
timer = Timer(256)
experts, n_group, topk_group, top_k, scaling = 256, 8, 4, 8, 2.5
bias = torch.randn(experts, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1)) * 0.1
points = []
for tokens in [int(t) for t in args.tokens.split(",")]:
    logits = torch.randn(tokens, experts, device="cuda", generator=torch.Generator(device="cuda").manual_seed(tokens))
    kw = dict(scoring="sigmoid", correction_bias=bias, n_group=n_group, topk_group=topk_group, scaling=scaling)
    kernel = lambda: moe.topk_route(logits, top_k, **kw)  # noqa: E731

    def torch_ops():
        w, i = moe._group_limited(logits, top_k, "sigmoid", True, bias, n_group, topk_group)
        return w * scaling, i

    (kw_, ki), (tw, ti) = kernel(), torch_ops()
    point = {
        "tokens": tokens,
        "kernel_us": statistics.median(timer.graph(kernel, args.iters)),
        "torch_ops_us": statistics.median(timer.graph(torch_ops, args.iters)),
        "same_experts": bool(torch.equal(ki, ti)),
        "max_weight_diff": float((kw_ - tw).abs().max()),
    }
    points.append(point)
    print(json.dumps(point), flush=True)
if args.out:
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "points": points}, f, indent=1)
