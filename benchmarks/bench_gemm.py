#!/usr/bin/env python3
"""GEMM benchmark: humming-aot against cuBLAS bf16, torch int4, FP8 _scaled_mm and humming-kernels.

A thin script over ``humming_aot.bench`` (also ``humming-aot bench``); results go to
benchmarks/results/<device>/ next to this file by default. ``--help`` lists the options.
"""

import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent

try:
    from humming_aot import bench
except ImportError as e:
    sys.exit(
        f"bench_gemm.py: cannot import humming_aot.bench ({e}). Install the package from this checkout "
        "(pip install --no-build-isolation .) first."
    )

if __name__ == "__main__":
    sys.exit(bench.main(sys.argv[1:], results_root=HERE / "results", repo_root=HERE.parent))
