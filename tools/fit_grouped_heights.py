"""How well rules for the grouped (MoE) tile height pick the fastest height, over bench_moe runs
that timed every height near the mean (scripts/bench_moe.py --impls humming-aot-heights).

Usage: python tools/fit_grouped_heights.py RUN.json [RUN.json ...] [--table python/humming_aot/tables/h200.json]

For each point (model, tokens) with at most 256 rows per expert and two or more heights timed, a
rule picks a height and its regret is the picked height's time over the fastest (gate-up + down:
the sum of the two GEMMs' graph times, or with --metric layer the one replay of both). Rules:
- table: the expected row tiles of Poisson counts (humming.h expected_row_tiles) times the table's
  cost per input of the dense tile of that height (TileCost c1; for the grouped-only heights 24, 48
  and 80 the line between the heights either side), as registry.cpp picks by default;
- rows+C: the expected row tiles times the height plus C (the fallback, kGroupedRowTileFixedRows),
  for a range of C;
- lowest: the lowest height that holds the mean (the rule before session 29).
Prints the geometric-mean regret, the worst point, and with --verbose every point's pick.
Needs no build and no GPU."""

import argparse
import json
import math
import pathlib

# (experts, top_k) of scripts/bench_moe.py's models
MODELS = {"deepseek-v3": (256, 8), "qwen3-30b-a3b": (128, 8), "mixtral-8x7b": (8, 2), "gpt-oss-120b": (128, 4)}
# The narrowest grouped tile of each height (tools/matrix/sm90_moe.json): its table cost key.
TILE_KEYS = {
    8: "8x128x128",
    16: "16x128x128",
    32: "32x128x128",
    64: "64x128x128",
    128: "128x128x128",
    256: "256x128x64",
    # The grouped-only heights (no dense tile shares them, so the table has no cost of theirs).
    24: "24x128x128",
    48: "48x128x128",
    80: "80x128x128",
    144: "144x128x128",  # session 59: two tiles hold 256 rows per expert's spread
}


def expected_row_tiles(mean: float, height: int) -> float:
    """E[ceil(X / height)] for X Poisson with this mean (the sum over the counts, far past the mean)."""
    if mean <= 0:
        return 0.0
    total, p = 0.0, math.exp(-mean)
    for x in range(1, int(mean + 40 * math.sqrt(mean) + 60)):
        p *= mean / x
        total += -(-x // height) * p
    return total


def load_points(runs, metric: str = "parts") -> dict:
    """{(model, tokens): {height: us}} of the humming-aot-h{height} points of bench_moe runs; us is
    gate-up + down: the sum of the two GEMMs' graph times ("parts") or one replay of both ("layer")."""
    points = {}
    for run in runs:
        for p in json.loads(pathlib.Path(run).read_text())["points"]:
            if "us" in p and p["impl"].startswith("humming-aot-h") and p["impl"][13:].isdigit():
                us = p["us_gate_up"] + p["us_down"] if metric == "parts" else p["us"]
                points.setdefault((p["model"], p["tokens"]), {})[int(p["impl"][13:])] = us
    return points


def score(points: dict, pick, verbose: bool = False) -> tuple[float, float, str, int]:
    """(geometric-mean regret, worst regret, the worst point, points scored) of a rule
    pick(rows per expert, timed heights) -> height over the points with at most 256 rows per expert
    and two or more heights timed."""
    logs, worst = [], (1.0, "")
    for (model, tokens), times in sorted(points.items()):
        experts, top_k = MODELS[model]
        rows = max(1, tokens * top_k // experts)  # as QuantMoE passes rows_per_expert
        if rows > 256 or len(times) < 2:
            continue
        h = pick(rows, sorted(times))
        best = min(times, key=times.get)
        regret = times[h] / times[best]
        logs.append(math.log(regret))
        if regret > worst[0]:
            worst = (regret, f"{model} at {tokens} tokens ({rows} rows per expert): t{h}, fastest t{best}")
        if verbose:
            print(f"  {model} {tokens} tokens, {rows} rows: t{h}, fastest t{best}, {regret:.3f}")
    return math.exp(sum(logs) / len(logs)), worst[0], worst[1], len(logs)


def least_work(weight):
    """The rule: the height of least expected row tiles times weight(height), the lower on ties."""
    return lambda rows, heights: min(heights, key=lambda h: (expected_row_tiles(rows, h) * weight(h), h))


def table_cost(costs: dict, h: int) -> float:
    """A height's tile cost: the table's c1 where it has one, else the straight line between the
    nearest heights below and above that it has (registry.cpp grouped_height_costs)."""
    if TILE_KEYS[h] in costs:
        return costs[TILE_KEYS[h]][1]
    known = sorted(x for x in TILE_KEYS if TILE_KEYS[x] in costs)
    lo, hi = max(x for x in known if x < h), min(x for x in known if x > h)
    c_lo, c_hi = costs[TILE_KEYS[lo]][1], costs[TILE_KEYS[hi]][1]
    return c_lo + (h - lo) / (hi - lo) * (c_hi - c_lo)


def table_rule(table_path) -> object:
    """The default rule with a dispatch table's tile costs (c1 of each height's narrowest tile)."""
    costs = json.loads(pathlib.Path(table_path).read_text())["tile_costs"]
    return least_work(lambda h: table_cost(costs, h))


def lowest_rule(rows, heights):
    """The rule before session 29: the lowest height that holds the rows per expert."""
    return min([h for h in heights if h >= rows] or [max(heights)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--table", default=str(pathlib.Path(__file__).parents[1] / "python/humming_aot/tables/h200.json"))
    ap.add_argument(
        "--metric",
        choices=("parts", "layer"),
        default="parts",
        help="parts: the sum of the two GEMMs' graph times (default); layer: the graph time of both in one replay",
    )
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    points = load_points(args.runs, args.metric)
    rules = [("table", table_rule(args.table))]
    rules += [(f"rows+{c}", least_work(lambda h, c=c: h + c)) for c in (0, 16, 32, 40, 48, 56, 64, 96, 128)]
    rules.append(("lowest", lowest_rule))
    for name, pick in rules:
        if args.verbose:
            print(name)
        mean, worst, where, n = score(points, pick, args.verbose)
        print(f"{name}: {mean:.4f} of the fastest over {n} points; worst {worst:.3f} {where}")


if __name__ == "__main__":
    main()
