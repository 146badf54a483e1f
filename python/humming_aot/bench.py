"""GEMM benchmark of humming-aot against its peers, measured in one run on one GPU (DESIGN section 8).

``humming-aot bench`` and ``benchmarks/bench_gemm.py`` both land in :func:`main`.

What is timed, and how (the same text goes into the JSON ``method`` field, see ``METHOD``):

* before every timed call a buffer larger than L2 (256 MiB by default) passes through L2, so the
  weights come from HBM as they do in a model that streams through many layers. ``--flush read``
  (the default) reduces the buffer into one element and leaves L2 full of clean lines, as a forward
  pass does (what L2 holds then is mostly the previous layer's weights, read only); ``--flush
  write`` zeroes it instead, which leaves L2 full of dirty lines whose write-back to HBM competes
  with the timed kernel's reads: on the H200 a streaming read of 117 MB took 38.1 us after a
  zeroing flush and 29.8 us after a read flush;
* ``us`` (eager): flush, ``torch.cuda.synchronize()``, then CUDA events around one Python call. The
  GPU is idle when the call starts, so the time includes whatever the host needs to issue the call
  when that is longer than the GPU work (what a server pays without CUDA graphs); median of the
  timed calls;
* ``us_graph`` (M <= 256 by default): one call captured in a CUDA graph, replayed after a flush
  without synchronizing in between, so the flush kernel still runs while the host launches the
  replay and the events see GPU time only (servers run decode under graphs); median;
* ``host_overhead_us`` (the same M range): CPU wall time per call of issuing 20 back-to-back eager
  calls without flush or synchronization, i.e. the host cost of one eager call by itself.

Shapes: ``--suite headline`` (the default) are the design's three shapes, ``--suite models`` the
dense layers of public models listed in ``bench_corpus.json`` next to this module (N x K with
model and layer names, see ``load_corpus``), ``--suite all`` both; rows of a shape in that file
carry its ``label`` (e.g. "Llama-3-70B, Qwen2.5-72B o") whichever way the shape was chosen.

Peers: cuBLAS bf16 (``F.linear``), torch's int4 weight-only kernel (``torch._weight_int4pack_mm``),
FP8 (``torch._scaled_mm`` with row-wise scales) and the JIT Humming library ``humming-kernels``.
That library registers ops in the same ``torch.ops.humming`` namespace as humming-aot (both define
``humming::pack_weight``), so the two cannot be loaded into one process: its rows are measured by a
child process (``--worker humming-jit``) that never loads ``humming_aot._C``. Nothing in this module
imports ``humming_aot._C`` at import time for the same reason.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import json
import math
import os
import pathlib
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from . import formats as F

DEFAULT_SHAPES = "8192x8192,28672x8192,8192x28672"
DEFAULT_MS = "1,16,64,256,1024,4096,8192"
QUICK_SHAPES = "8192x8192"
QUICK_MS = "1,256,4096"
# Shape lists by name (--suite): the design's three shapes, the layers of public models in the
# corpus file, or both.
SUITES = ("headline", "models", "all")
CORPUS_PATH = pathlib.Path(__file__).resolve().parent / "bench_corpus.json"
FLUSH_METHODS = ("read", "write")

# Short names for the formats of the design's comparisons. Anything else is given as
# WEIGHT[:ACT], e.g. "i4g128-sbf16:bf16" or "e2m1g32-se8m0:e4m3-pt".
FORMAT_ALIASES = {
    "w4a16": ("u4g128-sbf16", "bf16"),
    "w8a16": ("u8gc-sbf16", "bf16"),
    "w4a8": ("e2m1gc-sbf16", "e4m3-pt"),
}
# The MoE layers scripts/bench_moe.py, routing_once.py and moe_gemm_once.py run, by name:
# (experts, top_k, hidden H, expert intermediate F); gate-up is [2F, H], down [H, F] per expert.
MOE_MODELS = {
    "deepseek-v3": (256, 8, 7168, 2048),
    "qwen3-30b-a3b": (128, 8, 2048, 768),
    "mixtral-8x7b": (8, 2, 4096, 14336),
    "gpt-oss-120b": (128, 4, 2880, 2880),
}

# Weight configs of humming-kernels for the formats it is compared on (its HummingWeightSchema:
# unsigned codes are symmetric around the middle of their range, bf16 scales from the layer dtype),
# and for W4A8 its input config too (HummingInputSchema: activations quantized to e4m3 per token
# inside its forward): FP4 weights with channel scales, the peer's W4A8 of ../shared/ANCHORS.md.
JIT_CONFIGS = {
    "w4a16": {"dtype": "uint4", "group_size": 128},
    "w8a16": {"dtype": "uint8", "group_size": 0},
    "w4a8": {"dtype": "float4e2m1", "group_size": 0, "input": {"dtype": "float8e4m3"}},
}
IMPLS = ("humming-aot", "humming-aot-gemm", "cublas-bf16", "torch-int4", "cublaslt-fp8", "humming-jit")
INT4_GROUP = 128
INT4_INNER_K_TILES = 8  # what torchao uses; needs K % 128 == 0
FP8_M_MULTIPLE = 16  # _scaled_mm wants every dimension a multiple of 16

METHOD = {
    "l2_flush": "before every timed call a buffer of flush_mib MiB (larger than L2, at least 4x) passes through L2 "
    "on the same stream, as settings.flush says: read (the default) reduces it into one element "
    "(torch.amax), leaving L2 full of clean lines as in a forward pass, where L2 holds mostly the "
    "previous layer's weights; write zeroes it, leaving dirty lines whose write-back to HBM competes "
    "with the timed kernel's reads (H200: a streaming read of 117 MB took 38.1 us after a zeroing "
    "flush, 29.8 us after a read flush)",
    "eager": "us: flush, torch.cuda.synchronize(), CUDA events around one Python call; host cost is included "
    "when the host is slower than the GPU work; median of up to `iters` calls, stopped early after "
    "max_ms_per_point ms (at least 3 calls)",
    "graph": "us_graph (m <= graph_max_m): one call captured in a CUDA graph, replayed after a flush without a "
    "synchronization in between, CUDA events around the replay only: GPU time; median",
    "host_overhead": "host_overhead_us (m <= graph_max_m): CPU wall time (perf_counter) per call of issuing "
    "20 back-to-back eager calls without flush or synchronization, divided by 20; "
    "eager_minus_graph_us = us - us_graph is given too",
    "tflops": "2*m*n*k / min(us, us_graph), useful work only (FP8 rows pad m to a multiple of 16 but count m)",
    "gpu_state": "gpu_sm_mhz, gpu_mem_mhz, gpu_temp_c, gpu_power_w, gpu_clock_reasons: nvidia-smi read once "
    "right after each point's timings, so a point timed at a lowered SM clock (heat, power) shows; "
    "kernels bound by instruction issue rather than memory slow down with the SM clock",
    "weights": "one random bf16 weight per shape (randn), quantized by each implementation's own quantizer: "
    "humming-aot by the reference rule (computed on the GPU, see bench.quantize_symmetric_uint), "
    "torch-int4 uint4 g128 asymmetric (bf16 scale and zero), FP8 e4m3 with one fp32 scale per "
    "output channel, humming-kernels by HummingLayer.load_from_unquantized",
    "activations": "randn bf16 [m, k]; FP8 rows quantize them per token (e4m3, fp32 scales) before timing, "
    "so only torch._scaled_mm is timed; humming-aot formats with quantized activations "
    "quantize inside the timed call (QuantLinear.forward), humming-aot-gemm rows (those formats only) "
    "quantize before timing, as the FP8 rows do, so only the GEMM is timed",
    "rel_err": "||y - x @ W.T|| / ||x @ W.T|| at m = check_m against the unquantized bf16 weight (float32 "
    "reference): a sanity check that the weight reached the kernel, not an accuracy claim",
    "peers": "cublas-bf16: F.linear; torch-int4: torch._weight_int4pack_mm (group 128, innerKTiles 8); "
    "cublaslt-fp8: torch._scaled_mm with row-wise scales, bf16 out (torch picks the backend); "
    "humming-jit: humming-kernels HummingLayer, warmed up (its first call per layer compiles), "
    "run in a child process because it registers the same torch.ops.humming namespace",
}


class BenchError(RuntimeError):
    """A condition under which the benchmark cannot run; main() prints it without a traceback."""


# ---- arguments -----------------------------------------------------------------------------------


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """'8192x8192,28672x8192' -> [(8192, 8192), (28672, 8192)] as (N, K)."""
    out = []
    for part in text.split(","):
        part = part.strip().lower().replace(" ", "")
        if not part:
            continue
        m = re.fullmatch(r"(\d+)x(\d+)", part)
        if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
            raise argparse.ArgumentTypeError(f"shape {part!r} is not NxK with positive integers (e.g. 8192x28672)")
        out.append((int(m.group(1)), int(m.group(2))))
    if not out:
        raise argparse.ArgumentTypeError("no shape given; expected e.g. 8192x8192,28672x8192")
    return out


def load_corpus(path: pathlib.Path | None = None) -> list[dict]:
    """The entries of the shape corpus (bench_corpus.json): dicts with model, role, n, k, in file order.

    Checked here so that a broken entry stops ``--suite models`` with its index instead of timing a
    wrong shape.
    """
    path = pathlib.Path(path) if path is not None else CORPUS_PATH
    entries = json.loads(path.read_text()).get("shapes")
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: no 'shapes' list")
    for i, e in enumerate(entries):
        ok = (
            isinstance(e, dict)
            and all(isinstance(e.get(key), str) and e[key] for key in ("model", "role"))
            and all(type(e.get(key)) is int and e[key] > 0 for key in ("n", "k"))
        )
        if not ok:
            raise ValueError(
                f"{path}: shapes[{i}] = {e!r} needs model and role (names) and n and k (positive integers)"
            )
    return entries


def corpus_shapes(entries: list[dict]) -> list[tuple[int, int]]:
    """Distinct (N, K) of corpus entries, in order of first appearance (models share shapes)."""
    return list(dict.fromkeys((e["n"], e["k"]) for e in entries))


def shape_labels(entries: list[dict]) -> dict[tuple[int, int], str]:
    """{(N, K): label}: the models of each shape, grouped by layer role, e.g.
    "Llama-3-8B, Mistral-7B, Mixtral-8x7B qkv" or "A o; B down" when roles differ."""
    by_shape: dict = {}
    for e in entries:
        models = by_shape.setdefault((e["n"], e["k"]), {}).setdefault(e["role"], [])
        if e["model"] not in models:
            models.append(e["model"])
    return {
        shape: "; ".join(f"{', '.join(models)} {role}" for role, models in roles.items())
        for shape, roles in by_shape.items()
    }


def suite_shapes(name: str) -> list[tuple[int, int]]:
    """The (N, K) list of a --suite: headline, models (the corpus) or all (headline first, then the
    corpus shapes not already in it)."""
    headline = parse_shapes(DEFAULT_SHAPES)
    if name == "headline":
        return headline
    corpus = corpus_shapes(load_corpus())
    if name == "models":
        return corpus
    if name == "all":
        return headline + [s for s in corpus if s not in headline]
    raise ValueError(f"unknown suite {name!r}; choose from {', '.join(SUITES)}")


def parse_ms(text: str) -> list[int]:
    """'1,16,64' -> [1, 16, 64] (sorted, duplicates dropped)."""
    vals = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or int(part) < 1:
            raise argparse.ArgumentTypeError(f"M value {part!r} is not a positive integer")
        vals.add(int(part))
    if not vals:
        raise argparse.ArgumentTypeError("no M value given; expected e.g. 1,16,256")
    return sorted(vals)


@dataclasses.dataclass(frozen=True)
class FormatSpec:
    label: str  # what rows and tables call it: an alias (w4a16) or WEIGHT:ACT
    weight: str
    act: str

    @property
    def gemm(self) -> str:
        """The GEMM format QuantLinear builds for this weight and activation format (bf16 out when quantized)."""
        act = F.parse_activation_format(self.act)
        return str(F.GemmFormat(act, self.weight, "bf16" if act.quantized else str(act.type)))


def parse_format(text: str) -> FormatSpec:
    t = text.strip()
    if t.lower() in FORMAT_ALIASES:
        w, a = FORMAT_ALIASES[t.lower()]
        return FormatSpec(t.lower(), w, a)
    weight, _, act = t.partition(":")
    try:
        spec = FormatSpec("", str(F.parse_weight_format(weight)), str(F.parse_activation_format(act or "bf16")))
        spec.gemm  # noqa: B018  (validates the combination)
    except F.FormatError as e:
        raise argparse.ArgumentTypeError(
            f"format {t!r}: {e}. Give an alias ({', '.join(FORMAT_ALIASES)}) or WEIGHT[:ACT]"
        ) from None
    return dataclasses.replace(spec, label=f"{spec.weight}:{spec.act}")


def _csv(kind):
    def parse(text: str):
        items = [p.strip() for p in text.split(",") if p.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"no {kind} given")
        return items

    return parse


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="humming-aot bench",
        description="Time humming-aot GEMMs against cuBLAS bf16, torch int4, FP8 _scaled_mm and humming-kernels "
        "in one run on one GPU; write JSON, a Markdown table and (with matplotlib) a plot.",
    )
    ap.add_argument(
        "--shapes",
        type=parse_shapes,
        default=None,
        help="comma-separated NxK weight shapes (default: those of --suite)",
    )
    ap.add_argument(
        "--suite",
        choices=SUITES,
        default=None,
        help=f"named shape list: headline ({DEFAULT_SHAPES}, the default), models (the dense layers "
        "of public models in bench_corpus.json: Llama 3 8B and 70B, Qwen2.5 7B, 14B and 72B, "
        "Mistral 7B, Mixtral 8x7B, DeepSeek-V3, gpt-oss-120b) or all (both, each shape once). "
        f"--shapes wins; --quick without --suite times {QUICK_SHAPES} only",
    )
    ap.add_argument("--ms", type=parse_ms, default=None, help=f"comma-separated M values (default {DEFAULT_MS})")
    ap.add_argument(
        "--formats",
        type=_csv("format"),
        default=["w4a16", "w8a16"],
        help="humming-aot formats: aliases "
        + ", ".join(f"{k} ({w}, {a} activations)" for k, (w, a) in FORMAT_ALIASES.items())
        + " or WEIGHT[:ACT] (default w4a16,w8a16)",
    )
    ap.add_argument(
        "--layout",
        default="auto",
        help="humming-aot weight layout: auto (that of a fast instance for the format on this GPU, "
        "else generic; as QuantLinear.from_linear), or a layout name such as generic",
    )
    ap.add_argument(
        "--impls",
        type=_csv("implementation"),
        default=list(IMPLS),
        help=f"implementations to run (default all: {','.join(IMPLS)})",
    )
    ap.add_argument(
        "--jit-formats",
        type=_csv("format"),
        default=["w4a16"],
        help=f"formats for humming-jit, from {', '.join(JIT_CONFIGS)} (default w4a16; each compiles "
        "for about 13 s per shape)",
    )
    ap.add_argument("--iters", type=int, default=None, help="timed calls per point (default 20; quick 5)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed calls before timing (default 3; quick 2)")
    ap.add_argument(
        "--max-ms-per-point",
        type=float,
        default=None,
        help="stop a point's timed loop after this much wall time, keeping at least 3 calls (default 1000; quick 300)",
    )
    ap.add_argument(
        "--graph-max-m",
        type=int,
        default=256,
        help="also time CUDA-graph replays and host overhead for M up to this (default 256)",
    )
    ap.add_argument("--flush-mib", type=int, default=256, help="L2 flush buffer in MiB (default 256)")
    ap.add_argument(
        "--flush",
        choices=FLUSH_METHODS,
        default="read",
        help="how the flush buffer passes through L2 before each timed call: read (default; leaves "
        "clean lines, as the previous layer's weights in a forward pass) or write (zeroes it; "
        "the dirty lines' write-back slows the timed kernel's reads)",
    )
    ap.add_argument("--check-m", type=int, default=16, help="M of the relative-error sanity check (default 16)")
    ap.add_argument(
        "--time-budget-s",
        type=float,
        default=480.0,
        help="stop starting new points after this many seconds and list the rest as skipped (default 480)",
    )
    ap.add_argument(
        "--jit-timeout-s",
        type=float,
        default=None,
        help="wall-clock limit of the humming-jit child process (default: half the time budget)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--out-dir", type=pathlib.Path, default=None, help="output directory (default benchmarks/results/<device>)"
    )
    ap.add_argument("--name", default=None, help="base name of the output files (default gemm-<UTC date-time>)")
    ap.add_argument("--no-plot", action="store_true", help="skip the PNG")
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: shapes {QUICK_SHAPES}, M {QUICK_MS}, fewer iterations (explicit options win)",
    )
    # Internal: the parent runs humming-jit in a child process with these.
    ap.add_argument("--worker", choices=["humming-jit"], default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", type=pathlib.Path, default=None, help=argparse.SUPPRESS)
    return ap


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and resolve defaults (--quick fills in what was not given explicitly)."""
    ap = build_parser()
    args = ap.parse_args(argv)
    q = args.quick
    # Shapes: explicit --shapes, else an explicit --suite, else --quick's one shape, else the headline
    # suite. args.suite ends up naming the suite the shapes came from, None when they did not.
    if args.shapes is not None:
        args.suite = None
    elif args.suite is not None:
        try:
            args.shapes = suite_shapes(args.suite)
        except (OSError, ValueError) as e:
            ap.error(f"--suite {args.suite}: {e}")
    elif q:
        args.shapes = parse_shapes(QUICK_SHAPES)
    else:
        args.suite = "headline"
        args.shapes = suite_shapes("headline")
    if args.ms is None:
        args.ms = parse_ms(QUICK_MS if q else DEFAULT_MS)
    if args.iters is None:
        args.iters = 5 if q else 20
    if args.warmup is None:
        args.warmup = 2 if q else 3
    if args.max_ms_per_point is None:
        args.max_ms_per_point = 300.0 if q else 1000.0
    for name, lo in (("iters", 1), ("warmup", 1), ("flush_mib", 1), ("check_m", 1)):
        if getattr(args, name) < lo:
            ap.error(f"--{name.replace('_', '-')} must be at least {lo}")
    if args.max_ms_per_point <= 0 or args.time_budget_s <= 0:
        ap.error("--max-ms-per-point and --time-budget-s must be positive")
    bad = [i for i in args.impls if i not in IMPLS]
    if bad:
        ap.error(f"unknown implementation(s) {', '.join(bad)}; choose from {', '.join(IMPLS)}")
    try:
        args.formats = [parse_format(f) for f in args.formats]
    except argparse.ArgumentTypeError as e:
        ap.error(str(e))
    bad = [f for f in args.jit_formats if f not in JIT_CONFIGS]
    if bad:
        ap.error(f"--jit-formats: {', '.join(bad)} unknown; humming-jit runs {', '.join(JIT_CONFIGS)}")
    if args.jit_timeout_s is None:
        args.jit_timeout_s = args.time_budget_s / 2
    if args.worker and args.worker_out is None:
        ap.error("--worker needs --worker-out")
    return args


