"""Kernel time of humming-aot W4A16 layers over a few shapes, for quick A/B runs on the GPU machine.

Usage: python3 scripts/time_shapes.py NxK[,NxK...] M[,M...] [weight_format]
Prints one line per point: median microseconds of single calls, each after an L2 flush, timed
with CUDA events around the call (the flush itself is outside the events). Run it in separate
processes to compare environment settings such as HUMMING_MAX_SPLITS.
"""

import statistics
import sys

import torch

import humming_aot as ha

shapes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1].split(",")]
ms = [int(v) for v in sys.argv[2].split(",")]
fmt = sys.argv[3] if len(sys.argv) > 3 else "u4g128-sbf16"
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
for n, k in shapes:
    lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
    layer = ha.QuantLinear.from_linear(lin, fmt, device="cuda")
    for m in ms:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        layer(x)
        times = []
        for _ in range(15):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            layer(x)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000)
        print(f"{n}x{k} m={m}: {statistics.median(times):8.1f} us  {layer.instance_for(m, 'cuda')}", flush=True)
    del layer, lin
