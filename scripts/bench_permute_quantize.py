"""The input of a MoE layer's gate-up GEMM with 8-bit activations, two ways, in one run: the
tokens' bf16 activations permuted into expert-sorted rows and then quantized (humming_aot.moe.permute,
then humming_aot.quantize_act: what QuantMoE ran before session 46), against one pass that quantizes
the rows as it gathers them (humming_aot.moe.permute_quantize). Both give the same codes and scales
bit for bit (checked here on every point).

Usage (on the GPU machine, after a build): python3 scripts/bench_permute_quantize.py OUT.json
    [--models qwen3-30b-a3b,...] [--tokens 1,8,64,256,1024,4096] [--act e4m3-pt] [--iters 20]
Routing as scripts/bench_moe.py routes (seeded logits, softmax top-k, blocks of one row, as QuantMoE
aligns). Each point: the median CUDA-graph replay after a 256 MiB read flush (bench.Timer), us.
Writes JSON {"device", "act", "points": [{model, tokens, rows, hidden, us_two, us_fused}]} and prints
one line per point.
"""

import argparse
import json
import statistics

import torch

import humming_aot as ha
from humming_aot import bench, moe

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--models", default="qwen3-30b-a3b,mixtral-8x7b,deepseek-v3,gpt-oss-120b")
ap.add_argument("--tokens", default="1,8,64,256,1024,4096")
ap.add_argument("--act", default="e4m3-pt")
ap.add_argument("--iters", type=int, default=20)
args = ap.parse_args()
timer = bench.Timer(256, "read")
points = []
for model in args.models.split(","):
    e, top_k, h, _ = bench.MOE_MODELS[model]
    for tokens in (int(t) for t in args.tokens.split(",")):
        gen = torch.Generator(device="cuda").manual_seed(tokens)
        logits = torch.randn(tokens, e, device="cuda", generator=gen)
        x = torch.randn(tokens, h, device="cuda", dtype=torch.bfloat16, generator=gen)
        _, ids = moe.topk_route(logits, top_k)
        al = moe.moe_align(ids, e, 1, check_ids=False)

        def two():
            return ha.quantize_act(moe.permute(x, al), args.act)

        def fused():
            return moe.permute_quantize(x, al, args.act)

        (c2, s2), (cf, sf) = two(), fused()
        same = torch.equal(c2.view(torch.uint8), cf.view(torch.uint8)) and torch.equal(s2, sf)
        p = {
            "model": model,
            "tokens": tokens,
            "rows": al.capacity,
            "hidden": h,
            "us_two": statistics.median(timer.graph(two, args.iters)),
            "us_fused": statistics.median(timer.graph(fused, args.iters)),
            "bitwise_equal": same,
        }
        points.append(p)
        print(
            f"{model} T={tokens} rows={p['rows']}: permute + quantize {p['us_two']:.1f} us, fused "
            f"{p['us_fused']:.1f} us{'' if same else '  CODES DIFFER'}",
            flush=True,
        )
with open(args.out, "w") as f:
    json.dump({"device": torch.cuda.get_device_name(), "act": args.act, "points": points}, f, indent=1)