def worker_argv(args: argparse.Namespace, out: pathlib.Path, budget_s: float) -> list[str]:
    """Arguments that make a child process measure humming-jit with the parent's settings."""
    return [
        "--shapes",
        ",".join(f"{n}x{k}" for n, k in args.shapes),
        "--ms",
        ",".join(map(str, args.ms)),
        "--jit-formats",
        ",".join(args.jit_formats),
        "--iters",
        str(args.iters),
        "--warmup",
        str(args.warmup),
        "--max-ms-per-point",
        str(args.max_ms_per_point),
        "--graph-max-m",
        str(args.graph_max_m),
        "--flush-mib",
        str(args.flush_mib),
        "--flush",
        args.flush,
        "--check-m",
        str(args.check_m),
        "--seed",
        str(args.seed),
        "--time-budget-s",
        str(budget_s),
        "--worker",
        "humming-jit",
        "--worker-out",
        str(out),
    ]


# ---- small pure helpers --------------------------------------------------------------------------


def tflops(m: int, n: int, k: int, us: float | None) -> float | None:
    """TFLOP/s of an m x n x k GEMM that took ``us`` microseconds (2 flops per multiply-add)."""
    if us is None or not us > 0:
        return None
    return 2.0 * m * n * k / (us * 1e-6) / 1e12


