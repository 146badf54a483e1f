"""Mixture-of-experts layers on the GPU: the experts' gate-up and down GEMMs of one MoE layer, per
implementation, at several token counts, in one run (issue 14, item 6).

Usage (on the GPU machine, after a build): python3 scripts/bench_moe.py OUT.json
    [--models deepseek-v3,qwen3-30b-a3b,mixtral-8x7b,gpt-oss-120b] [--tokens 1,8,64,...]
    [--impls humming-aot,torch-grouped-bf16,cublas-loop] [--format u4g128-sbf16] [--iters 10] [--routing-parts]
    [--model-routing] [--act e4m3-pt] [--jit-config w4a8]

Implementations, each on the same routing (router logits from a seeded generator, softmax top-k,
every token's rows sorted by expert; with --model-routing, each model's own rule where MODEL_ROUTING
lists it: DeepSeek-V3's sigmoid scores, correction bias and 8 groups, which humming-jit's points
then skip):
- humming-aot: humming_aot.moe.moe_gemm (the grouped sm90 instances) on the format, the experts'
  codes random (their values do not change the time), scales of a real quantization;
- torch-grouped-bf16: torch._grouped_mm on bf16 experts (the unquantized baseline);
- cublas-loop: one F.linear (cuBLAS bf16) per expert with rows, the loop a server without grouped
  kernels runs (the counts read on the host when the graph is captured);
- humming-aot-warp / humming-aot-lone: the same GEMMs on a forced grouped instance of the format,
  its producer warp walking the experts' tiles or its twin ending _lone (one producer thread walks
  them), of the same tile: the lowest built tile height that holds the rows per expert, its
  narrowest channel tile; humming-aot-wide / humming-aot-wide-lone the widest channel tile of that
  height (t8x256 where built); humming-aot-split / humming-aot-wide-split the twins that split
  each tile's K into shares (names ending _ks: experimental, a +experimental build has them; the
  shares come from scheduler/moe.h grouped_k_shares). For an A/B of the walks and widths in one
  build (humming-aot's points record the instances its default choice ran, "instances": [gate-up,
  down]). Each with the suffix -cover (humming-aot-lone-cover, ...): the tile height that holds
  the mean rows per expert plus two standard deviations (2 sqrt(mean)), where a routing's counts
  spread past the mean;
- humming-aot-heights: one point per built tile height near the mean rows per expert (from 2.5
  times below it to 4 times above, at least 8), named humming-aot-h{height}, each the default
  choice with that height fixed (its width and walk picked from the routed rows, _C.grouped_variant):
  the data the grouped height rule (humming.h, expected_row_tiles) was checked on;
- humming-jit: humming-kernels 0.1.20 (the JIT Humming library) HummingLayer with num_experts,
  quantized from bf16 experts (u4 g128, bench.JIT_CONFIGS["w4a16"], or with --jit-config w4a8 e2m1
  per channel x e4m3 per token, its layer quantizing the bf16 rows inside each call, as humming-aot
  does with --act e4m3-pt: pair them with --format e2m1gc-sbf16), its grouped-contiguous GEMM
  (expert_layout = the offsets of the rows sorted by expert). It registers ops in the same
  torch.ops.humming namespace as humming-aot, so it runs in a child process of this script
  (--jit-worker) that never loads humming_aot._C, within --jit-budget-s; the child routes the same
  seeded logits with torch.topk (the experts softmax top-k picks) and times the GEMMs the same way.
  Each new shape and row count compiles first (about 11 s, outside the timing). First run in
  session 27 (carry .peer; the child needs PYTHONPATH to the unpacked wheel, as scripts/gpu_bench.sh
  sets it): it timed Qwen3-30B-A3B, and failed on gpt-oss-120b's K = 2880 in its own launcher
  (22 scale groups where it checks for 23), recorded as an error.
Each point is the median CUDA-graph replay of the two GEMMs, after a read flush of 256 MiB
(bench.Timer, as scripts/time_shapes.py --graph --flush read); the routing helpers (top-k, align,
permute, combine: humming_aot.moe) are timed on their own
the same way, and so is the whole layer as QuantMoE runs it (route, permute, the gate-up GEMM with
the activation in it, down, combine; with --act, as QuantMoE runs it since session 46: the gate-up
GEMM's rows quantized as they are gathered, moe.permute_quantize; layer_unfused_us: the same with
the gate-up GEMM and the activation apart; with --act, layer_two_pass_us: the rows permuted in 16
bits and then quantized, as QuantMoE ran them before session 46); the helpers also without the flush (us_warm: their small inputs, code and
parameters cached, as the router GEMM and the previous layer leave them in a model). The
humming-aot points also time the gate-up GEMM with the activation (us_gate_up_act: in the kernel's
epilogue where it can) and the GEMM followed by the activation kernel (us_gate_up_then_act). For
each point the bytes of the touched experts' weights give the weight bandwidth (GB/s).
Writes JSON {"device", "format", "points": [{model, tokens, impl, us, us_gate_up, us_down,
touched_experts, weight_gbs[, us_gate_up_act, us_gate_up_then_act]}], "routing": [{model, tokens,
us, us_warm[, parts][, layer_us, layer_unfused_us[, layer_two_pass_us]]}]} and the same as a markdown table
(OUT.md) after every model, and prints one line per point.
"""

