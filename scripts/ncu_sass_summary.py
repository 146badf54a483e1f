"""Sums of an ncu SASS page (ncu --import R --page source --print-source sass --csv): the warp stall
samples of each reason over the kernel, and the executed instructions by opcode, so that two
kernels' pages compare at a glance (scripts/ncu_moe_peer.sh).

Usage: python3 scripts/ncu_sass_summary.py PAGE.csv
"""

import collections
import csv
import sys

with open(sys.argv[1], newline="") as f:
    rows = list(csv.reader(f))
head = next(i for i, r in enumerate(rows) if "Source" in r)
names, body = rows[head], rows[head + 1 :]
col = {n: i for i, n in enumerate(names)}


def number(cell: str) -> float:
    try:
        return float(cell.replace(",", ""))
    except ValueError:
        return 0.0


stalls = {n: sum(number(r[i]) for r in body if i < len(r)) for n, i in col.items() if "stall" in n.lower()}
total = max(stalls.values(), default=0.0)
print("stall samples (share of the largest column, the kernel's total):")
for n, v in sorted(stalls.items(), key=lambda kv: -kv[1]):
    if v > 0:
        print(f"  {n:60s} {v:12.0f} {v / total * 100:6.1f} %")
executed = next((i for n, i in col.items() if n.startswith("Instructions Executed")), None)
if executed is not None:
    ops = collections.Counter()
    for r in body:
        if executed < len(r):
            ops[r[col["Source"]].split()[0].split(".")[0] if r[col["Source"]].split() else "?"] += number(r[executed])
    whole = sum(ops.values())
    print(f"instructions executed (warp level): {whole:.0f}")
    for op, v in ops.most_common(25):
        print(f"  {op:12s} {v:12.0f} {v / whole * 100:6.1f} %")

# The lines where warps wait most: each with its samples and its three largest reasons.
samples = col.get("Warp Stall Sampling (All Samples)")
reasons = [(n, i) for n, i in col.items() if n.startswith("stall_") and "Not Issued" not in n]
if samples is not None:
    print("lines with the most stall samples (address, samples, top reasons, instruction):")
    ranked = sorted(body, key=lambda r: -number(r[samples]) if samples < len(r) else 0)
    for r in ranked[:30]:
        top = sorted(((number(r[i]), n[6:]) for n, i in reasons if i < len(r)), reverse=True)[:3]
        why = ", ".join(f"{n} {v:.0f}" for v, n in top if v > 0)
        addr = r[col["Address"]] if "Address" in col else "?"
        print(f"  {addr:>6s} {number(r[samples]):6.0f}  {why:45s} {r[col['Source']][:70]}")