def best_us(row: dict) -> float | None:
    """The time a row is judged by: the graph replay where measured, else the eager call."""
    times = [t for t in (row.get("us_graph"), row.get("us")) if t is not None]
    return min(times) if times else None


def device_slug(name: str) -> str:
    """'NVIDIA H200' -> 'h200', 'NVIDIA H100 80GB HBM3' -> 'h100-80gb-hbm3'."""
    s = re.sub(r"\bnvidia\b", "", name.lower())
    s = re.sub(r"[^a-z0-9]+", "-", s).strip("-")
    return s or "gpu"


def median(xs):
    return statistics.median(xs) if xs else None


def impl_label(impl: str, fmt: str) -> str:
    return f"{impl} {fmt}"


def _fmt_num(x, digits=1) -> str:
    return "" if x is None else f"{x:.{digits}f}"


# ---- output writers ------------------------------------------------------------------------------


def _clean(obj):
    """JSON has no NaN/inf: they become null. Paths and tuples become strings and lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, pathlib.Path):
        return str(obj)
    return obj


def write_json(result: dict, path: pathlib.Path) -> pathlib.Path:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(result), indent=1, allow_nan=False) + "\n")
    return path


def _columns(rows: list[dict]) -> list[str]:
    order = {impl: i for i, impl in enumerate(IMPLS)}
    seen = {}
    for r in rows:
        seen.setdefault(impl_label(r["impl"], r["format"]), (order.get(r["impl"], len(order)), len(seen)))
    return sorted(seen, key=lambda c: seen[c])


def _grid(rows: list[dict]):
    """{(n, k): {m: {label: row}}} in shape order of first appearance, M ascending."""
    grid: dict = {}
    for r in rows:
        grid.setdefault((r["n"], r["k"]), {}).setdefault(r["m"], {})[impl_label(r["impl"], r["format"])] = r
    return grid


def markdown(result: dict) -> str:
    rows = result.get("rows", [])
    cols = _columns(rows)
    grid = _grid(rows)
    dev = result.get("device", {})
    bi = result.get("humming_aot", {}).get("build_info") or {}
    lines = [f"# GEMM benchmark on {dev.get('name', '?')}", ""]
    lines.append(
        f"{result.get('date', '?')}; driver {dev.get('driver', '?')}, torch {result.get('torch', '?')} "
        f"(CUDA {result.get('cuda', '?')}); humming-aot {bi.get('version', '?')} (profile "
        f"{bi.get('profile', '?')}, archs {', '.join(bi.get('archs', [])) or '?'}); git "
        f"{result.get('git_sha') or '?'}"
        + (" (uncommitted changes)" if result.get("git_dirty") else "")
        + (
            f"; humming-kernels {result['peers']['humming-kernels']}"
            if result.get("peers", {}).get("humming-kernels")
            else ""
        )
    )
    lines.append("")
    flush = result.get("settings", {}).get("flush")
    lines.append(
        f"Microseconds per call, median, L2 flushed{f' ({flush})' if flush else ''} before each call. "
        "`g`: CUDA-graph replay (GPU time); "
        "`e`: eager call timed from an idle GPU (includes host cost when the host is slower). "
        "Method details are in the JSON `method` field."
    )
    # A layer column only when some shape is a known model layer (bench_corpus.json).
    labels = {(r["n"], r["k"]): r["label"] for r in rows if r.get("label")}

    def table(title, cell):
        out = [
            "",
            f"## {title}",
            "",
            "| N x K | " + ("layer | " if labels else "") + "M | " + " | ".join(cols) + " |",
            "|---|" + ("---|" if labels else "") + "---:|" + "---:|" * len(cols),
        ]
        for (n, k), by_m in grid.items():
            first = True
            for m in sorted(by_m):
                vals = [cell(by_m[m].get(c)) for c in cols]
                if not any(vals):
                    continue  # e.g. M above graph_max_m in the host-overhead table
                shape = [f"{n} x {k}", labels.get((n, k), "")] if labels else [f"{n} x {k}"]
                if not first:
                    shape = [""] * len(shape)
                out.append("| " + " | ".join(shape) + f" | {m} | " + " | ".join(vals) + " |")
                first = False
        return out

    def time_cell(r):
        if r is None:
            return ""
        if r.get("us_graph") is not None:
            return f"{r['us_graph']:.1f} g"
        return "" if r.get("us") is None else f"{r['us']:.1f} e"

    def tflops_cell(r):
        return "" if r is None else _fmt_num(r.get("tflops"), 0 if (r.get("tflops") or 0) >= 100 else 1)

    def eager_cell(r):
        if r is None or r.get("host_overhead_us") is None:
            return ""
        return f"{_fmt_num(r.get('us'))} / {_fmt_num(r.get('host_overhead_us'))}"

    lines += table("Time per call (us): graph where measured, else eager", time_cell)
    lines += table("TFLOP/s (best of graph and eager)", tflops_cell)
    host_rows = [r for r in rows if r.get("host_overhead_us") is not None]
    if host_rows:
        lines += table(
            "Eager time / host cost of issuing one eager call (us), M <= "
            f"{result.get('settings', {}).get('graph_max_m', '?')}",
            eager_cell,
        )
    summary = result.get("host_overhead", [])
    if summary:
        lines += [
            "",
            "## Host overhead per eager call (median over the points above)",
            "",
            "| implementation | host issue time (us) | eager - graph (us) | points |",
            "|---|---:|---:|---:|",
        ]
        for s in summary:
            lines.append(
                f"| {impl_label(s['impl'], s['format'])} | {_fmt_num(s.get('host_overhead_us'))} | "
                f"{_fmt_num(s.get('eager_minus_graph_us'))} | {s.get('points', 0)} |"
            )
    lines += gpu_state_section(rows)
    inst = [r for r in rows if r.get("instance")]
    if inst:
        lines += [
            "",
            "## humming-aot instances chosen by the dispatcher",
            "",
            "| N x K | M | format | layout | instance |",
            "|---|---:|---|---|---|",
        ]
        for r in inst:
            lines.append(
                f"| {r['n']} x {r['k']} | {r['m']} | {r['format']} | {r.get('layout', '')} | `{r['instance']}` |"
            )
    errs = sorted(
        {(impl_label(r["impl"], r["format"]), r["n"], r["k"], r.get("rel_err")) for r in rows},
        key=lambda t: (t[1], t[2], t[0]),
    )
    if errs:
        lines += [
            "",
            f"## Sanity: relative error against the bf16 weight at M = "
            f"{result.get('settings', {}).get('check_m', '?')}",
            "",
            "| implementation | N x K | rel. error |",
            "|---|---|---:|",
        ]
        for label, n, k, e in errs:
            lines.append(f"| {label} | {n} x {k} | {'' if e is None else f'{e:.4f}'} |")
    skipped = result.get("skipped", [])
    if skipped:
        lines += ["", "## Skipped", ""]
        for s in skipped:
            where = ", ".join(
                [f"{key}={s[key]}" for key in ("n", "k", "m") if s.get(key) is not None]
                + ([s["label"]] if s.get("label") else [])
            )
            reason = s.get("reason", "")
            reason = reason if len(reason) <= 240 else reason[:240] + " ... (whole in the JSON)"
            lines.append(
                f"- {impl_label(s.get('impl', '?'), s.get('format', '?'))}"
                + (f" ({where})" if where else "")
                + f": {reason}"
            )
    return "\n".join(lines) + "\n"


def gpu_state_section(rows: list[dict]) -> list[str]:
    """Markdown lines: per implementation, the SM clock its points ran at (min / median / max), the
    highest temperature and power, and how many points ran below 90% of the run's highest SM clock
    (empty when the rows carry no GPU state)."""
    clocked = [r for r in rows if r.get("gpu_sm_mhz") is not None]
    if not clocked:
        return []
    top = max(r["gpu_sm_mhz"] for r in clocked)
    out = [
        "",
        "## GPU state at each point (nvidia-smi after its timings)",
        "",
        f"Highest SM clock seen in the run: {top:.0f} MHz.",
        "",
        "| implementation | points | SM clock min / median / max (MHz) | below 90% of the highest | "
        "temperature max (C) | power max (W) |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for label in _columns(clocked):
        rs = [r for r in clocked if impl_label(r["impl"], r["format"]) == label]
        sm = [r["gpu_sm_mhz"] for r in rs]
        low = sum(1 for v in sm if v < 0.9 * top)
        temps = [r["gpu_temp_c"] for r in rs if r.get("gpu_temp_c") is not None]
        power = [r["gpu_power_w"] for r in rs if r.get("gpu_power_w") is not None]
        out.append(
            f"| {label} | {len(rs)} | {min(sm):.0f} / {median(sm):.0f} / {max(sm):.0f} | "
            f"{low} | {_fmt_num(max(temps) if temps else None, 0)} | "
            f"{_fmt_num(max(power) if power else None, 0)} |"
        )
    return out


def write_markdown(result: dict, path: pathlib.Path) -> pathlib.Path:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(markdown(result))
    return path


def write_plot(result: dict, path: pathlib.Path, log=print) -> pathlib.Path | None:
    """Time and TFLOP/s against M, one column per shape. Returns None (with a note) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on the GPU machine
        import matplotlib.pyplot as plt
    except ImportError:
        log("note: matplotlib is not installed; no plot written (the JSON and Markdown have every number)")
        return None
    rows = result.get("rows", [])
    grid = _grid(rows)
    if not grid:
        log("note: no rows measured; no plot written")
        return None
    cols = _columns(rows)
    # One colour per implementation in every panel, and one legend for the figure: a panel where
    # some implementation is missing must not recolour the others.
    colour = {c: f"C{i % 10}" for i, c in enumerate(cols)}
    handles = {}
    fig, axes = plt.subplots(2, len(grid), figsize=(5.5 * len(grid), 8.5), squeeze=False)
    for j, ((n, k), by_m) in enumerate(grid.items()):
        for c in cols:
            pts = [(m, by_m[m][c]) for m in sorted(by_m) if c in by_m[m] and best_us(by_m[m][c]) is not None]
            if not pts:
                continue
            ms = [m for m, _ in pts]
            (line,) = axes[0][j].plot(ms, [best_us(r) for _, r in pts], marker="o", color=colour[c], label=c)
            axes[1][j].plot(ms, [r.get("tflops") or float("nan") for _, r in pts], marker="o", color=colour[c])
            handles.setdefault(c, line)
        label = next((r["label"] for r in by_m[min(by_m)].values() if r.get("label")), None)
        axes[0][j].set_title(f"N x K = {n} x {k}" + (f"\n{label}" if label else ""), fontsize=10 if label else None)
        axes[0][j].set_ylabel("us per call (graph where measured)")
        axes[1][j].set_ylabel("TFLOP/s")
        for ax in (axes[0][j], axes[1][j]):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("M")
            ax.grid(True, which="both", alpha=0.3)
        axes[0][j].set_yscale("log")
    fig.suptitle(f"GEMM on {result.get('device', {}).get('name', '?')} ({result.get('date', '')})")
    labels = [c for c in cols if c in handles]
    fig.legend([handles[c] for c in labels], labels, loc="lower center", ncol=min(len(labels), 4), fontsize=8)
    fig.tight_layout(rect=(0, 0.07, 1, 1))  # room for the legend below the panels
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def summarize_host(rows: list[dict]) -> list[dict]:
    """Per implementation: median host issue time and median eager - graph over its rows."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["impl"], r["format"]), []).append(r)
    out = []
    for (impl, fmt), rs in groups.items():
        host = [r["host_overhead_us"] for r in rs if r.get("host_overhead_us") is not None]
        diff = [r["eager_minus_graph_us"] for r in rs if r.get("eager_minus_graph_us") is not None]
        if host or diff:
            out.append(
                {
                    "impl": impl,
                    "format": fmt,
                    "host_overhead_us": median(host),
                    "eager_minus_graph_us": median(diff),
                    "points": max(len(host), len(diff)),
                }
            )
    return out


# ---- quantizers that run on the GPU -------------------------------------------------------------


def quantize_symmetric_uint(w, fmt):
    """reference.quantize_weight for unsigned codes with the implied zero point, on w's device.

    The reference quantizer runs on the CPU in float64 and takes about ten seconds for a
    28672 x 8192 weight; this follows the same rule step by step (scale = amax / (2**(bits-1) - 1)
    rounded once to the scale type, empty groups 1, codes = round(w / scale) + 2**(bits-1) clamped)
    so it gives the same codes and scales (tests/test_bench.py compares them) in a fraction of a
    second. Returns None for formats it does not cover (other code kinds, zero points, block or
    global scales, partial K groups); callers then use the reference.
    """
    import torch

    from . import reference as R

    fmt = F.parse_weight_format(fmt)
    N, K = w.shape
    gk = fmt.group_k or K
    if (
        fmt.code.kind != F.KIND_UINT
        or fmt.zero != "none"
        or fmt.group_n != 1
        or fmt.global_scale
        or fmt.scale is None
        or fmt.scale.kind == F.KIND_E8M0
        or K % gk
    ):
        return None
    wf = w.to(torch.float32).reshape(N, K // gk, gk)
    r = wf.abs().amax(dim=-1)  # exact in float32, as in the reference
    empty = r == 0
    c = float(max((1 << (fmt.code.bits - 1)) - 1, 1))
    sdt = R.torch_dtype(fmt.scale)
    # The reference divides in float64 and rounds to float32, then to the scale type.
    stored = (r.double() / c).float().clamp(0.0, R._max_value(fmt.scale)).to(sdt)
    tiny = torch.full_like(stored, R._min_positive(fmt.scale))
    stored = torch.where(stored.float() == 0, tiny, stored)
    stored = torch.where(empty, torch.ones_like(stored), stored)
    x = wf / stored.float().unsqueeze(-1)
    codes = (torch.round(x) + R.implied_zero(fmt)).clamp(0, fmt.code.max_int).to(torch.uint8).reshape(N, K)
    return R.QuantizedWeight(fmt, codes, stored)


def int4pack_operands(w, group: int = INT4_GROUP):
    """torch's int4 weight-only operands for w [N, K]: uint4 codes (int32 [N, K]) and scales-and-zeros.

    torch's kernel computes w = (q - 8) * scale + zero per group of ``group`` inputs, with
    scales_and_zeros of shape [K / group, N, 2] in the activation dtype (bf16). Asymmetric min/max
    quantization, as torchao's int4 weight-only recipe.
    """
    import torch

    N, K = w.shape
    wf = w.to(torch.float32).reshape(N, K // group, group)
    lo = wf.amin(dim=-1, keepdim=True)
    hi = wf.amax(dim=-1, keepdim=True)
    scale = (hi - lo).clamp(min=1e-6) / 15
    zero = lo + 8 * scale
    q = ((wf - lo) / scale).round().clamp(0, 15).to(torch.int32).reshape(N, K)
    sz = torch.stack([scale.reshape(N, K // group), zero.reshape(N, K // group)], dim=2)
    return q, sz.transpose(0, 1).contiguous().to(torch.bfloat16)


def int4_nibbles(q):
    """int32 codes [N, K] -> uint8 [N, K / 2], even K index in the high nibble (torch >= 2.5 CUDA input)."""
    import torch

    return ((q[:, ::2] << 4) | q[:, 1::2]).to(torch.uint8)


def fp8_rowwise(t):
    """e4m3 codes and fp32 scales [rows, 1] of t [rows, K], one scale per row (amax / 448)."""
    import torch

    tf = t.to(torch.float32)
    amax = tf.abs().amax(dim=1, keepdim=True)
    scale = torch.where(amax == 0, torch.ones_like(amax), amax / 448.0)
    return (tf / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), scale


# ---- implementations ------------------------------------------------------------------------------


class Impl:
    """One implementation of one format: setup(w) once per shape, call(x) per M, teardown()."""

    name = ""

    def __init__(self, fmt: str, detail: str = ""):
        self.format = fmt
        self.detail = detail
        self.weight_bytes = None
        self.extra: dict = {}  # more fields for this implementation's rows (e.g. the weight layout)

    def setup(self, w):
        raise NotImplementedError

    def call(self, x):
        """A no-argument callable computing x @ W.T (its output may have padded rows)."""
        raise NotImplementedError

    def instance(self, m: int):
        return None

    def teardown(self):
        pass


class CublasBf16(Impl):
    name = "cublas-bf16"

    def setup(self, w):
        self.w = w
        self.weight_bytes = w.numel() * w.element_size()

    def call(self, x):
        import torch.nn.functional as Fn

        w = self.w
        return lambda: Fn.linear(x, w)

    def teardown(self):
        self.w = None


class TorchInt4(Impl):
    name = "torch-int4"

    def setup(self, w):
        import torch

        k = w.shape[1]
        if k % INT4_GROUP or k % (INT4_INNER_K_TILES * 16):
            # Said here: otherwise the first complaint is a reshape error of the operand builder.
            raise ValueError(
                f"torch-int4 needs K a multiple of {INT4_GROUP} (groups of {INT4_GROUP}, "
                f"innerKTiles {INT4_INNER_K_TILES} of 16); K = {k}"
            )
        q, self.sz = int4pack_operands(w)
        try:
            # torch >= 2.5 takes the codes two per byte ([N, K/2] uint8) ...
            self.wp = torch._convert_weight_to_int4pack(int4_nibbles(q), INT4_INNER_K_TILES)
        except (RuntimeError, TypeError) as first:
            try:  # ... older torch one per int32 ([N, K])
                self.wp = torch._convert_weight_to_int4pack(q, INT4_INNER_K_TILES)
            except (RuntimeError, TypeError) as second:
                raise BenchError(
                    f"torch._convert_weight_to_int4pack rejected uint8 [N, K/2] codes ({first}) "
                    f"and int32 [N, K] codes ({second})"
                ) from None
        self.weight_bytes = self.wp.numel() * self.wp.element_size() + self.sz.numel() * self.sz.element_size()

    def call(self, x):
        import torch

        wp, sz = self.wp, self.sz
        return lambda: torch._weight_int4pack_mm(x, wp, INT4_GROUP, sz)

    def teardown(self):
        self.wp = self.sz = None


class ScaledMmFp8(Impl):
    name = "cublaslt-fp8"

    def setup(self, w):
        wq, ws = fp8_rowwise(w)
        self.b = wq.t()  # [K, N] column-major, as _scaled_mm wants its second operand
        self.scale_b = ws.reshape(1, -1).contiguous()  # [1, N]
        self.weight_bytes = wq.numel() + ws.numel() * 4

    def call(self, x):
        import torch

        m = x.shape[0]
        m_pad = -(-m // FP8_M_MULTIPLE) * FP8_M_MULTIPLE
        if m_pad != m:
            x = torch.cat([x, x.new_zeros(m_pad - m, x.shape[1])])
        a, scale_a = fp8_rowwise(x)  # per token, outside the timed call
        b, scale_b = self.b, self.scale_b
        return lambda: torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)

    def teardown(self):
        self.b = self.scale_b = None


class HummingAot(Impl):
    name = "humming-aot"

    def __init__(self, spec: FormatSpec, layout: str = "auto"):
        super().__init__(spec.label, spec.gemm)
        self.spec = spec
        self.layout = layout

    def _layout(self, device) -> int:
        from . import dispatch
        from .pack import layout_id

        if self.layout != "auto":
            return layout_id(self.layout)
        # As QuantLinear.from_linear(layout="auto"): the layout of a fast instance for the format on
        # this device, else the generic one. Builds without that helper have only the generic layout.
        preferred = getattr(dispatch, "preferred_layout", None)
        return preferred(self.spec.gemm, device) if preferred is not None else layout_id("generic")

    def setup(self, w):
        from . import reference as R
        from .layers import QuantLinear
        from .pack import pack_weight

        layout = self._layout(w.device)
        q = quantize_symmetric_uint(w, self.spec.weight)
        if q is None:  # formats the GPU quantizer does not cover: the CPU reference (slower, same rule)
            q = R.quantize_weight(w.float().cpu(), self.spec.weight)
        packed = pack_weight(q, layout=layout).to(w.device)
        del q
        self.layer = QuantLinear.from_packed(packed, self.spec.act)
        self.act_dtype = None if self.layer.fmt.act.quantized else R.torch_dtype(self.layer.fmt.act.type)
        self.weight_bytes = packed.nbytes
        self.extra = {"layout": packed.layout_name}

    def call(self, x):
        if self.act_dtype is not None and x.dtype != self.act_dtype:
            x = x.to(self.act_dtype)
        layer = self.layer
        return lambda: layer(x)

    def instance(self, m):
        return self.layer.instance_for(m, self.layer.codes.device)

    def teardown(self):
        self.layer = None


class HummingAotGemm(HummingAot):
    """humming-aot for formats with quantized activations, the activations quantized (by the same
    kernel QuantLinear uses) before the timed call: the GEMM alone, as the cublaslt-fp8 rows time."""

    name = "humming-aot-gemm"

    def call(self, x):
        return prequantized_gemm(self.layer, x)


def prequantized_gemm(layer, x, instance: str = ""):
    """A call of ``layer``'s GEMM alone (torch.ops.humming.gemm, instance ``instance`` or the
    dispatcher's) on ``x`` quantized here, once, by the kernel QuantLinear uses (a format with
    quantized activations). Also scripts/time_shapes.py --prequant."""
    import torch

    a, a_scales = torch.ops.humming.quantize_act(x.contiguous(), str(layer.fmt.act))
    b = layer._buffers
    inst = instance or layer.instance_for(x.shape[0], x.device)
    args = (b["codes"], b["scales"], b["zeros"], b["global_scale"], a_scales, b["bias"], str(layer.fmt))
    shape = (layer.layout, layer.out_features, layer.in_features, inst)
    return lambda: torch.ops.humming.gemm(a, *args, *shape)


class HummingJit(Impl):
    """humming-kernels (import name ``humming``): HummingLayer, quantized from the bf16 weight."""

    name = "humming-jit"

    def setup(self, w):
        import torch
        from humming.layer import HummingLayer

        n, k = w.shape
        config = dict(JIT_CONFIGS[self.format])
        act = config.pop("input", None)
        layer = HummingLayer(
            shape_n=n,
            shape_k=k,
            weight_config=config,
            input_config=dict(act) if act else None,
            torch_dtype=torch.bfloat16,
        )
        layer = layer.to(w.device)
        layer.load_from_unquantized(w)
        layer.transform()
        self.layer = layer
        self.weight_bytes = sum(
            t.numel() * t.element_size() for name, t in layer.state_dict().items() if name != "locks"
        )

    def call(self, x):
        layer = self.layer
        return lambda: layer(x)

    def teardown(self):
        self.layer = None


# ---- timing ---------------------------------------------------------------------------------------


GPU_STATE_QUERY = ("clocks.sm", "clocks.mem", "temperature.gpu", "power.draw")
GPU_STATE_KEYS = ("gpu_sm_mhz", "gpu_mem_mhz", "gpu_temp_c", "gpu_power_w")


def read_gpu_state(selector: str, run=subprocess.run) -> dict | None:
    """SM and memory clock (MHz), temperature (C), power (W) and the active clock-event reasons (a
    hex bit mask; 0x0: none) of the GPU nvidia-smi knows as ``selector``, or None when nvidia-smi is
    missing or answers nothing usable. Drivers name the reasons field either way; both are tried."""
    for reasons in ("clocks_event_reasons.active", "clocks_throttle_reasons.active", None):
        fields = GPU_STATE_QUERY + ((reasons,) if reasons else ())
        try:
            p = run(
                ["nvidia-smi", "-i", selector, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=10,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        line = p.stdout.strip().splitlines()[0] if p.returncode == 0 and p.stdout.strip() else ""
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(fields):
            continue
        state = {}
        for key, v in zip(GPU_STATE_KEYS, values):
            try:
                state[key] = float(v)
            except ValueError:
                state[key] = None  # "[N/A]" and the like
        if reasons:
            state["gpu_clock_reasons"] = values[-1]
        return state
    return None


def flush_l2(buf, method: str, sink) -> None:
    """Pass every byte of ``buf`` through L2 (METHOD["l2_flush"]): "write" zeroes it, leaving dirty
    lines; "read" reduces it into ``sink`` (one element of buf's dtype), leaving clean ones."""
    import torch

    if method == "write":
        buf.zero_()
    elif method == "read":
        # A reduction reads every element (eager torch runs it whatever becomes of the result) and
        # writes one; the result goes into a kept tensor so no allocation happens between timed calls.
        torch.amax(buf, dim=0, keepdim=True, out=sink)
    else:
        raise ValueError(f"unknown flush method {method!r}; choose from {', '.join(FLUSH_METHODS)}")


class Timer:
    """L2 flush and the three measurements; ``device`` and ``sync`` let tests drive the loop on the CPU."""

    device = "cuda"

    def __init__(self, flush_mib: int, flush: str = "read"):
        import torch

        if flush not in FLUSH_METHODS:
            raise ValueError(f"unknown flush method {flush!r}; choose from {', '.join(FLUSH_METHODS)}")
        self.torch = torch
        self.flush_method = flush
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        l2 = int(getattr(props, "L2_cache_size", 0) or 0)
        # At least 4x L2 so nothing of the weights survives however the cache replaces lines.
        nbytes = max(flush_mib << 20, 4 * l2)
        self.flush_bytes = nbytes
        # int32: a read flush's max is defined whatever the (never initialized) contents are.
        self.buf = torch.empty(nbytes // 4, dtype=torch.int32, device="cuda")
        self.sink = torch.empty(1, dtype=torch.int32, device="cuda")
        # nvidia-smi numbers GPUs its own way: select this one by PCI address where torch gives it.
        bus = getattr(props, "pci_bus_id", None)
        domain, dev = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
        try:
            self.smi_selector = f"{int(domain):08x}:{int(bus):02x}:{int(dev):02x}.0"
        except (TypeError, ValueError):  # no PCI address from this torch: nvidia-smi's index may differ
            self.smi_selector = str(torch.cuda.current_device())
        self._smi_ok = True

    def gpu_state(self) -> dict | None:
        """The GPU's clocks, temperature and power now (read_gpu_state); None once nvidia-smi failed."""
        if not self._smi_ok:
            return None
        state = read_gpu_state(self.smi_selector)
        self._smi_ok = state is not None
        return state

    def flush(self):
        flush_l2(self.buf, self.flush_method, self.sink)

    def sync(self):
        self.torch.cuda.synchronize()

    def eager(self, fn, iters: int, budget_s: float) -> list[float]:
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        t0 = time.perf_counter()
        for i in range(iters):
            self.flush()
            torch.cuda.synchronize()  # idle GPU: the host's time to issue the call is not hidden
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
            if i + 1 >= 3 and time.perf_counter() - t0 > budget_s:
                break
        return times

    def graph(self, fn, iters: int, flush: bool = True) -> list[float]:
        """CUDA-graph replay times (us) of fn; flush=False replays with the L2 as the last replay
        left it (warm: what a small kernel's data, code and parameters cost when a model's previous
        kernels left them cached), a spin of the GPU instead of the flush covering the host's launch."""
        torch = self.torch
        # One call on a side stream first, as torch's CUDA-graph notes advise before capturing.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = fn()  # noqa: F841  (kept alive with the graph: the replay writes into it)
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
        if not flush:
            g.replay()  # the first replay's misses are not timed
        for start, end in events:
            # No synchronize: the flush kernel (or the spin, about 50 us) covers the host's launch of
            # the replay.
            self.flush() if flush else torch.cuda._sleep(100_000)
            start.record()
            g.replay()
            end.record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) * 1e3 for s, e in events]
        del g, out
        return times

    def host(self, fn, calls: int = 20) -> float:
        torch = self.torch
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        return (t1 - t0) / calls * 1e6


