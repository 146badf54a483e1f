"""A markdown table of scripts/moe_spill.py's lines (a device log, e.g. the $OUT/s63c.txt of a call),
for the results README: one row per (model, tokens, GEMM), one column per tile, each cell the mean
of that tile's runs (the instance list is usually run forward and then reversed) with the runs in
brackets, the fastest in bold. Needs no GPU.

Usage: python3 scripts/moe_spill_table.py LOG [LOG ...]
"""

import collections
import re
import sys

# The GEMM (gate-up, down; with --glu also "gate-up glu" and "gate-up then-activate").
LINE = re.compile(r"spill (\S+) T=(\d+) (\S+(?: glu| then-activate)?) \S+ rows=\d+ (?:default|forced) (\S+): ([\d.]+)")


def main() -> None:
    runs = collections.defaultdict(list)  # (model, tokens, gemm, tile) -> [us]
    order = []  # (model, tokens, gemm) as first seen
    for path in sys.argv[1:]:
        for line in open(path):
            m = LINE.search(line)
            if not m:
                continue
            model, tokens, gemm, tile, us = m.groups()
            key = (model, int(tokens), gemm)
            if key not in order:
                order.append(key)
            runs[key + (tile.replace("_w1x2x1", ""),)].append(float(us))
    if not order:
        raise SystemExit("no moe_spill.py lines in " + ", ".join(sys.argv[1:]))
    # Tiles by height, channels, inputs (their names' first three numbers).
    tiles = sorted({k[3] for k in runs}, key=lambda t: [int(v) for v in re.findall(r"\d+", t)[:3]])
    print("| model | tokens | GEMM | " + " | ".join(tiles) + " |")
    print("|---|---:|---|" + "---:|" * len(tiles))
    for key in order:
        means = {t: sum(runs[key + (t,)]) / len(runs[key + (t,)]) for t in tiles if runs.get(key + (t,))}
        best = min(means.values())
        cells = []
        for t in tiles:
            if t not in means:
                cells.append("-")
                continue
            cell = f"**{means[t]:.1f}**" if means[t] == best else f"{means[t]:.1f}"
            each = runs[key + (t,)]
            cells.append(cell + (" (" + "/".join(f"{v:.0f}" for v in each) + ")" if len(each) > 1 else ""))
        print(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
