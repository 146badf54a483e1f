"""How far a device table's choices are from the fastest measured instance, over a sweep made by
scripts/sweep_tiles.py on the GPU machine. Needs no GPU: it reads the table's ranges
the way the dispatcher does (the first range whose m_max, n_min and k_max admit the problem; in an
estimate range the instance its tile costs estimate fastest; else the first instance matching its
patterns in order) among the instances the sweep timed. Estimate ranges need the built package
(for the launch facts the estimate reads); other tables need no build.

Usage: python3 tools/table_regret.py SWEEP.json [TABLE.json ...] [--worst N] [--sms 132]
For each table: per M, the geometric mean and the largest ratio of the chosen instance's time to
the fastest one's (1.00 = always the fastest), then the N worst points. A choice the sweep did not
time (a tile it skipped as too far from M) is counted apart, as "untimed".
"""

import argparse
import collections
import fnmatch
import json
import math
import pathlib
import re

# Layout ids by name (a sweep records the layout it packed for; sweeps older than that packed for sm90):
# humming_aot.pack.LAYOUTS, written out so that tables without estimate ranges need no built package.
LAYOUTS = {"generic": 1, "sm80": 2, "sm90": 3, "sm90a8": 4}
DEFAULT_TABLE = pathlib.Path(__file__).resolve().parents[1] / "python/humming_aot/tables/h200.json"


def range_for(table: dict, m: int, n: int, k: int) -> dict:
    for r in table["ranges"]:
        fits = n >= r.get("n_min", 0) and ("k_max" not in r or k <= r["k_max"])
        if fits and (r["m_max"] is None or m <= r["m_max"]):
            return r
    raise ValueError(f"no range of the table covers m={m}, n={n}, k={k}")


def sweep_layout(sweep: dict) -> int:
    """The layout id a sweep's weights were packed for."""
    return LAYOUTS[sweep.get("layout", "sm90")]


def estimated_choice(table: dict, m: int, n: int, k: int, names: list[str], sms: int, layout: int) -> str | None:
    """An estimate range's choice among instance names (of one format), by the dispatcher's own rule
    (dispatch._estimates), or None where the tile costs cover none. Needs the built package."""
    import types

    from humming_aot import dispatch

    cands = []
    for name in names:
        backend = name.split("_", 1)[0]
        tile = tuple(int(v) for v in re.search(r"_t(\d+)x(\d+)x(\d+)_", name).groups())
        cands.append(types.SimpleNamespace(name=name, backend=backend, tile=tile))
    fmt = re.search(r"_(a-.*_c-[a-z0-9]+)_t\d", names[0]).group(1)
    est = dispatch._estimates(table, cands, (fmt, n, k, m, sms, layout))
    return min(est, key=lambda e: e[0])[1].name if est else None


def choose(table: dict, m: int, n: int, k: int, names: list[str], sms: int = 132, layout: int = 3) -> str | None:
    r = range_for(table, m, n, k)
    if r.get("estimate"):
        pick = estimated_choice(table, m, n, k, names, sms, layout)
        if pick is not None:
            return pick
    for pattern in r["prefer"]:
        for name in names:
            if fnmatch.fnmatchcase(name, pattern):
                return name
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sweep")
    ap.add_argument("tables", nargs="*", default=[str(DEFAULT_TABLE)])
    ap.add_argument("--worst", type=int, default=8)
    ap.add_argument("--sms", type=int, default=132, help="multiprocessors of the swept GPU (H200: 132)")
    args = ap.parse_args()
    sweep = json.loads(pathlib.Path(args.sweep).read_text())
    times = collections.defaultdict(dict)
    for p in sweep["points"]:
        times[(p["n"], p["k"], p["m"])][p["instance"]] = p["us"]
    names = sorted({p["instance"] for p in sweep["points"]})
    for path in args.tables:
        table = json.loads(pathlib.Path(path).read_text())
        by_m = collections.defaultdict(list)
        untimed, worst = 0, []
        for (n, k, m), here in sorted(times.items()):
            pick = choose(table, m, n, k, names, args.sms, sweep_layout(sweep))
            if pick not in here:
                untimed += 1
                continue
            best = min(here.values())
            ratio = here[pick] / best
            by_m[m].append(ratio)
            fastest = min(here, key=here.get)
            worst.append((ratio, f"{n}x{k} m={m}: {here[pick]} us in {pick}, {best} in {fastest}"))
        print(f"== {path}: {sum(map(len, by_m.values()))} points, {untimed} untimed")
        for m, rs in sorted(by_m.items()):
            gm = math.exp(sum(map(math.log, rs)) / len(rs))
            print(f"m={m:5d}: geomean {gm:.3f}, max {max(rs):.3f}, {sum(r > 1.03 for r in rs)} of {len(rs)} over 1.03")
        allr = [r for rs in by_m.values() for r in rs]
        print(f"all: geomean {math.exp(sum(map(math.log, allr)) / len(allr)):.3f}")
        for ratio, line in sorted(worst, reverse=True)[: args.worst]:
            print(f"  x{ratio:.2f} {line}")


if __name__ == "__main__":
    main()