# ---- the run --------------------------------------------------------------------------------------


class Log:
    """Prints progress and keeps it for the .log file the GPU machine sends back."""

    def __init__(self, stream=None):
        self.lines: list[str] = []
        self.stream = stream or sys.stdout

    def __call__(self, msg: str = ""):
        self.lines.append(msg)
        print(msg, file=self.stream, flush=True)


def _rel_err(out, ref) -> float:
    return float((out.float() - ref).norm() / ref.norm().clamp(min=1e-30))


def _short(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    return text if len(text) < 600 else text[:600] + " ..."


def measure_impls(impls: list[Impl], args, timer: Timer, log: Log, deadline: float, on_shape=None):
    """Rows and skipped entries for each implementation on each shape and M.

    ``on_shape(rows, skipped)`` is called after each shape, so a run cut short still leaves files.
    """
    import torch

    rows, skipped = [], []
    max_m = max(max(args.ms), args.check_m)
    dev = timer.device
    for n, k in args.shapes:
        # Same seed, same device: the humming-jit child process sees the same weight and activations.
        gen = torch.Generator(device=dev).manual_seed(args.seed)
        w = torch.randn(n, k, generator=gen, device=dev, dtype=torch.bfloat16)
        x_all = torch.randn(max_m, k, generator=gen, device=dev, dtype=torch.bfloat16)
        ref = x_all[: args.check_m].float() @ w.float().t()
        for impl in impls:
            tag = f"{impl.name} {impl.format} {n}x{k}"
            if time.perf_counter() > deadline:
                skipped.append(
                    {
                        "impl": impl.name,
                        "format": impl.format,
                        "n": n,
                        "k": k,
                        "reason": "time budget (--time-budget-s) spent before this shape",
                    }
                )
                continue
            t0 = time.perf_counter()
            try:
                impl.setup(w)
                rel = _rel_err(impl.call(x_all[: args.check_m])()[: args.check_m], ref)
                timer.sync()
            except Exception as e:  # noqa: BLE001  (any failure of a peer is data, not a crash)
                log(f"  {tag}: setup failed: {_short(e)}")
                skipped.append({"impl": impl.name, "format": impl.format, "n": n, "k": k, "reason": _short(e)})
                impl.teardown()
                _recover(timer)
                continue
            setup_s = time.perf_counter() - t0  # quantize, pack, move; humming-jit compiles here too
            impl.extra = dict(impl.extra, setup_s=round(setup_s, 2))
            log(f"  {tag}: ready in {setup_s:.1f} s, rel. error {rel:.4f}")
            for m in args.ms:
                if time.perf_counter() > deadline:
                    skipped.append(
                        {
                            "impl": impl.name,
                            "format": impl.format,
                            "n": n,
                            "k": k,
                            "m": m,
                            "reason": "time budget (--time-budget-s) spent",
                        }
                    )
                    continue
                try:
                    row = measure_point(impl, x_all[:m], n, k, m, args, timer)
                except Exception as e:  # noqa: BLE001
                    log(f"  {tag} m={m}: failed: {_short(e)}")
                    skipped.append(
                        {"impl": impl.name, "format": impl.format, "n": n, "k": k, "m": m, "reason": _short(e)}
                    )
                    _recover(timer)
                    continue
                row["rel_err"] = rel
                rows.append(row)
                log(
                    f"  {tag} m={m}: eager {row['us']:.1f} us"
                    + (f", graph {row['us_graph']:.1f} us" if row["us_graph"] is not None else "")
                    + (f", host {row['host_overhead_us']:.1f} us" if row["host_overhead_us"] is not None else "")
                    + (f", {row['tflops']:.1f} TFLOP/s" if row["tflops"] is not None else "")
                    + (f", {row['instance']}" if row.get("instance") else "")
                    + (f" [graph: {row['graph_error']}]" if row.get("graph_error") else "")
                )
            impl.teardown()
            torch.cuda.empty_cache()
        del w, x_all, ref
        torch.cuda.empty_cache()
        if on_shape is not None:
            on_shape(rows, skipped)
    return rows, skipped


def _recover(timer):
    # After a failed call or capture, wait for the GPU and return cached memory before going on.
    import torch

    try:
        timer.sync()
        torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001  (a sticky CUDA error: later points will record their own failure)
        pass


def measure_point(impl: Impl, x, n: int, k: int, m: int, args, timer: Timer) -> dict:
    instance = impl.instance(m)
    fn = impl.call(x)
    timer.sync()
    t0 = time.perf_counter()
    fn()  # humming-jit compiles here on its first call of a layer: timed as first_call_ms, never in `us`
    timer.sync()
    first_ms = (time.perf_counter() - t0) * 1e3
    for _ in range(args.warmup - 1):
        fn()
    timer.sync()
    budget = args.max_ms_per_point / 1e3
    eager = timer.eager(fn, args.iters, budget)
    us = median(eager)
    us_graph = host = None
    graph_iters = 0
    graph_error = None
    if m <= args.graph_max_m:
        try:
            # Stay within the point's budget: the eager median says how long a call takes.
            n_graph = max(3, min(args.iters, int(budget / max(us * 1e-6, 1e-9))))
            g = timer.graph(fn, n_graph)
            us_graph, graph_iters = median(g), len(g)
        except Exception as e:  # noqa: BLE001  (capture is not supported by every implementation)
            graph_error = _short(e)
            _recover(timer)
        host = timer.host(fn)
    state_of = getattr(timer, "gpu_state", None)
    state = state_of() if state_of is not None else None
    row = {
        "impl": impl.name,
        "format": impl.format,
        "detail": impl.detail,
        "n": n,
        "k": k,
        "m": m,
        "us": us,
        "us_graph": us_graph,
        "tflops": None,
        "instance": instance,
        "host_overhead_us": host,
        "eager_minus_graph_us": (us - us_graph) if us_graph is not None else None,
        "us_min": min(eager),
        "iters": len(eager),
        "graph_iters": graph_iters,
        "first_call_ms": first_ms,
        "weight_bytes": impl.weight_bytes,
        **impl.extra,
    }
    if graph_error:
        row["graph_error"] = graph_error
    if state:
        row.update(state)
    row["tflops"] = tflops(m, n, k, best_us(row))
    return row


def _git(repo_root: pathlib.Path | None) -> tuple[str | None, bool | None]:
    # An explicit sha wins: the GPU machine's copy of the tree has a .git without the commits, where
    # `git rev-parse HEAD` fails and prints "HEAD".
    if os.environ.get("HUMMING_GIT_SHA"):
        return os.environ["HUMMING_GIT_SHA"], None
    cwd = str(repo_root) if repo_root else None
    try:
        p = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=cwd, timeout=10)
        sha = p.stdout.strip()
        if p.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", sha):
            dirty = subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                cwd=cwd,
                timeout=10,
            ).stdout.strip()
            return sha, bool(dirty)
    except (OSError, subprocess.SubprocessError):
        pass
    return os.environ.get("HUMMING_GIT_SHA") or None, None