import argparse
import json
import math
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as Fn

from humming_aot import bench  # no humming_aot._C: the humming-jit child imports this too

MODELS = bench.MOE_MODELS  # (experts, top_k, hidden H, intermediate F)
# Routing as the checkpoints configure it (--model-routing), topk_route's keywords; the correction
# bias is drawn per run (seeded). Models not listed route with softmax top-k, renormalized.
MODEL_ROUTING = {"deepseek-v3": {"scoring": "sigmoid", "n_group": 8, "topk_group": 4, "scaling": 2.5, "bias": True}}

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--models", default=",".join(MODELS))
ap.add_argument("--tokens", default="1,8,64,256,1024,4096,16384")
ap.add_argument(
    "--impls",
    default="humming-aot,torch-grouped-bf16,cublas-loop",
    help="add humming-jit for the peer; humming-aot-warp,humming-aot-lone compare the grouped kernels' walks",
)
ap.add_argument("--format", default="u4g128-sbf16")
ap.add_argument(
    "--act",
    default="bf16",
    help="humming-aot's activations: bf16 (W4A16, the default) or an 8-bit format (e4m3-pt: W4A8 with "
    "--format e2m1gc-sbf16 or u4g128-sbf16, the experts in layout 4, sm90a8), quantized inside each timed call",
)
ap.add_argument(
    "--jit-config",
    default="w4a16",
    choices=sorted(bench.JIT_CONFIGS),
    help="humming-jit's format (bench.JIT_CONFIGS; w4a8: e2m1 per channel x e4m3 per token, which its "
    "layer quantizes inside each call; pair it with --format e2m1gc-sbf16 --act e4m3-pt)",
)
ap.add_argument("--routing-parts", action="store_true", help="also time top-k, align, permute and combine apart")
ap.add_argument(
    "--model-routing",
    action="store_true",
    help="route each model as its checkpoint does (DeepSeek-V3: sigmoid scores, a correction bias, 8 groups of "
    "which the best 4, scaling 2.5) instead of softmax top-k for every model",
)
ap.add_argument("--iters", type=int, default=10)
ap.add_argument(
    "--jit-budget-s", type=float, default=600.0, help="wall-clock limit of the humming-jit child process (default 600)"
)
ap.add_argument("--jit-worker", action="store_true", help=argparse.SUPPRESS)  # the child: OUT gets its points
args = ap.parse_args()
impls = args.impls.split(",")
# Forced grouped instances: (lone walk, wide tile) of grouped_instance. With the suffix -cover, the
# tile height holds the rows per expert plus two standard deviations of a uniform routing's counts
# (about sqrt(rows) each), so that few experts spill into a second, mostly empty row tile.
FORCED = {
    f"humming-aot-{walk}{cover}": (walk.endswith("lone"), walk.startswith("wide"), bool(cover), walk.endswith("split"))
    for walk in ("warp", "lone", "wide", "wide-lone", "split", "wide-split")
    for cover in ("", "-cover")
}
timer = bench.Timer(256, "read")
fmt = f"a-{args.act}_w-{args.format}_c-bf16"
# 8-bit activations: the W4A8 grouped tiles read the experts in layout 4 (sm90a8), the others layout 3.
A8 = args.act != "bf16"
LAYOUT, LAYOUT_NAME = (4, "sm90a8") if A8 else (3, "sm90")
points, routing = [], []


