"""Per-block timeline of the sm90 kernels (weight-only and 8-bit activations), from a build with HUMMING_PROBE defined
(scripts/probe_sm90.sh builds one; include/humming/backend/sm90/probe.h says what is recorded).

Usage: python3 scripts/probe_sm90.py NxK[,NxK...] M[,M...] [--format F] [--act A] [--match REGEX]
       [--reps R] [--json PATH]
(--act e4m3-pt and the like: the 8-bit activation kernels, quantizing in each call; their weights
packed for the layout QuantLinear picks, weight-only ones for layout 3.)

Each point is one call after a reading L2 flush and a synchronize (as scripts/time_shapes.py's
eager timing, flush read), repeated --reps times; the rep whose kernel span is the median is kept.
The calls run in a child process whose standard output (where the kernels' printf lines land) is
parsed here. Printed per point, in microseconds from the first block's start:

* span: the last block's end; event: CUDA events around the call (host launch included);
* start: the spread of the blocks' starts (the last block's start);
* first: the consumers' first stage of data, after their block's start (median, max);
* loop: from the first stage to the end of the last main loop (median, max); GB/s per block
  and TB/s over all blocks at the median loop time, from the weight bytes each block read;
* fix: the last fix-up after the main loop (median and max over blocks that have one);
* tail: the end of the block after its main loop, fix-up and stores (median, max);
* cwait / pwait: time the consumers waited on "full" / the producer on "empty" (median).

A consumer that waits on "full" most of its loop is fed too slowly (memory); a producer that waits
on "empty" most of its time is held back by the consumers (their work per stage).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

FIELDS = ("start", "segment", "first", "loop_end", "fix_end", "end", "ring_wait", "stages", "segments")


def child(args):
    import humming_aot as ha

    import torch

    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    names = [""]
    if args.match:
        from humming_aot import registry

        names = [i.name for i in registry.instances() if re.search(args.match, i.name)]
    for n, k in args.shapes:
        lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
        layout = "sm90" if args.act is None else "auto"
        layer = ha.QuantLinear.from_linear(lin, args.format, args.act, device="cuda", layout=layout)
        for name in names:
            layer.instance = name
            for m in args.ms:
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                try:
                    layer(x)  # warm-up: tensor maps, workspace
                except (RuntimeError, ValueError) as e:
                    print(f"HSKIP {n} {k} {m} {name or '-'} {str(e).splitlines()[0]}", flush=True)
                    continue
                torch.cuda.synchronize()
                inst = layer.instance_for(m, "cuda")
                for rep in range(args.reps):
                    flush.max()
                    torch.cuda.synchronize()
                    print(f"HCASE {n} {k} {m} {inst} {rep}", flush=True)
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    layer(x)
                    end.record()
                    end.synchronize()
                    print(f"HEVENT {start.elapsed_time(end) * 1000:.2f}", flush=True)
        del layer, lin


def parse(text):
    """{(n, k, m, instance): [rep, ...]}, each rep {"event": us, "P": [...], "C": [...]}."""
    cases, cur = {}, None
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "HCASE":
            n, k, m, inst = int(parts[1]), int(parts[2]), int(parts[3]), parts[4]
            cur = {"event": None, "P": [], "C": []}
            cases.setdefault((n, k, m, inst), []).append(cur)
        elif parts[0] == "HEVENT" and cur is not None:
            cur["event"] = float(parts[1])
        elif parts[0] == "HPROBE" and cur is not None:
            rec = dict(zip(FIELDS, (int(v) for v in parts[4:])))
            rec["block"], rec["sm"] = int(parts[2]), int(parts[3])
            cur[parts[1]].append(rec)
        elif parts[0] == "HSKIP":
            print(line, flush=True)
    return cases


def q(xs, f):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(f * len(xs)))] if xs else float("nan")


def weight_bytes_per_input(fmt):
    """(bytes of codes per weight, bytes of scales per weight) of a weight format such as u4g128-sbf16."""
    f = re.match(r"(u4|i4|e2m1|u8|i8|e4m3)(?:g(\d+)(?:n(\d+))?|gc)?(?:-s(bf16|f16|f32|e8m0|e4m3))?", fmt)
    bits = 4 if f and f.group(1) in ("u4", "i4", "e2m1") else 8
    group = int(f.group(2)) * int(f.group(3) or 1) if f and f.group(2) else 0
    scale = {"f32": 4, "e8m0": 1, "e4m3": 1}.get(f.group(4) if f else None, 2)
    return bits / 8, (scale / group if group else 0.0)


def summarize(n, k, m, inst, rep, fmt="u4g128-sbf16"):
    cs, ps = rep["C"], rep["P"]
    t0 = min(r["start"] for r in cs + ps)
    us = lambda ns: ns / 1000.0
    span = us(max(r["end"] for r in cs) - t0)
    first = [us(r["first"] - r["start"]) for r in cs]
    loop = [us(r["loop_end"] - r["first"]) for r in cs]
    fix = [us(r["fix_end"] - r["loop_end"]) for r in cs if r["fix_end"]]
    tail = [us(r["end"] - r["loop_end"]) for r in cs]
    stages = [r["stages"] for r in cs]
    # Weight bytes per K tile of 128 inputs of the block's channels (codes and 16-bit group scales).
    bn = int(re.search(r"_t\d+x(\d+)x(\d+)", inst).group(1)) if re.search(r"_t\d+x(\d+)x", inst) else 256
    bk = int(re.search(r"_t\d+x\d+x(\d+)", inst).group(1)) if re.search(r"_t\d+x\d+x(\d+)", inst) else 128
    code_b, scale_b = weight_bytes_per_input(fmt)
    stage_bytes = bn * bk * (code_b + scale_b)
    med_loop = statistics.median(loop)
    per_block = statistics.median(stages) * stage_bytes / (med_loop * 1e-6) / 1e9 if med_loop > 0 else float("nan")
    return {
        "n": n,
        "k": k,
        "m": m,
        "instance": inst,
        "blocks": len(cs),
        "event_us": rep["event"],
        "span_us": span,
        "start_spread_us": us(max(r["start"] for r in cs) - t0),
        "first_us": [statistics.median(first), max(first)],
        "loop_us": [med_loop, max(loop)],
        "stages": [min(stages), statistics.median(stages), max(stages)],
        "block_gbs": per_block,
        "all_tbs": per_block * len(cs) / 1000.0,
        "fix_us": [statistics.median(fix), max(fix)] if fix else None,
        "fix_blocks": len(fix),
        "tail_us": [statistics.median(tail), max(tail)],
        "cwait_us": statistics.median(us(r["ring_wait"]) for r in cs),
        "pwait_us": statistics.median(us(r["ring_wait"]) for r in ps) if ps else None,
        "pfirst_us": statistics.median(us(r["first"] - r["start"]) for r in ps) if ps else None,
        "psegment_us": statistics.median(us(r["segment"] - r["start"]) for r in ps) if ps else None,
        "csegment_us": statistics.median(us(r["segment"] - r["start"]) for r in cs),
        "p_issue_end_us": statistics.median(us(r["loop_end"] - t0) for r in ps) if ps else None,
    }


def fmt(s):
    f = lambda p: f"{p[0]:.1f}/{p[1]:.1f}" if p else "-"
    return (
        f"{s['n']}x{s['k']} m={s['m']} {s['instance']}\n"
        f"  blocks {s['blocks']}, stages/block {s['stages'][0]}..{s['stages'][2]}: span {s['span_us']:.1f} us "
        f"(event {s['event_us']:.1f}); starts within {s['start_spread_us']:.1f}; first data {f(s['first_us'])}; "
        f"loop {f(s['loop_us'])} ({s['block_gbs']:.0f} GB/s a block, {s['all_tbs']:.2f} TB/s all); "
        f"fix {f(s['fix_us'])} ({s['fix_blocks']} blocks); tail {f(s['tail_us'])}; "
        f"consumer wait {s['cwait_us']:.1f}, producer wait {s['pwait_us'] or 0:.1f} (producer's last issue at "
        f"{s['p_issue_end_us'] or 0:.1f}); producer: work found {s['psegment_us'] or 0:.2f}, first slot "
        f"{s['pfirst_us'] or 0:.2f} after its start; consumers: work found {s['csegment_us']:.2f}"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shapes")
    ap.add_argument("ms")
    ap.add_argument("--format", default="u4g128-sbf16")
    ap.add_argument("--act", default=None, help="activation format (default bf16), e.g. e4m3-pt")
    ap.add_argument("--match", default="", help="probe every built instance matching this regex (default: dispatch)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default="")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    args.ms = [int(v) for v in args.ms.split(",")]
    if args.child:
        return child(args)
    run = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--child"],
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode != 0:
        print(run.stdout[-3000:], run.stderr[-3000:], sep="\n")
        return run.returncode
    if "HPROBE" not in run.stdout:
        print("no HPROBE lines: this build has no probe (build with scripts/probe_sm90.sh)")
        return 1
    results = []
    for (n, k, m, inst), reps in parse(run.stdout).items():
        sums = [summarize(n, k, m, inst, r, args.format) for r in reps if r["C"]]
        if not sums:
            continue
        sums.sort(key=lambda s: s["span_us"])
        s = sums[len(sums) // 2]
        results.append(s)
        print(fmt(s), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
