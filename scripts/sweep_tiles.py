"""Time every built instance of one format over the shape corpus and a list of M, for tuning the
device tables (python/humming_aot/tables/*.json) on measurements rather than a few named shapes.

Usage (on the GPU machine, after a build): python3 scripts/sweep_tiles.py OUT.json [--format F]
    [--act A] [--layout L] [--match REGEX] [--ms 1,16,...] [--shapes corpus|NxK,...] [--iters N]
Each point is the median CUDA-graph replay time (GPU time only) of single calls, each after an L2
flush that reads a 256 MiB buffer, as scripts/time_shapes.py --graph --flush read. For every
(shape, M) the dispatcher's own choice is recorded too, so the file tells how far the table is from
the fastest instance. Instances whose token tile is far from M are skipped (more than 16 token
tiles, or a tile more than 4x taller than M): they are never the fastest and cost the most time
(--max-tile-rows raises the first limit, for sweeps of large M).
Writes JSON: {"device", "format", "act", "layout", "points": [{"n", "k", "m", "instance", "us"}], "chosen":
[{"n", "k", "m", "instance"}]} and prints one line per (shape, M) with the fastest and the chosen.
"""

import argparse
import json
import re
import statistics

import torch

import humming_aot as ha
from humming_aot import bench, registry

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--format", default="u4g128-sbf16")
ap.add_argument("--act", default=None, help="activation format (default bf16), e.g. e4m3-pt: quantized in each call")
ap.add_argument("--layout", default="sm90", help="layout to pack for (the 8-bit activation kernels read generic)")
ap.add_argument("--match", default=r"^sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_")
ap.add_argument("--ms", default="1,8,16,24,32,48,64,96,128,192,256,384,512,768,1024,2048,4096")
ap.add_argument("--shapes", default="corpus")
ap.add_argument("--iters", type=int, default=10)
ap.add_argument(
    "--max-tile-rows", type=int, default=16, help="skip instances that need more rows of token tiles than this"
)
args = ap.parse_args()

if args.shapes == "corpus":
    shapes = bench.corpus_shapes(bench.load_corpus())
else:
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
ms = [int(v) for v in args.ms.split(",")]
names = [i.name for i in registry.instances() if re.search(args.match, i.name)]
if not names:
    raise SystemExit(f"no built instance matches {args.match!r}")
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")


def token_tile(name: str) -> int:
    return int(re.search(r"_t(\d+)x", name).group(1))


def graph_us(layer, x) -> float:
    layer(x)  # first call outside the graph: tensor maps and plans are made here
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        layer(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        layer(x)
    times = []
    for _ in range(args.iters):
        flush.max()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000)
    del g
    return statistics.median(times)


points, chosen = [], []


def save() -> None:
    # After every shape, so that a run cut short keeps what it measured.
    with open(args.out, "w") as f:
        json.dump(
            {
                "device": torch.cuda.get_device_name(),
                "format": args.format,
                "act": args.act or "bf16",
                "layout": args.layout,
                "points": points,
                "chosen": chosen,
            },
            f,
            indent=0,
        )


for n, k in shapes:
    lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
    layer = ha.QuantLinear.from_linear(lin, args.format, args.act, device="cuda", layout=args.layout)
    for m in ms:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        layer.instance = ""
        pick = layer.instance_for(m, "cuda")
        chosen.append({"n": n, "k": k, "m": m, "instance": pick})
        here = []
        for name in names:
            bm = token_tile(name)
            if -(-m // bm) > args.max_tile_rows or bm > 4 * max(m, 8):
                continue
            layer.instance = name
            try:
                us = graph_us(layer, x)
            except RuntimeError as e:
                print(f"{n}x{k} m={m}: {name}: {str(e).splitlines()[0]}", flush=True)
                continue
            here.append((us, name))
            points.append({"n": n, "k": k, "m": m, "instance": name, "us": round(us, 2)})
        if here:
            best = min(here)
            mine = next((us for us, nm in here if nm == pick), None)
            tail = f"chosen {mine:.1f} us ({pick[-28:]})" if mine is not None else f"chosen {pick} (not timed)"
            print(f"{n}x{k} m={m}: best {best[0]:.1f} us ({best[1][-28:]}); {tail}", flush=True)
    del layer, lin
    torch.cuda.empty_cache()
    save()

print(f"{len(points)} points -> {args.out}")