def grouped_instance(rows_per_expert: int, lone: bool, wide: bool = False, split: bool = False) -> str:
    """The built grouped instance of the format with the lowest tile height that holds
    rows_per_expert (else the tallest), its producer walking alone (names ending _lone) or not,
    splitting its tiles' K (names ending _ks, experimental builds) or not, of the narrowest channel
    tile of that height (or with wide, the widest)."""
    from humming_aot import registry

    built = [
        i
        for i in registry.instances()
        if i.name.startswith(f"sm90_wgmma_moe_{fmt}_")
        and i.name.endswith("_lone") == lone
        and i.name.endswith("_ks") == split
    ]
    if not built:
        ending = "_lone" if lone else "_ks" if split else ""
        raise RuntimeError(f"this build has no grouped instance of {fmt} {'ending ' + ending if ending else ''}")
    fits = [i for i in built if i.tile[0] >= rows_per_expert]
    height = min(i.tile[0] for i in fits) if fits else max(i.tile[0] for i in built)
    same = [i for i in built if i.tile[0] == height]
    return (max if wide else min)(same, key=lambda i: i.tile[1]).name


def built_heights() -> list[int]:
    """The tile heights of the format's built grouped instances."""
    from humming_aot import registry

    return sorted({i.tile[0] for i in registry.instances() if i.name.startswith(f"sm90_wgmma_moe_{fmt}_")})


def height_instance(height: int, n: int, k: int, experts: int, assignments: int) -> str:
    """The default choice's instance with the tile height fixed: the narrowest warp-walk tile of
    that height, then the wide twin or lone walk the routed rows ask for (humming.h, grouped_pick)."""
    from humming_aot import _C as C

    cc, _ = C.device_cc()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    base = grouped_instance(height, lone=False)
    return C.grouped_variant(base, fmt, LAYOUT, n, k, experts, assignments, cc, sms)


def default_instance(n: int, k: int, rows_per_expert: int, experts: int, assignments: int) -> str:
    """The instance humming-aot's default choice runs for one grouped GEMM on this device."""
    from humming_aot import _C as C

    cc, _ = C.device_cc()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return C.select_grouped_instance(fmt, LAYOUT, n, k, rows_per_expert, experts, assignments, cc, sms)


def median_graph_us(fn) -> float:
    return statistics.median(timer.graph(fn, args.iters))


def jit_layer(w: torch.Tensor):
    """humming-kernels' MoE layer for experts w [E, N, K] (bf16), quantized by its own quantizer."""
    from humming.layer import HummingLayer

    e, n, k = w.shape
    config = dict(bench.JIT_CONFIGS[args.jit_config])
    act = config.pop("input", None)  # w4a8: its layer quantizes the bf16 rows inside each call
    layer = HummingLayer(
        shape_n=n,
        shape_k=k,
        weight_config=config,
        input_config=dict(act) if act else None,
        num_experts=e,
        torch_dtype=torch.bfloat16,
    ).to("cuda")
    layer.load_from_unquantized(w)
    layer.transform()
    return layer


