"""One grouped GEMM of a MoE layer (gate-up or down of a model, routed from seeded random logits as
scripts/bench_moe.py routes them), run a few times to warm up and then once more inside an NVTX
range named "measured", for a profiler to catch that launch alone (scripts/ncu_moe_peer.sh), by
humming-aot (u4g128 bf16, or the weight format in MOE_FORMAT; its default instance) or by
humming-kernels 0.1.20 (its MoE layer in u4g128, quantized by its own quantizer; the same rows,
contiguous by expert). Run the two in separate processes: each library registers torch.ops.humming.
MOE_ACT=e4m3-pt makes it W4A8: humming-aot's rows quantized per token inside the measured range
(ha.quantize_act, then the grouped GEMM on experts in layout 4; pair it with
MOE_FORMAT=e2m1gc-sbf16), humming-kernels' layer in bench.JIT_CONFIGS["w4a8"] (e2m1 per channel x
e4m3 per token, quantized inside its call). MOE_INSTANCE names a built grouped instance for
humming-aot to run instead of its default choice. MOE_GLU=silu (or swiglu-oai) runs humming-aot's
gate-up GEMM with the experts' activation (in the epilogue in +experimental builds, where the
instance can; else the plain GEMM then the activation kernel, two launches in the range).

Usage: python3 scripts/moe_gemm_once.py {aot,jit} MODEL TOKENS {gate-up,down}
"""

from __future__ import annotations

import os
import sys

from humming_aot import bench  # no humming_aot._C: the humming-jit run imports this too

import torch

impl, model, tokens, part = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
e, top_k, h, f = bench.MOE_MODELS[model]
n, k = (2 * f, h) if part == "gate-up" else (h, f)
gen = torch.Generator(device="cuda").manual_seed(tokens)
logits = torch.randn(tokens, e, device="cuda", generator=gen)
counts = torch.bincount(torch.topk(logits, top_k, dim=1).indices.flatten(), minlength=e)
offsets = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
rows = torch.randn(tokens * top_k, k, device="cuda", dtype=torch.bfloat16)

act = os.environ.get("MOE_ACT", "bf16")
if impl == "jit":
    from humming.layer import HummingLayer

    config = dict(bench.JIT_CONFIGS["w4a16" if act == "bf16" else "w4a8"])
    inp = config.pop("input", None)
    layer = HummingLayer(shape_n=n, shape_k=k, weight_config=config, input_config=inp, num_experts=e,
                         torch_dtype=torch.bfloat16).to("cuda")  # fmt: skip
    layer.load_from_unquantized(torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16) * 0.02)
    layer.transform()
    layout = offsets.long()
    run = lambda: layer(rows, expert_layout=layout, compute_config={"gemm_type": "grouped_contiguous"})
else:
    import humming_aot as ha
    from humming_aot import moe
    from humming_aot import reference as R

    wfmt = os.environ.get("MOE_FORMAT", "u4g128-sbf16")  # the weight format (humming-aot only)
    fmt = f"a-{act}_w-{wfmt}_c-bf16"
    q = R.quantize_weight(torch.randn(n, k) * 0.02, wfmt)
    w = ha.pack_weight(q, layout="sm90" if act == "bf16" else "sm90a8").to("cuda")
    codes = torch.randint(-(2**31), 2**31 - 1, (e, *w.codes.shape), dtype=torch.int32, device="cuda")
    stack = moe.StackedExperts(codes, w.scales.unsqueeze(0).expand(e, *w.scales.shape).contiguous(), None, w)
    per_expert = max(1, tokens * top_k // e)
    offs = offsets.int()
    kw = {"rows_per_expert": per_expert, "assignments": tokens * top_k}
    if os.environ.get("MOE_INSTANCE"):
        kw["instance"] = os.environ["MOE_INSTANCE"]
    if os.environ.get("MOE_GLU"):
        kw["activation"] = os.environ["MOE_GLU"]
    if act == "bf16":
        run = lambda: moe.moe_gemm(rows, stack, offs, fmt, **kw)
    else:

        def run():
            codes, scales = ha.quantize_act(rows, act)
            return moe.moe_gemm(codes, stack, offs, fmt, a_scales=scales, **kw)


for _ in range(3):  # the first call compiles (jit) or loads the module (aot)
    run()
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("measured")
out = run()
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
print(
    impl,
    model,
    tokens,
    part,
    "rows",
    rows.shape[0],
    "out",
    tuple(out.shape),
    "experts touched",
    int((counts > 0).sum()),
)
