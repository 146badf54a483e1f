"""What a CUDA graph of small dependent kernels costs per kernel on this GPU, apart from any work:
graphs of 1, 2, 4, 8 and 16 one-element adds replayed after an L2 flush (as the benchmarks time)
and with the L2 warm, the median of each and the slope per kernel. Measures the floor under the MoE
routing helpers' times (scripts/bench_moe.py --routing-parts), whose kernels do almost nothing at
one token. Needs no GPU kernels of this package: humming_aot.bench (the benchmarks' timer) imports
without the extension, so PYTHONPATH=python works without a build.

Usage: python3 scripts/graph_floor.py [--iters 30] [OUT.json]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from humming_aot.bench import Timer

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("out", nargs="?", help="write the medians here as JSON")
ap.add_argument("--iters", type=int, default=30)
args = ap.parse_args()

x = torch.zeros(1, device="cuda")
timer = Timer(256)  # the benchmarks' timer: a read flush of 256 MiB (or more than 4x the L2)


def replay_times(kernels: int, flush: bool) -> list[float]:
    def fn():
        for _ in range(kernels):
            x.add_(1.0)  # each a kernel that waits for the one before (same tensor, same stream)

    return timer.graph(fn, args.iters, flush=flush)


result = {"device": torch.cuda.get_device_name(), "iters": args.iters, "points": []}
for flush in (True, False):
    meds = {}
    for k in (1, 2, 4, 8, 16):
        meds[k] = statistics.median(replay_times(k, flush))
        result["points"].append({"kernels": k, "flush": flush, "us": meds[k]})
    slope = (meds[16] - meds[1]) / 15
    print(
        f"{'flushed' if flush else 'warm   '}: "
        + ", ".join(f"{k} kernels {v:.1f} us" for k, v in meds.items())
        + f"; {slope:.2f} us per kernel beyond the first"
    )
if args.out:
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