def jit_bytes(layer) -> int:
    return sum(t.numel() * t.element_size() for name, t in layer.state_dict().items() if name != "locks")


def jit_worker() -> None:
    """The humming-jit child (--jit-worker): every model and token count of the arguments, the
    rows routed by torch.topk of the parent's seeded logits, written to args.out after each model.
    Imports humming-kernels but never humming_aot._C."""
    deadline = time.perf_counter() + 0.9 * args.jit_budget_s
    out = []

    def write():
        pathlib.Path(args.out).write_text(json.dumps(out))

    for model in args.models.split(","):
        e, top_k, h, f = MODELS[model]
        w = tuple(torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for n, k in ((2 * f, h), (h, f)))
        try:
            jit = tuple(jit_layer(x) for x in w)
        except Exception as ex:  # the peer missing or refusing the shape: every point says so
            jit = f"{type(ex).__name__}: {ex}"[:300]
        del w
        for tokens in [int(t) for t in args.tokens.split(",")]:
            point = {"model": model, "tokens": tokens, "impl": "humming-jit"}
            if args.model_routing and model in MODEL_ROUTING:
                # This process does not load humming_aot's kernels, whose routing the others share.
                point["error"] = "the peer is timed on softmax top-k routing only: run without --model-routing"
                out.append(point)
                continue
            if isinstance(jit, str) or time.perf_counter() > deadline:
                point["error"] = (
                    jit
                    if isinstance(jit, str)
                    else f"the child's budget (--jit-budget-s {args.jit_budget_s:g}) ran out"
                )
                out.append(point)
                continue
            try:
                gen = torch.Generator(device="cuda").manual_seed(tokens)
                logits = torch.randn(tokens, e, device="cuda", generator=gen)
                counts = torch.bincount(torch.topk(logits, top_k, dim=1).indices.flatten(), minlength=e)
                layout = torch.cat([counts.new_zeros(1), counts.cumsum(0)]).long()
                rows = torch.randn(tokens * top_k, h, device="cuda", dtype=torch.bfloat16)
                act = torch.randn(tokens * top_k, f, device="cuda", dtype=torch.bfloat16)
                grouped = {"gemm_type": "grouped_contiguous"}
                parts = [
                    lambda: jit[0](rows, expert_layout=layout, compute_config=grouped),
                    lambda: jit[1](act, expert_layout=layout, compute_config=grouped),
                ]
                for part in parts:  # its first call of a row count compiles: outside the timing
                    part()
                torch.cuda.synchronize()
                us_parts = [median_graph_us(p) for p in parts]
                us = median_graph_us(lambda: [p() for p in parts])
                touched = int((counts > 0).sum())
                wbytes = touched * sum(jit_bytes(j) / e for j in jit)
                point.update(us=us, us_gate_up=us_parts[0], us_down=us_parts[1], touched_experts=touched)
                point["weight_gbs"] = wbytes / us / 1e3
            except Exception as ex:  # a point the peer cannot run: recorded, the run goes on
                point["error"] = f"{type(ex).__name__}: {ex}"[:300]
            out.append(point)
            print(
                f"{model} T={tokens} humming-jit: " + (f"{point['us']:.1f} us" if "us" in point else point["error"]),
                flush=True,
            )
            write()
        jit = None  # the layers' memory goes before the next model's
        torch.cuda.empty_cache()
    write()


