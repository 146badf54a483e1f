"""Activation quantization on the GPU against torch's own, in one run: GB/s of HBM traffic.

Usage: python3 scripts/bench_quantize_act.py [--out results.json] [--iters 20] [--impls humming-aot,torch,torch-cast]
    [--formats e4m3-pt,...] [--shapes 8192x8192,...]
For each [m, k] bf16 input and activation format: torch.ops.humming.quantize_act, and the same rule
written in torch (amax per token or group, scale = amax / max, x / scale clipped and cast), which
is what a serving stack without a quantize kernel runs; torch-cast is a plain cast of the input to
the code type (x.to(float8_e4m3fn) or int8: the same reads and code writes, no amax or scales), the
streaming ceiling for the same traffic. Both are timed by CUDA-graph replay after
an L2 flush (humming_aot.bench.Timer). Traffic = the input read once plus the codes and scales
written; GB/s = traffic / time. torch-copy (x.clone(), not in the default --impls) is the plain
copy of the input, its GB/s counting bytes read and written: the ceiling a streaming kernel meets
on this device under the same timing. Prints one JSON line per point and writes them all to --out.
"""

import argparse
import json
import statistics

import torch

import humming_aot as ha
from humming_aot.bench import Timer

SHAPES = [(1, 8192), (1, 28672), (16, 8192), (256, 8192), (1024, 8192), (4096, 8192), (8192, 8192), (8192, 28672)]
FORMATS = ["e4m3-pt", "e4m3-g128", "i8-pt"]
MAX = {"e4m3": 448.0, "e5m2": 57344.0, "i8": 127.0}
TOPS: dict = {}  # (kind, device) -> MAX[kind] as a one-element tensor there


def torch_rule(x: torch.Tensor, act: str):
    """The quantizer's rule in plain torch ops (fp32 arithmetic, as the kernel's). Not
    reference.quantize_activation: that one divides by a Python scalar (an ulp off on the GPU, where
    torch multiplies by its reciprocal) and is not written to be captured in a CUDA graph."""
    kind, _, gran = act.partition("-")
    m, k = x.shape
    g = k if gran == "pt" else int(gran[1:])
    xf = x.float().reshape(m, k // g, g)
    amax = xf.abs().amax(-1, keepdim=True)
    # A tensor divisor (made before any capture): torch multiplies by the reciprocal of a Python
    # scalar, which can differ by an ulp.
    scale = torch.where(amax > 0, amax / TOPS[(kind, x.device)], torch.ones_like(amax))
    q = (xf / scale).clamp(-MAX[kind] - (kind == "i8"), MAX[kind])
    codes = q.round().to(torch.int8) if kind == "i8" else q.to(torch.float8_e4m3fn)
    return codes.reshape(m, k), scale.reshape(m, k // g)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--impls", default="humming-aot,torch,torch-cast")
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--shapes", default=",".join(f"{m}x{k}" for m, k in SHAPES), help="MxK,...")
    args = ap.parse_args()
    impls = args.impls.split(",")
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    timer = Timer(flush_mib=256)
    rows = []
    for m, k in shapes:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        TOPS.update({(kind, x.device): torch.tensor(v, device=x.device) for kind, v in MAX.items()})
        for act in args.formats.split(","):
            g = k if act.endswith("-pt") else int(act.rpartition("-g")[2])
            traffic = m * k * 2 + m * k + m * (k // g) * 4
            ours, theirs = ha.quantize_act(x, act), torch_rule(x, act)
            same = torch.equal(ours[0].view(torch.uint8), theirs[0].view(torch.uint8)) and torch.equal(
                ours[1], theirs[1]
            )
            code_dtype = torch.int8 if act.startswith("i8") else torch.float8_e4m3fn
            for impl, fn in (
                ("humming-aot", lambda: torch.ops.humming.quantize_act(x, act)),
                ("torch", lambda: torch_rule(x, act)),
                ("torch-cast", lambda: x.to(code_dtype)),
                ("torch-copy", lambda: x.clone()),
            ):
                if impl not in impls:
                    continue
                us = statistics.median(timer.graph(fn, args.iters))
                # torch-copy moves the input twice (read, write): the device's copy ceiling.
                moved = 4 * m * k if impl == "torch-copy" else traffic
                row = {"impl": impl, "format": act, "m": m, "k": k, "us": us, "gb_s": moved / us / 1e3}
                row["same_codes_as_torch"] = same
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