def _driver() -> str | None:
    try:
        p = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return p.stdout.strip().splitlines()[0] if p.returncode == 0 and p.stdout.strip() else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def _device_info(torch) -> dict:
    idx = torch.cuda.current_device()
    p = torch.cuda.get_device_properties(idx)
    return {
        "name": p.name,
        "cc": f"{p.major}.{p.minor}",
        "sms": p.multi_processor_count,
        "memory_gib": round(p.total_memory / 2**30, 1),
        "l2_mib": round(getattr(p, "L2_cache_size", 0) / 2**20, 1),
        "driver": _driver(),
    }


def _humming_aot_info() -> dict:
    try:
        from . import registry

        return {"build_info": registry.build_info(), "instances": len(registry.instances())}
    except Exception as e:  # noqa: BLE001  (a broken build: peers still run, rows say what is missing)
        return {"build_info": None, "error": _short(e)}


def _jit_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("humming-kernels")
    except Exception:  # noqa: BLE001
        return None


def run_jit_worker(args, log: Log, budget_s: float) -> tuple[list, list]:
    """humming-jit rows from a child process (the namespaces clash, see the module doc).

    The child stops starting points at 80% of ``budget_s`` and is killed at ``budget_s``; it writes
    its results after each shape, so a kill loses at most the shape in progress.
    """
    if importlib.util.find_spec("humming") is None:
        reason = (
            "humming-kernels is not importable (pip install --no-deps humming-kernels==0.1.20, or the "
            "carried wheel: scripts/gpu_bench.sh installs .peer/*.whl)"
        )
        return [], [{"impl": "humming-jit", "format": f, "reason": reason} for f in args.jit_formats]
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "jit.json"
        cmd = [sys.executable, "-m", "humming_aot.bench", *worker_argv(args, out, 0.8 * budget_s)]
        # The child must find this very copy of humming_aot (a checkout's python/ dir included).
        env = dict(os.environ)
        here = str(pathlib.Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        log(f"humming-jit: child process, budget {budget_s:.0f} s")
        # A session of its own, so that a timeout also ends the compiler processes it may have started
        # (they would otherwise keep its output pipe open and communicate() would wait for them).
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
        )
        try:
            text, _ = proc.communicate(timeout=budget_s)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            text, _ = proc.communicate()
            rc = f"killed after {budget_s:.0f} s"
        for line in (text or "").splitlines():
            log("  [jit] " + line)
        rows, skipped = [], []
        if out.is_file():
            data = json.loads(out.read_text())
            rows, skipped = data.get("rows", []), data.get("skipped", [])
        if rc != 0:
            tail = " | ".join((text or "").strip().splitlines()[-3:])
            skipped += [
                {
                    "impl": "humming-jit",
                    "format": f,
                    "reason": f"child process ended ({rc}) before "
                    f"finishing; rows measured before that are kept. Last output: {tail}",
                }
                for f in args.jit_formats
            ]
        return rows, skipped


