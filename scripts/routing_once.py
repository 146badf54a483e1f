"""One MoE layer's routing helpers, twice (top-k, align, permute, combine of humming_aot.moe on random
logits and activations of a model's shape), for a profiler to catch the second call's kernels
(scripts/ncu_routing.sh).

Usage: python3 scripts/routing_once.py MODEL TOKENS   (MODEL as scripts/bench_moe.py names them)
"""

from __future__ import annotations

import sys

from humming_aot import bench, moe

import torch

e, top_k, h, _ = bench.MOE_MODELS[sys.argv[1]]
tokens = int(sys.argv[2])
logits = torch.randn(tokens, e, device="cuda")
x = torch.randn(tokens, h, device="cuda", dtype=torch.bfloat16)
for _ in range(2):
    w, ids = moe.topk_route(logits, top_k)
    al = moe.moe_align(ids, e, 1, check_ids=False)
    out = moe.combine(moe.permute(x, al), al, w)
torch.cuda.synchronize()
print("routed", tuple(out.shape))
