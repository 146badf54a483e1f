"""Where the host time of one eager humming-aot call goes, against plain torch calls, on the GPU machine.

Usage: python3 scripts/host_parts.py [N K M [FORMAT [ACT]]]   (default 8192 8192 1 u4g128-sbf16 bf16)
Prints the CPU wall time per call (median of 7 rounds of 200 back-to-back calls, no synchronization
inside a round) of: a QuantLinear call (which skips the dispatcher where it can), the same call
through torch.ops, its forward alone, _C.gemm_eager and torch.ops.humming.gemm with the instance
named (the packet, and its .default overload) and with the C++ dispatcher choosing, the Python
dispatcher's cached choice alone, and for scale two torch calls (an empty allocation, F.linear on
cuBLAS). With 8-bit activations (ACT e4m3-pt, i8-pt) it also times the layer without its one-call
quantize + GEMM path (quantize_act, then the GEMM) and quantize_act alone.
"""

import statistics
import sys
import time

import torch

import humming_aot as ha

n, k, m = (int(v) for v in sys.argv[1:4]) if len(sys.argv) >= 4 else (8192, 8192, 1)
fmt = sys.argv[4] if len(sys.argv) >= 5 else "u4g128-sbf16"
act = sys.argv[5] if len(sys.argv) >= 6 else "bf16"
lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
layer = ha.QuantLinear.from_linear(lin, fmt, act, device="cuda")
x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
inst = layer.instance_for(m)
b = layer._buffers
quantized = layer._act_quantized
# The GEMM's own operands: with 8-bit activations, the codes and per-token scales of x.
a, a_scales = torch.ops.humming.quantize_act(x, layer._act_str) if quantized else (x, None)
args = (
    a,
    b["codes"],
    b["scales"],
    b["zeros"],
    b["global_scale"],
    a_scales,
    b["bias"],
    layer._fmt_str,
    layer.layout,
    layer.out_features,
    layer.in_features,
    inst,
)
dev = x.get_device()


def per_call(fn, calls=200, rounds=7):
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out)


from humming_aot import layers  # noqa: E402
from humming_aot._ext import C  # noqa: E402

direct = layers._DIRECT


def via_ops():
    saved = layers._DIRECT_QUANTIZE
    layers._DIRECT = layers._DIRECT_QUANTIZE = None  # as HUMMING_EAGER_OPS=1
    try:
        return layer(x)
    finally:
        layers._DIRECT, layers._DIRECT_QUANTIZE = direct, saved


def unfused():
    saved = layers._DIRECT_QUANTIZE
    layers._DIRECT_QUANTIZE = None
    try:
        return layer(x)
    finally:
        layers._DIRECT_QUANTIZE = saved


parts = {
    "QuantLinear call": lambda: layer(x),
    "QuantLinear call through torch.ops": via_ops,
    "QuantLinear.forward (no Module.__call__)": lambda: layer.forward(x),
    "torch.ops.humming.gemm (instance named)": lambda: torch.ops.humming.gemm(*args),
    "torch.ops.humming.gemm (C++ dispatch)": lambda: torch.ops.humming.gemm(*args[:-1], ""),
    "torch.ops.humming.gemm.default": lambda: torch.ops.humming.gemm.default(*args),
    "_C.gemm_eager (instance named)": lambda: C.gemm_eager(*args),
    "dispatcher choice (cached)": lambda: layer._plan.instance_at(m, dev),
    "torch.empty(m, n)": lambda: torch.empty((m, n), device="cuda", dtype=torch.bfloat16),
    "F.linear (cuBLAS bf16)": lambda: torch.nn.functional.linear(x, lin.weight),
}
if quantized:
    parts["QuantLinear call, quantize_act then GEMM"] = unfused
    parts["quantize_act alone"] = lambda: torch.ops.humming.quantize_act(x, layer._act_str)
print(f"{n}x{k} m={m} {fmt} x {act} instance {inst}")
for name, fn in parts.items():
    print(f"{name:45s} {per_call(fn):8.2f} us")