def jit_points() -> tuple[dict, str]:
    """humming-jit's points by (model, tokens), measured by a child process of this script (see
    the module doc); a child that fails or runs out of time leaves its reason on the points it
    did not reach."""
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "jit.json"
        cmd = [sys.executable, __file__, str(out), "--jit-worker", "--models", args.models, "--tokens", args.tokens]
        cmd += ["--iters", str(args.iters), "--jit-budget-s", str(args.jit_budget_s), "--jit-config", args.jit_config]
        cmd += ["--model-routing"] if args.model_routing else []
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        try:
            text, _ = proc.communicate(timeout=args.jit_budget_s)
            status = f"exit status {proc.returncode}"
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # its compilers too
            except ProcessLookupError:
                pass
            text, _ = proc.communicate()
            status = f"killed after {args.jit_budget_s:g} s"
        for line in (text or "").splitlines():
            print("  [jit] " + line, flush=True)
        got = {(p["model"], p["tokens"]): p for p in json.loads(out.read_text())} if out.is_file() else {}
    tail = " | ".join((text or "").strip().splitlines()[-2:])[-300:]
    return got, f"the humming-jit child ended ({status}) before this point. Last output: {tail}"


if args.jit_worker:
    jit_worker()
    sys.exit(0)

import humming_aot as ha  # noqa: E402  (after the child's exit: it must not load humming_aot._C)
from humming_aot import moe  # noqa: E402
from humming_aot import reference as R  # noqa: E402

jit_measured, jit_missing = jit_points() if "humming-jit" in impls else ({}, "")


def gemm(x: torch.Tensor, stack: moe.StackedExperts, offsets: torch.Tensor, **kw) -> torch.Tensor:
    """humming-aot's grouped GEMM of bf16 rows x: with 8-bit activations (--act), x quantized per
    call first (ha.quantize_act), as a layer runs it and as humming-jit's W4A8 layer does inside;
    or x given quantized, (codes, scales)."""
    if isinstance(x, tuple):
        return moe.moe_gemm(x[0], stack, offsets, fmt, a_scales=x[1], **kw)
    if not A8:
        return moe.moe_gemm(x, stack, offsets, fmt, **kw)
    codes, scales = ha.quantize_act(x, args.act)
    return moe.moe_gemm(codes, stack, offsets, fmt, a_scales=scales, **kw)


def quantized_stack(e: int, n: int, k: int) -> moe.StackedExperts:
    """E experts of [n, k] in the format, packed for the sm90 kernels: one real quantization for
    the scales, random codes for every expert."""
    g = torch.Generator().manual_seed(n * 7 + k)
    q = R.quantize_weight(torch.randn(n, k, generator=g) * 0.02, args.format)
    w = ha.pack_weight(q, layout=LAYOUT_NAME).to("cuda")
    codes = torch.randint(-(2**31), 2**31 - 1, (e, *w.codes.shape), dtype=torch.int32, device="cuda")
    rep = lambda t: None if t is None else t.unsqueeze(0).expand(e, *t.shape).contiguous()  # noqa: E731
    return moe.StackedExperts(codes, rep(w.scales), rep(w.zeros), w)