def worker_main(args) -> int:
    """Child process: measure humming-jit only, write rows and skipped entries to --worker-out."""
    log = Log()
    deadline = time.perf_counter() + args.time_budget_s
    rows, skipped = [], []
    try:
        import humming  # noqa: F401  (imports its ops; fails here if a dependency is missing)

        timer = Timer(args.flush_mib, args.flush)

        def on_shape(r, s):
            _write_atomic(args.worker_out, {"rows": r, "skipped": s})

        rows, skipped = measure_impls(
            [HummingJit(f, "humming-kernels HummingLayer " + json.dumps(JIT_CONFIGS[f])) for f in args.jit_formats],
            args,
            timer,
            log,
            deadline,
            on_shape,
        )
    except Exception as e:  # noqa: BLE001
        log(f"humming-jit unavailable: {_short(e)}")
        skipped = [{"impl": "humming-jit", "format": f, "reason": _short(e)} for f in args.jit_formats]
    _write_atomic(args.worker_out, {"rows": rows, "skipped": skipped})
    return 0


def _write_atomic(path: pathlib.Path, data: dict) -> None:
    # The parent may kill this process at any moment: it must find the old file or the new one, whole.
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(_clean(data)))
    os.replace(tmp, path)


def _labelled(entries: list, labels: dict) -> list:
    """Copies of rows (or skipped entries) with the corpus label of their shape where it has one."""
    return [dict(e, label=labels[(e["n"], e["k"])]) if (e.get("n"), e.get("k")) in labels else e for e in entries]


