"""Kernel time of humming-aot layers over a few shapes, for quick A/B runs on the GPU machine.

Usage: python3 scripts/time_shapes.py NxK[,NxK...] M[,M...] [--format F] [--act A] [--layout L] [--instances A,B,...] [--graph]
       [--flush write|read|none] [--cublaslt] [--lead CYCLES] [--weights linear|randn]
Prints one line per point: median microseconds of single calls, each after an L2 flush. Eager:
CUDA events around the call (the flush kernel covers the host's launch cost). --graph: the call
captured in a CUDA graph and replayed after the flush (GPU time only). --instances: time each named
instance (or each built instance matching --match) instead of the dispatcher's choice (names that do not compute the format are reported and
skipped). --layout: pack for this layout (sm80, sm90) instead of the default. Run it in separate processes to compare environment settings such as HUMMING_STREAM_K.
"""

import argparse
import re
import statistics

import torch

import humming_aot as ha
from humming_aot.bench import prequantized_gemm

ap = argparse.ArgumentParser()
ap.add_argument("shapes")
ap.add_argument("ms")
ap.add_argument("--format", default="u4g128-sbf16")
ap.add_argument("--act", default=None, help="activation format (default bf16), e.g. e4m3-pt: quantized in each call")
ap.add_argument("--instances", default="")
ap.add_argument("--match", default="", help="time every built instance whose name matches this regular expression")
ap.add_argument("--graph", action="store_true")
ap.add_argument("--layout", default="auto")
ap.add_argument(
    "--prequant",
    action="store_true",
    help="with a quantized --act: quantize the activations once, before timing, and time the GEMM alone "
    "(torch.ops.humming.gemm, as the benchmark's humming-aot-gemm rows)",
)
ap.add_argument("--iters", type=int, default=15)
ap.add_argument(
    "--lead",
    type=int,
    default=0,
    help="a kernel of the caller's before each call (torch.cuda._sleep of this many cycles, in the graph too), as a "
    "model's previous kernel comes before a layer: the times printed are those of the pair less those of the sleep "
    "alone, so that a launch that overlaps the kernel before it shows",
)
ap.add_argument(
    "--weights",
    choices=("linear", "randn"),
    default="linear",
    help="the weight before quantization: torch.nn.Linear's uniform initialization (default) or standard normal "
    "values, as the benchmark (python -m humming_aot.bench) quantizes; the codes of the two spread differently",
)
ap.add_argument(
    "--cublaslt",
    action="store_true",
    help="also time cuBLASLt's FP8 GEMM (torch._scaled_mm, row-wise fp32 scales, bf16 out) on each shape and M, "
    "the same-run peer of the 8-bit formats",
)
ap.add_argument(
    "--flush",
    choices=("write", "read", "none"),
    default="write",
    help="before each call: zero a 256 MiB buffer (as the benchmark does; L2 is left full of dirty "
    "lines), read it (clean lines), or nothing",
)
args = ap.parse_args()
shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
ms = [int(v) for v in args.ms.split(",")]
names = [s for s in args.instances.split(",") if s]
if args.match:
    from humming_aot import registry

    names += [i.name for i in registry.instances() if re.search(args.match, i.name)]
names = names or [""]
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")


def timed(fn):
    times = []
    for _ in range(args.iters):
        if args.flush == "write":
            flush.zero_()
        elif args.flush == "read":
            flush.max()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000)
    return statistics.median(times)


def graph_us(call) -> float:
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        call()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        call()
    us = timed(g.replay)
    del g
    return us


for n, k in shapes:
    if args.cublaslt:
        w8 = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
        for m in ms:
            a8 = torch.randn(-(-m // 16) * 16, k, device="cuda").to(torch.float8_e4m3fn)
            sa, sw = torch.ones(a8.shape[0], 1, device="cuda"), torch.ones(1, n, device="cuda")

            def peer(a8=a8, w8=w8, sa=sa, sw=sw):
                return torch._scaled_mm(a8, w8.t(), scale_a=sa, scale_b=sw, out_dtype=torch.bfloat16)

            line = f"{n}x{k} m={m}: eager {timed(peer):8.1f} us"
            if args.graph:
                line += f"  graph {graph_us(peer):8.1f} us"
            print(f"{line}  cublaslt-fp8", flush=True)
        del w8
    lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
    if args.weights == "randn":
        with torch.no_grad():
            lin.weight.normal_()
    layer = ha.QuantLinear.from_linear(lin, args.format, args.act, device="cuda", layout=args.layout)
    for name in names:
        layer.instance = name
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            try:
                layer(x)
            except (RuntimeError, ValueError) as e:  # ValueError: the weight is packed for another layout
                print(f"{n}x{k} m={m}: {name}: {str(e).splitlines()[0]}", flush=True)
                continue
            call = (lambda: layer(x)) if not args.prequant else prequantized_gemm(layer, x, name)
            lead_us = lead_graph_us = 0.0
            if args.lead:
                own = call

                def sleep():
                    torch.cuda._sleep(args.lead)

                def call(own=own):
                    sleep()
                    return own()

                lead_us = timed(sleep)
                lead_graph_us = graph_us(sleep) if args.graph else 0.0
            us = timed(call) - lead_us
            line = f"{n}x{k} m={m}: eager {us:8.1f} us"
            if args.graph:
                line += f"  graph {graph_us(call) - lead_graph_us:8.1f} us"
            if args.lead:
                line += f"  (after a sleep of {lead_us:.1f} / {lead_graph_us:.1f} us)"
            print(f"{line}  {layer.instance_for(m, 'cuda')}", flush=True)
    del layer, lin
