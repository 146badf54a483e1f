"""First calls of a fresh layer on the GPU, with and without preloading its kernels.

Usage: python3 scripts/first_call.py [--format WEIGHT[:ACT]] [--shape NxK] [--ms 1,16,64,256,1024]
Each setting (HUMMING_PRELOAD=1, the default, and HUMMING_PRELOAD=0) runs in a fresh process, since a
kernel's module loads once per process: the layer's build time, then per M the first call (a new M
range: in that process no call of that instance has run before) and a second one, host wall time
around a synchronized call, in milliseconds. Prints one JSON object per setting.
"""

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys, time
import torch
import humming_aot as ha
weight, act, n, k, ms = sys.argv[1], sys.argv[2] or None, int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
torch.cuda.init()
torch.empty(1, device="cuda")  # the CUDA context, outside every timing
lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
t0 = time.perf_counter()
layer = ha.QuantLinear.from_linear(lin, weight, act, device="cuda")
torch.cuda.synchronize()
out = {"build_ms": (time.perf_counter() - t0) * 1e3, "calls": {}}
for m in (int(v) for v in ms.split(",")):
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    times = []
    for _ in range(2):
        torch.cuda.synchronize()
        t = time.perf_counter()
        layer(x)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    out["calls"][m] = {"instance": layer.instance_for(m), "first_ms": times[0], "second_ms": times[1]}
print(json.dumps(out))
"""

ap = argparse.ArgumentParser()
ap.add_argument("--format", default="u4g128-sbf16")
ap.add_argument("--shape", default="4096x4096")
ap.add_argument("--ms", default="1,16,64,256,1024")
args = ap.parse_args()
weight, _, act = args.format.partition(":")
n, k = (int(v) for v in args.shape.split("x"))
for preload in ("1", "0"):
    env = dict(os.environ, HUMMING_PRELOAD=preload)
    p = subprocess.run(
        [sys.executable, "-c", CHILD, weight, act, str(n), str(k), args.ms], env=env, capture_output=True, text=True
    )
    if p.returncode != 0:
        print(f"HUMMING_PRELOAD={preload} failed:\n{p.stderr}", file=sys.stderr)
        continue
    print(json.dumps({"HUMMING_PRELOAD": preload, **json.loads(p.stdout.strip().splitlines()[-1])}))