def table(points: list, routing: list) -> str:
    """The run as a markdown table: per model and token count, each implementation's µs (gate-up +
    down), humming-aot's speed-up over torch's bf16 grouped GEMM, its weight bandwidth, the
    routing helpers' share of the layer, their time with the L2 warm, and the whole layer (as QuantMoE runs it) with the share
    of it beyond humming-aot's two GEMMs (issue 14's target: at most 10 % up to 64 tokens)."""
    pts = {(p["model"], p["tokens"], p["impl"]): p for p in points}
    rt = {(r["model"], r["tokens"]): r["us"] for r in routing}
    warm = {(r["model"], r["tokens"]): r["us_warm"] for r in routing if "us_warm" in r}
    lay = {(r["model"], r["tokens"]): r["layer_us"] for r in routing if "layer_us" in r}
    names = list(dict.fromkeys(p["impl"] for p in points))
    head = ["model", "tokens", *names, "aot / grouped bf16", "aot weight GB/s", "routing", "routing share",
            "routing, warm L2", "layer", "layer beyond the GEMMs"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (len(head) - 2)]
    for model, tokens in dict.fromkeys((p["model"], p["tokens"]) for p in points):
        row = [model, str(tokens)]
        for impl in names:
            p = pts.get((model, tokens, impl), {})
            row.append(f"{p['us']:.1f}" if "us" in p else ("error" if p else "-"))
        aot, bf16 = pts.get((model, tokens, "humming-aot"), {}), pts.get((model, tokens, "torch-grouped-bf16"), {})
        row.append(f"{bf16['us'] / aot['us']:.2f}" if "us" in aot and "us" in bf16 else "-")
        row.append(f"{aot['weight_gbs']:.0f}" if "us" in aot else "-")
        r = rt.get((model, tokens))
        row.append(f"{r:.1f}" if r is not None else "-")
        row.append(f"{r / (r + aot['us']) * 100:.0f}%" if r is not None and "us" in aot else "-")
        row.append(f"{warm[(model, tokens)]:.1f}" if (model, tokens) in warm else "-")
        whole = lay.get((model, tokens))
        row.append(f"{whole:.1f}" if whole is not None else "-")
        row.append(f"{(whole - aot['us']) / whole * 100:.0f}%" if whole is not None and "us" in aot else "-")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def save() -> None:
    with open(args.out, "w") as f:
        json.dump(
            {
                "device": torch.cuda.get_device_name(),
                "format": args.format,
                "act": args.act,
                "jit_config": args.jit_config,
                "model_routing": args.model_routing,
                "points": points,
                "routing": routing,
            },
            f,
            indent=0,
        )
    with open(args.out.removesuffix(".json") + ".md", "w") as f:
        f.write(table(points, routing))