def _finish(result: dict, rows: list, skipped: list, shapes) -> dict:
    # Labelled here, in the parent, so that rows of the humming-jit child get them too.
    labels = shape_labels(load_corpus())
    rows, skipped = _labelled(rows, labels), _labelled(skipped, labels)
    order = {impl: i for i, impl in enumerate(IMPLS)}
    rows = sorted(
        rows,
        key=lambda r: (
            shapes.index((r["n"], r["k"])) if (r["n"], r["k"]) in shapes else len(shapes),
            r["m"],
            order.get(r["impl"], len(order)),
            r["format"],
        ),
    )
    return dict(result, rows=rows, skipped=list(skipped), host_overhead=summarize_host(rows))


def run(args, log: Log, repo_root: pathlib.Path | None = None, checkpoint=None) -> dict:
    """Measure everything; ``checkpoint(partial_result)`` is called after each shape."""
    import torch

    t_start = time.perf_counter()
    deadline = t_start + args.time_budget_s
    result = {
        "schema": 1,
        "device": _device_info(torch),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "method": dict(METHOD),
        "settings": {
            "suite": args.suite,
            "shapes": [f"{n}x{k}" for n, k in args.shapes],
            "ms": args.ms,
            "formats": [dataclasses.asdict(f) for f in args.formats],
            "impls": args.impls,
            "layout": args.layout,
            "jit_formats": args.jit_formats,
            "iters": args.iters,
            "warmup": args.warmup,
            "max_ms_per_point": args.max_ms_per_point,
            "graph_max_m": args.graph_max_m,
            "flush": args.flush,
            "flush_mib": args.flush_mib,
            "check_m": args.check_m,
            "seed": args.seed,
            "time_budget_s": args.time_budget_s,
        },
        "peers": {"humming-kernels": _jit_version()},
        "rows": [],
        "skipped": [],
        "host_overhead": [],
    }
    result["git_sha"], result["git_dirty"] = _git(repo_root)
    log(
        f"device {result['device']['name']} (sm {result['device']['cc']}, driver {result['device']['driver']}), "
        f"torch {result['torch']} CUDA {result['cuda']}"
    )
    rows, skipped = [], []
    if "humming-jit" in args.impls:
        # First, while this process holds little GPU memory; it gets at most half the budget. It must
        # run before this process loads humming_aot._C only in the sense that it is a separate process.
        jit_rows, jit_skipped = run_jit_worker(args, log, min(args.jit_timeout_s, args.time_budget_s / 2))
        rows += jit_rows
        skipped += jit_skipped
    # Loads humming_aot._C (its build facts go into the JSON even when humming-aot is not run).
    result["humming_aot"] = _humming_aot_info()
    impls: list[Impl] = []
    ours = [i for i in ("humming-aot", "humming-aot-gemm") if i in args.impls]
    if ours and result["humming_aot"].get("build_info") is None:
        skipped += [
            {"impl": i, "format": f.label, "reason": result["humming_aot"]["error"]} for i in ours for f in args.formats
        ]
    elif ours:
        from . import formats as F

        if "humming-aot" in ours:
            impls += [HummingAot(f, args.layout) for f in args.formats]
        if "humming-aot-gemm" in ours:  # the formats with quantized activations only
            quantized = [f for f in args.formats if F.parse_activation_format(f.act).quantized]
            impls += [HummingAotGemm(f, args.layout) for f in quantized]
    if "cublas-bf16" in args.impls:
        impls.append(CublasBf16("bf16", "torch.nn.functional.linear, bf16 weight"))
    if "torch-int4" in args.impls:
        impls.append(
            TorchInt4(
                "w4a16",
                f"torch._weight_int4pack_mm, uint4 g{INT4_GROUP} asymmetric, bf16 "
                f"scale+zero, innerKTiles {INT4_INNER_K_TILES}",
            )
        )
    if "cublaslt-fp8" in args.impls:
        impls.append(
            ScaledMmFp8(
                "w8a8-fp8",
                "torch._scaled_mm, e4m3 weight per channel and activations per "
                "token (fp32 scales), bf16 out, M padded to 16",
            )
        )
    if not impls:  # only humming-jit was asked for
        result = _finish(result, rows, skipped, args.shapes)
        result["wall_s"] = round(time.perf_counter() - t_start, 1)
        return result
    timer = Timer(args.flush_mib, args.flush)
    log(f"L2 flush: {args.flush}, buffer {timer.flush_bytes >> 20} MiB")

    def on_shape(r, s):
        if checkpoint is not None:
            partial = _finish(result, rows + r, skipped + s, args.shapes)
            partial["partial"] = True
            partial["wall_s"] = round(time.perf_counter() - t_start, 1)
            checkpoint(partial)

    r2, s2 = measure_impls(impls, args, timer, log, deadline, on_shape)
    result = _finish(result, rows + r2, skipped + s2, args.shapes)
    result["wall_s"] = round(time.perf_counter() - t_start, 1)
    return result


