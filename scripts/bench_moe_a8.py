"""Grouped (MoE) GEMMs with 8-bit activations on the GPU: humming-aot's grouped sm90 instances
against the per-expert loops a server without them runs, on the same rows, in one run (issues 11
and 14).

Usage (on the GPU machine, after a build):
    python3 scripts/bench_moe_a8.py OUT.json [--format e4m3g128n128-sf32:e4m3-g128]
        [--cases deepseek-v3:gate_up:1,64,1024,4096;deepseek-v3:down:64,4096;4x8192] [--iters 10]
        [--layout generic | sm90a8 (W4A8 experts, e.g. --format e2m1gc-sbf16:e4m3-pt)]

Cases (';'-separated):
- MODEL:GEMM:TOKENS: TOKENS tokens (','-separated counts) of MODEL (bench.MOE_MODELS: experts,
  top-k, hidden H, intermediate F), routed by softmax top-k of seeded logits; its gate-up GEMM
  (n = 2F, k = H) or down GEMM (n = H, k = F) over the rows sorted by expert;
- ExR (e.g. 4x8192): E experts of R rows each on DeepSeek-V3's gate-up GEMM (n = 4096, k = 7168),
  issue 14's FP8 target (>= 1200 TFLOP/s);
- MODEL:layer:TOKENS: the whole layer as humming_aot.QuantMoE runs it on the grouped kernels (route,
  permute, quantize, gate-up, activation, quantize, down, combine), impl "layer", one point per
  token count, beside which the GEMMs' own points show the share of the rest.
Implementations, each timed as the median CUDA-graph replay after a read flush of 256 MiB
(bench.Timer), the GEMMs alone (the activations quantized beforehand):
- humming-aot: humming_aot.moe.moe_gemm, the library's choice among the grouped instances (recorded);
- humming-aot=TEXT: the same on the built grouped instance of the format whose name contains TEXT
  (e.g. humming-aot=_t128x128x128_), to compare tiles;
- humming-aot-loop: one dense humming GEMM per expert with rows (the counts known on the host);
- cublaslt-fp8-loop: one torch._scaled_mm per expert with rows (padded to a multiple of 16, which
  cuBLASLt's FP8 GEMM needs), with row-wise fp32 scales (per token x per channel: the cuBLASLt FP8
  reference the issue names; no block scales).
The experts' codes repeat one real quantization (their values do not change the time). Writes JSON
{"device", "format", "points": [{case, tokens, rows, touched_experts, n, k, impl, us, tflops[,
instance]}]} and prints one line per point.
"""

import argparse
import json
import statistics

import torch

import humming_aot as ha
from humming_aot import bench, moe
from humming_aot import reference as R

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--format", default="e4m3g128n128-sf32:e4m3-g128", help="WEIGHT:ACTIVATION formats")
ap.add_argument("--cases", default="deepseek-v3:gate_up:1,64,1024,4096;deepseek-v3:down:64,4096;4x8192")
ap.add_argument("--impls", default="humming-aot,humming-aot-loop,cublaslt-fp8-loop")
ap.add_argument("--iters", type=int, default=10)
ap.add_argument("--layout", default="generic", help="the experts' layout: generic (8-bit weights) or sm90a8 (W4A8)")
args = ap.parse_args()
wfmt, act = args.format.split(":")
fmt = f"a-{act}_w-{wfmt}_c-bf16"
impls = args.impls.split(",")
timer = bench.Timer(256, "read")
points = []
stacks = {}


def stack(e: int, n: int, k: int) -> moe.StackedExperts:
    """E experts of [n, k] in the weight format (--layout), every one the same quantization
    of one random matrix, in its own memory."""
    if (e, n, k) not in stacks:
        stacks.clear()  # one layer's experts at a time: DeepSeek-V3's take 7.5 GB
        torch.cuda.empty_cache()
        g = torch.Generator().manual_seed(n * 7 + k)
        w = ha.pack_weight(R.quantize_weight(torch.randn(n, k, generator=g) * 0.02, wfmt), layout=args.layout).to(
            "cuda"
        )
        rep = lambda t: None if t is None else t.unsqueeze(0).expand(e, *t.shape).contiguous()  # noqa: E731
        stacks[(e, n, k)] = moe.StackedExperts(rep(w.codes), rep(w.scales), rep(w.zeros), w)
    return stacks[(e, n, k)]


def routed_counts(experts: int, top_k: int, tokens: int) -> list[int]:
    g = torch.Generator().manual_seed(tokens * 31 + experts)
    ids = torch.randn(tokens, experts, generator=g).topk(top_k, dim=1).indices
    return torch.bincount(ids.flatten(), minlength=experts).tolist()


def median_graph_us(fn) -> float:
    return statistics.median(timer.graph(fn, args.iters))