for model in args.models.split(","):
    e, top_k, h, f = MODELS[model]
    stacks = bf16 = None
    if any(i.startswith("humming-aot") for i in impls):
        stacks = (quantized_stack(e, 2 * f, h), quantized_stack(e, h, f))
    if {"torch-grouped-bf16", "cublas-loop"} & set(impls):
        # [E, N, K] per GEMM; _grouped_mm takes the transposed view [E, K, N].
        bf16 = tuple(torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for n, k in ((2 * f, h), (h, f)))
    code_bytes = [None if stacks is None else s.codes[0].numel() * 4 + s.scales[0].numel() * 2 for s in stacks or ()]
    route_kw = dict(MODEL_ROUTING.get(model, {})) if args.model_routing else {}
    if route_kw.pop("bias", False):
        route_kw["correction_bias"] = torch.randn(
            e, device="cuda", generator=torch.Generator(device="cuda").manual_seed(e)
        )
        route_kw["correction_bias"] *= 0.1
    for tokens in [int(t) for t in args.tokens.split(",")]:
        gen = torch.Generator(device="cuda").manual_seed(tokens)
        logits = torch.randn(tokens, e, device="cuda", generator=gen)
        x = torch.randn(tokens, h, device="cuda", dtype=torch.bfloat16)
        weights, ids = moe.topk_route(logits, top_k, **route_kw)
        al = moe.moe_align(ids, e, 1)
        rows = moe.permute(x, al)
        counts = al.counts.tolist()
        touched = sum(c > 0 for c in counts)
        act = torch.randn(rows.shape[0], f, device="cuda", dtype=torch.bfloat16)

        def route():
            # What a layer adds around its GEMMs (as QuantMoE runs them): choose, align, permute in,
            # combine out.
            w_, i_ = moe.topk_route(logits, top_k, **route_kw)
            a_ = moe.moe_align(i_, e, 1, check_ids=False)
            return moe.combine(moe.permute(x, a_), a_, w_)

        entry = {"model": model, "tokens": tokens, "us": median_graph_us(route)}
        # The same graph with the L2 warm (no flush): the helpers' logits, activations, code and
        # parameters cached, as a model's router GEMM and previous layer leave them.
        entry["us_warm"] = statistics.median(timer.graph(route, args.iters, flush=False))
        if args.routing_parts:  # each helper on its own (graph replay after the flush, as above)
            entry["parts"] = {
                "topk": median_graph_us(lambda: moe.topk_route(logits, top_k, **route_kw)),
                "align": median_graph_us(lambda: moe.moe_align(ids, e, 1, check_ids=False)),
                "permute": median_graph_us(lambda: moe.permute(x, al)),
                "combine": median_graph_us(lambda: moe.combine(rows, al, weights)),
            }
            print(f"{model} T={tokens} routing {entry['us']:.1f} us: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in entry["parts"].items()), flush=True)  # fmt: skip
        per_expert = max(1, rows.shape[0] // e)  # as QuantMoE's: capacity // experts
        if stacks is not None:
            # The whole layer as QuantMoE runs it (route, permute, gate-up, the activation, down,
            # combine), one graph: what the helpers and the activation add to the two GEMMs.
            # fused: the activation in the gate-up GEMM (moe_gemm's `activation`, in the kernel's
            # epilogue where it can), as QuantMoE runs it; else the GEMM, then moe.activate.
            def layer(fused=True, gather_quantized=True):
                w_, i_ = moe.topk_route(logits, top_k, **route_kw)
                a_ = moe.moe_align(i_, e, 1, check_ids=False)
                routed_ = tokens * top_k
                kw = {"rows_per_expert": per_expert, "assignments": routed_}
                if A8 and gather_quantized:
                    rows_ = moe.permute_quantize(x, a_, args.act)
                else:
                    rows_ = moe.permute(x, a_)
                if fused:
                    act_ = gemm(rows_, stacks[0], a_.offsets, activation="silu", **kw)
                else:
                    act_ = moe.activate(gemm(rows_, stacks[0], a_.offsets, **kw), dtype=x.dtype)
                return moe.combine(gemm(act_, stacks[1], a_.offsets, **kw), a_, w_)

            try:
                entry["layer_us"] = median_graph_us(layer)
                entry["layer_unfused_us"] = median_graph_us(lambda: layer(False))
                if A8:
                    entry["layer_two_pass_us"] = median_graph_us(lambda: layer(True, False))
            except Exception as ex:  # recorded, the run goes on
                entry["layer_error"] = f"{type(ex).__name__}: {ex}"[:300]
        routing.append(entry)
        mean = rows.shape[0] / e
        heights = {
            f"humming-aot-h{t}": t
            for t in (built_heights() if "humming-aot-heights" in impls else ())
            if mean / 2.5 <= t <= 4 * max(8.0, mean)
        }
        for impl in [i for i in impls if i != "humming-aot-heights"] + list(heights):
            if impl == "humming-jit":  # measured by the child process (jit_points)
                jp = jit_measured.get((model, tokens), {"model": model, "tokens": tokens, "impl": impl})
                jp = jp if "us" in jp or "error" in jp else dict(jp, error=jit_missing)
                points.append(jp)
                print(
                    f"{model} T={tokens} {impl}: " + (f"{jp['us']:.1f} us" if "us" in jp else jp["error"]), flush=True
                )
                continue
            try:
                if impl in FORCED or impl in heights or impl == "humming-aot":
                    gu, dn = stacks
                    routed = tokens * top_k  # picks the producer's walk where no instance is forced
                    shapes = ((2 * f, h), (h, f))  # gate-up, down
                    forced = ["", ""]  # the instance named for each GEMM ("": the default choice)
                    if impl in FORCED:
                        lone, wide, cover, split = FORCED[impl]
                        height = max(per_expert, math.ceil(mean + 2 * math.sqrt(mean))) if cover else per_expert
                        forced = [grouped_instance(height, lone, wide, split)] * 2
                    elif impl in heights:  # the width and walk may differ between the two GEMMs
                        forced = [height_instance(heights[impl], n_, k_, e, routed) for n_, k_ in shapes]
                    ran = [
                        name or default_instance(n_, k_, per_expert, e, routed)
                        for name, (n_, k_) in zip(forced, shapes, strict=True)
                    ]
                    parts = [
                        lambda: gemm(
                            rows, gu, al.offsets, rows_per_expert=per_expert, instance=forced[0], assignments=routed
                        ),
                        lambda: gemm(
                            act, dn, al.offsets, rows_per_expert=per_expert, instance=forced[1], assignments=routed
                        ),
                    ]
                    wbytes = touched * sum(code_bytes)
                elif impl == "torch-grouped-bf16":
                    ends = al.offsets[1:].contiguous()
                    w1t, w2t = (w.transpose(1, 2) for w in bf16)
                    parts = [
                        lambda: torch._grouped_mm(rows, w1t, offs=ends),
                        lambda: torch._grouped_mm(act, w2t, offs=ends),
                    ]
                    wbytes = touched * sum(w[0].numel() * 2 for w in bf16)
                else:
                    off = al.offsets.tolist()
                    live = [i for i in range(e) if counts[i] > 0]

                    def loop(inp, w):
                        return [Fn.linear(inp[off[i] : off[i + 1]], w[i]) for i in live]

                    parts = [lambda: loop(rows, bf16[0]), lambda: loop(act, bf16[1])]
                    wbytes = touched * sum(w[0].numel() * 2 for w in bf16)
                us_parts = [median_graph_us(p) for p in parts]
                us = median_graph_us(lambda: [p() for p in parts])
                row = {
                    "model": model,
                    "tokens": tokens,
                    "impl": impl,
                    "us": us,
                    "us_gate_up": us_parts[0],
                    "us_down": us_parts[1],
                    "touched_experts": touched,
                    "weight_gbs": wbytes / us / 1e3,
                }
                if impl in FORCED or impl in heights or impl == "humming-aot":
                    row["instances"] = ran  # gate-up, down
                if impl == "humming-aot" and not A8:
                    # The gate-up GEMM with the activation: fused where the kernel can, and the
                    # GEMM followed by moe.activate.
                    kw = {"rows_per_expert": per_expert, "assignments": routed}
                    row["us_gate_up_act"] = median_graph_us(
                        lambda: moe.moe_gemm(rows, gu, al.offsets, fmt, activation="silu", **kw)
                    )
                    row["us_gate_up_then_act"] = median_graph_us(
                        lambda: moe.activate(moe.moe_gemm(rows, gu, al.offsets, fmt, **kw), dtype=x.dtype)
                    )
            except Exception as ex:  # a peer that cannot run a shape: recorded, the run goes on
                row = {"model": model, "tokens": tokens, "impl": impl, "error": f"{type(ex).__name__}: {ex}"[:300]}
            points.append(row)
            if "error" in row:
                print(f"{model} T={tokens} {impl}: {row['error']}", flush=True)
            else:
                print(
                    f"{model} T={tokens} {impl}: {row['us']:.1f} us (gate-up {us_parts[0]:.1f}, down "
                    f"{us_parts[1]:.1f}); {touched} experts touched, weights at {row['weight_gbs']:.0f} GB/s; "
                    f"routing {routing[-1]['us']:.1f} us"
                    + (
                        f"; gate-up with the activation {row['us_gate_up_act']:.1f} us against "
                        f"{row['us_gate_up_then_act']:.1f} apart; layer {routing[-1].get('layer_us', 0):.1f} "
                        f"against {routing[-1].get('layer_unfused_us', 0):.1f}"
                        if "us_gate_up_act" in row
                        else ""
                    )
                    + (
                        f"; layer {routing[-1]['layer_us']:.1f} us (rows permuted, then quantized: "
                        f"{routing[-1]['layer_two_pass_us']:.1f})"
                        if "layer_two_pass_us" in routing[-1]
                        else ""
                    ),
                    flush=True,
                )
    save()
    del stacks, bf16
    torch.cuda.empty_cache()
save()