def write_outputs(
    result: dict, out_dir: pathlib.Path, name: str, log: Log, plot: bool = True, extra_dir: pathlib.Path | None = None
) -> list[pathlib.Path]:
    """<name>.json, .md, .png (with matplotlib and plot=True) and .log in out_dir, copied to extra_dir."""
    out_dir = pathlib.Path(out_dir)
    files = [write_json(result, out_dir / f"{name}.json"), write_markdown(result, out_dir / f"{name}.md")]
    if plot:
        png = write_plot(result, out_dir / f"{name}.png", log)
        if png is not None:
            files.append(png)
    log_path = out_dir / f"{name}.log"
    log_path.write_text("\n".join(log.lines) + "\n")
    files.append(log_path)
    if extra_dir is not None and pathlib.Path(extra_dir).resolve() != out_dir.resolve():
        pathlib.Path(extra_dir).mkdir(parents=True, exist_ok=True)
        for f in files:
            shutil.copy2(f, pathlib.Path(extra_dir) / f.name)
    return files


def default_name(now: datetime.datetime | None = None) -> str:
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("gemm-%Y%m%d-%H%M")


def main(
    argv: list[str] | None = None, *, results_root: pathlib.Path | None = None, repo_root: pathlib.Path | None = None
) -> int:
    """Entry point of ``humming-aot bench`` and benchmarks/bench_gemm.py; returns the exit status."""
    args = parse_args(argv)
    import torch

    if args.worker:
        return worker_main(args)
    if not torch.cuda.is_available():
        print(
            "humming-aot bench: no CUDA GPU is visible (torch.cuda.is_available() is False; torch "
            f"{torch.__version__}, CUDA {torch.version.cuda}). The benchmark times GPU kernels and has nothing "
            "to measure on the CPU; run it on a machine with an NVIDIA GPU.",
            file=sys.stderr,
        )
        return 2
    root = pathlib.Path(results_root) if results_root else pathlib.Path.cwd() / "benchmarks" / "results"
    out_dir = args.out_dir or root / device_slug(torch.cuda.get_device_properties(torch.cuda.current_device()).name)
    name = args.name or default_name()
    extra = pathlib.Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    log = Log()
    log(f"writing {out_dir / name}.*" + (f" and copies in {extra}" if extra else ""))

    def checkpoint(partial):
        write_outputs(partial, out_dir, name, log, plot=False, extra_dir=extra)

    try:
        result = run(args, log, repo_root, checkpoint)
    except BenchError as e:
        print(f"humming-aot bench: {e}", file=sys.stderr)
        return 2
    log(f"done in {result['wall_s']} s: {len(result['rows'])} rows, {len(result['skipped'])} skipped")
    files = write_outputs(result, out_dir, name, log, plot=not args.no_plot, extra_dir=extra)
    for f in files:
        print(f"wrote {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
