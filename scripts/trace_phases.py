"""Where the time of one sm90 weight-only launch goes, block by block (a diagnostic, GPU machine).

scripts/phase_trace.patch adds %globaltimer / clock64 probes to kernel/sm90_dense.cuh and prints
one line per block at its end (printf: never build it into a wheel). Per block: when its consumers
start, when its producer knows its first segment (the scheduler's arithmetic done) and when it has
issued the first stage's copies (and how long issuing them took: a long issue means the copies
wait, e.g. for the tensor map), when the first stage is full, when the main loop, the stream-K
fix-up and the store end;
the consumers' cycles waiting on "full" barriers, on wgmma.wait_group, building fragments and
issuing WGMMAs; the producer's cycles waiting on "empty" barriers (a producer that waits most of
the loop means consumer-bound, consumers that wait on "full" mean memory-bound). This script runs
each layer (u4g128-sbf16, bf16 activations, the dispatcher's instance) once to warm up and twice
after a read flush in a child process, and prints min / median / max over the blocks of the two
timed launches, in microseconds from the first block's start. The printf at the end of every block
makes the event time meaningless, and for blocks with more than one segment the end times include
other blocks' printf; the phases before each block's end are not affected.

On the GPU machine (filtered build):
  patch -p1 < scripts/phase_trace.patch && HUMMING_FILTER='^sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_' \
    bash scripts/gpu_ab.sh 'python3 scripts/trace_phases.py 8192x8192:1,3584x3584:256'
Usage: python3 scripts/trace_phases.py NxK:M[,NxK:M...]   (TRACE_FLUSH=0: no flush before the timed launches)
"""

import os
import statistics
import subprocess
import sys

# Fields of the patch's lines after "HTRACE C" (one per block, from its first consumer thread) and
# "HTRACE P" (from its producer thread): timer values are %globaltimer ns, waits are clock64 cycles.
C_FIELDS = [
    "block",
    "smid",
    "start",
    "first_full",
    "main_end",
    "fix_end",
    "end",
    "last",
    "segs",
    "w_full",
    "w_mma",
    "cycles",
    "w_load",
    "w_issue",
]
P_FIELDS = ["block", "entry", "first_issue", "last_issue", "w_empty", "pre_issue", "segment"]


def child(specs: str) -> None:
    """Runs each layer: one warm-up launch, then two after a read flush of the L2 (none with
    TRACE_FLUSH=0: the code, the parameters and, for small layers, the weights then come from L2)."""
    import humming_aot as ha

    import torch

    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for spec in specs.split(","):
        shape, m = spec.split(":")
        n, k = (int(v) for v in shape.split("x"))
        lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
        layer = ha.QuantLinear.from_linear(lin, "u4g128-sbf16", None, device="cuda")
        x = torch.randn(int(m), k, device="cuda", dtype=torch.bfloat16)
        for run in ("warm", "t1", "t2"):
            print(f"### {spec} {run} {layer.instance_for(int(m), 'cuda')}", flush=True)
            if os.environ.get("TRACE_FLUSH", "1") != "0":
                flush.max()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            layer(x)
            end.record()
            torch.cuda.synchronize()  # the blocks' printf lines come out here, before the marker below
            print(f"### event {start.elapsed_time(end) * 1000:.1f} us", flush=True)


def parse(out: str) -> list[dict]:
    groups, cur = [], None
    for line in out.splitlines():
        if line.startswith("### event"):
            cur["event"] = line.split()[2]
        elif line.startswith("###"):
            cur = {"name": line[4:], "P": [], "C": []}
            groups.append(cur)
        elif line.startswith("HTRACE") and cur is not None:
            f = line.split()
            names = C_FIELDS if f[1] == "C" else P_FIELDS
            cur[f[1]].append(dict(zip(names, (int(v) for v in f[2:]))))
    return groups


def spread(xs) -> str:
    return f"min {min(xs):6.2f} med {statistics.median(xs):6.2f} max {max(xs):6.2f}" if xs else "-"


def report(g: dict) -> None:
    C, P = g["C"], g["P"]
    t0 = min(min(c["start"] for c in C), min(p["entry"] for p in P))

    def at(key, rows):
        return spread([(r[key] - t0) / 1000 for r in rows])

    def span(a, b):
        return spread([(c[b] - c[a]) / 1000 for c in C])

    ghz = [c["cycles"] / max(1, c["end"] - c["start"]) for c in C]  # cycles per ns, per block

    def cycles(key):
        return spread([c[key] / f / 1000 for c, f in zip(C, ghz)])

    print(f"{g['name']}  event {g['event']} us  blocks {len(C)}  span {(max(c['end'] for c in C) - t0) / 1000:.2f} us")
    print(f"  consumer start      {at('start', C)}")
    print(f"  producer entry      {at('entry', P)}")
    if all("segment" in p for p in P):
        print(f"  first segment known {at('segment', P)}")
    print(
        f"  first copies issued {at('first_issue', P)}   (issuing them {spread([(p['first_issue'] - p['pre_issue']) / 1000 for p in P if 'pre_issue' in p])})"
    )
    print(f"  first stage full    {at('first_full', C)}   (wait {span('start', 'first_full')})")
    print(f"  last issue          {at('last_issue', P)}")
    print(f"  mainloop done       {at('main_end', C)}   (loop {span('first_full', 'main_end')})")
    print(f"  fixup done          {at('fix_end', C)}   (fixup {span('main_end', 'fix_end')})")
    print(f"  consumer wait full  {cycles('w_full')}  wgmma wait {cycles('w_mma')}  (GHz {statistics.median(ghz):.2f})")
    print(f"  consumer load       {cycles('w_load')}  issue {cycles('w_issue')}")
    print(f"  producer wait empty {spread([p['w_empty'] / statistics.median(ghz) / 1000 for p in P])}")
    storing = [c for c in C if c["last"] != 0]  # blocks that store: whole tiles and last contributors
    print(
        f"  end                 {at('end', C)}   store {spread([(c['end'] - c['fix_end']) / 1000 for c in storing])}"
        f"  segments at most {max(c['segs'] for c in C)}"
    )


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        child(sys.argv[2])
        sys.exit(0)
    out = subprocess.run(
        [sys.executable, __file__, "--child", sys.argv[1]], capture_output=True, text=True, check=False
    ).stdout
    for g in parse(out):
        if "warm" not in g["name"] and g["C"]:
            report(g)
