"""Fits a device table's "tile_costs" (the cost model of its estimate ranges, see humming.h's
TileCost) to sweeps made by scripts/sweep_tiles.py on the GPU machine.

Usage: python3 tools/fit_tile_costs.py SWEEP.json [SWEEP.json ...] [--sms 132]
For each tile shape (and kernel class, cost_key) of the sweeps, a least-squares fit of its measured times to
    c0 + c1 * (inputs of the busiest block / 1000) + c2 * (segments of that block) + c3 * (stream-K part)
       + c4 * (partials the most split tile's last contributor adds up)
with the launch facts the dispatcher computes (humming_aot.dispatch.estimated_us), each point weighted
by 1 / its time (relative error). Prints the "tile_costs" object to paste into the table, and the
median and largest relative error per tile shape. Needs the built package (for the launch facts), no GPU.
"""

import argparse
import collections
import json
import pathlib
import re

import torch

from humming_aot import _ext, dispatch, formats
from humming_aot.pack import LAYOUTS


def cost_key(name: str, tile: tuple, fmt) -> str:
    """The table key of an instance's tile cost (humming.h, TileCost): the plain tile shape for the
    weight-only kernels with 4-bit codes (whose costs every weight-only kernel takes by default),
    else with the kernel class (a{act bits}w{code bits}:), and the batch of a batched tile (_b2)."""
    act, code = fmt.act.type.bits, fmt.weight.code.bits
    key = "x".join(map(str, tile))
    if (act, code) != (16, 4):
        key = f"a{act}w{code}:{key}"
    batch = dispatch._BATCH.search(name)
    return key + (f"_b{batch.group(1)}" if batch else "")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sweeps", nargs="+")
    ap.add_argument("--sms", type=int, default=132)
    args = ap.parse_args()
    rows = collections.defaultdict(list)  # cost key -> [(features, us)]
    for path in args.sweeps:
        sweep = json.loads(pathlib.Path(path).read_text())
        layout = LAYOUTS[sweep.get("layout", "sm90")]
        for p in sweep["points"]:
            name = p["instance"]
            tile = tuple(int(v) for v in re.search(r"_t(\d+)x(\d+)x(\d+)_", name).groups())
            fmt = formats.parse_gemm_format(re.search(r"_(a-.*_c-[a-z0-9]+)_t\d", name).group(1))
            backend = name.split("_", 1)[0]
            facts = _ext.C.persistent_launch_facts(backend, *tile, str(fmt), layout, p["n"], p["k"], p["m"], args.sms)
            if facts is None:
                raise SystemExit(f"{name}: the cost model does not cover this kernel")
            inputs, segments, stream_k, partials, _rows_apart = facts
            rows[cost_key(name, tile, fmt)].append(
                ([1.0, inputs / 1000, float(segments), 1.0 if stream_k else 0.0, float(partials)], p["us"])
            )
    costs = {"_doc": "fitted by tools/fit_tile_costs.py to " + ", ".join(pathlib.Path(p).name for p in args.sweeps)}
    for key, pts in sorted(rows.items()):
        x = torch.tensor([f for f, _ in pts], dtype=torch.float64)
        y = torch.tensor([us for _, us in pts], dtype=torch.float64)
        w = 1 / y
        c = torch.linalg.lstsq(x * w[:, None], (y * w)[:, None]).solution[:, 0]
        err = ((x @ c - y).abs() / y).sort().values
        costs[key] = [round(v, 4) for v in c.tolist()]
        print(f"{key}: {len(pts)} points, relative error median {err[len(err) // 2]:.3f}, max {err[-1]:.3f}")
    print(json.dumps({"tile_costs": costs}))


if __name__ == "__main__":
    main()