def run(case: str, tokens: int, counts: list[int], n: int, k: int) -> None:
    e, rows = len(counts), sum(counts)
    st = stack(e, n, k)
    off = torch.tensor([0, *torch.tensor(counts).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    x = torch.randn(rows, k, device="cuda").to(torch.bfloat16)
    codes, scales = ha.quantize_act(x, act)
    touched = [i for i in range(e) if counts[i]]
    flop = 2.0 * rows * n * k
    base = {"case": case, "tokens": tokens, "rows": rows, "touched_experts": len(touched), "n": n, "k": k}

    def record(impl, fn, **extra):
        try:
            us = median_graph_us(fn)
        except Exception as exc:  # noqa: BLE001  (one implementation's failure is a result, not the end)
            points.append({**base, "impl": impl, "error": str(exc)[:300]})
            print(f"{case} tokens={tokens} {impl}: error {str(exc)[:200]}", flush=True)
            return
        points.append({**base, "impl": impl, "us": us, "tflops": flop / us / 1e6, **extra})
        print(
            f"{case} tokens={tokens} rows={rows} {impl}: {us:.1f} us, {flop / us / 1e6:.0f} TFLOP/s {extra}", flush=True
        )

    if "humming-aot" in impls:
        from humming_aot import _C as C

        cc, _ = C.device_cc()
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        name = C.select_grouped_instance(fmt, st.first.layout, n, k, max(1, rows // e), e, rows, cc, sms)
        record(
            "humming-aot",
            lambda: moe.moe_gemm(codes, st, off, fmt, rows_per_expert=max(1, rows // e), assignments=rows,
                                 a_scales=scales),
            instance=name,
        )  # fmt: skip
    for impl in impls:
        if impl.startswith("humming-aot="):
            from humming_aot import registry

            text = impl.split("=", 1)[1]
            forced = [
                i.name for i in registry.instances() if i.name.startswith(f"sm90_wgmma_moe_{fmt}_") and text in i.name
            ]
            if forced:
                record(
                    impl,
                    lambda name=forced[0]: moe.moe_gemm(codes, st, off, fmt, instance=name, a_scales=scales),
                    instance=forced[0],
                )
    bounds = [(i, int(off[i]), int(off[i + 1])) for i in touched]
    if "humming-aot-loop" in impls:
        experts = {i: st.expert(i) for i in touched}

        def loop():
            return [ha.gemm(codes[a:b], experts[i], fmt, a_scales=scales[a:b]) for i, a, b in bounds]

        record("humming-aot-loop", loop)
    if "cublaslt-fp8-loop" in impls:
        # cuBLASLt's FP8 GEMM takes row counts that are multiples of 16: each expert's rows padded
        # so (as a server without grouped kernels pads them), the padding rows computed too.
        if wfmt.startswith("e4m3"):
            w8 = st.codes.view(torch.float8_e4m3fn).view(e, -1, st.codes.shape[-1] * 4)[:, :n, :k]
        else:  # 4-bit experts: cuBLASLt has no such GEMM; its FP8 GEMM on 8-bit experts of the shape
            w8 = torch.zeros(e, n, k, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
        padded, at = [], 0
        for i, a, b in bounds:
            padded.append((i, at, at + -(-(b - a) // 16) * 16))
            at = padded[-1][2]
        a8 = torch.zeros(at, k, device="cuda").to(torch.float8_e4m3fn)
        row_scales = torch.ones(at, 1, device="cuda")
        col_scales = torch.ones(1, n, device="cuda")

        def scaled_loop():
            return [
                torch._scaled_mm(a8[a:b], w8[i].t(), scale_a=row_scales[a:b], scale_b=col_scales,
                                 out_dtype=torch.bfloat16)
                for i, a, b in padded
            ]  # fmt: skip

        record("cublaslt-fp8-loop", scaled_loop)


def layer(model: str, tokens_list: list[int]) -> None:
    experts, top_k, h, f = bench.MOE_MODELS[model]
    try:
        gu, dn = stack(experts, 2 * f, h), stack(experts, h, f)
        mlp = ha.QuantMoE([gu.expert(i) for i in range(experts)], [dn.expert(i) for i in range(experts)], top_k,
                          act_format=act)  # fmt: skip
    except Exception as exc:  # noqa: BLE001  (a result, as the GEMMs' errors are)
        points.append({"case": f"{model}:layer", "impl": "layer", "error": str(exc)[:300]})
        print(f"{model}:layer: error {str(exc)[:200]}", flush=True)
        return
    del gu, dn
    stacks.clear()
    for t in tokens_list:
        g = torch.Generator().manual_seed(t)
        x = torch.randn(t, h, generator=g).to(torch.bfloat16).cuda()
        logits = torch.randn(t, experts, generator=g).cuda()
        assert mlp._grouped_on(x), "the layer would run the per-expert loop"
        try:
            us = median_graph_us(lambda: mlp(x, logits))
        except Exception as exc:  # noqa: BLE001
            points.append({"case": f"{model}:layer", "tokens": t, "impl": "layer", "error": str(exc)[:300]})
            print(f"{model}:layer tokens={t}: error {str(exc)[:200]}", flush=True)
            continue
        points.append({"case": f"{model}:layer", "tokens": t, "rows": t * top_k, "impl": "layer", "us": us})
        print(f"{model}:layer tokens={t}: {us:.1f} us (the whole layer)", flush=True)


for spec in args.cases.split(";"):
    if "x" in spec and ":" not in spec:
        e, r = (int(v) for v in spec.split("x"))
        _, _, h, f = bench.MOE_MODELS["deepseek-v3"]
        run(spec, e * r, [r] * e, 2 * f, h)
        continue
    model, gemm, tokens = spec.split(":")
    if gemm == "layer":
        layer(model, [int(v) for v in tokens.split(",")])
        continue
    experts, top_k, h, f = bench.MOE_MODELS[model]
    n, k = (2 * f, h) if gemm == "gate_up" else (h, f)
    for t in (int(v) for v in tokens.split(",")):
        run(f"{model}:{gemm}", t, routed_counts(experts, top_k, t), n, k)
    with open(args.out, "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "format": args.format, "points": points}, fh, indent=1)
with open(args.out, "w") as fh:
    json.dump({"device": torch.cuda.get_device_name(), "format": args.format, "points": points}, fh, indent=1)
