#!/usr/bin/env bash
# On the lent GPU machine, after scripts/gpu_check.sh has built and installed the package in the same
# session: install the carried humming-kernels wheel (if any) where only this run sees it, then run
# the GEMM benchmark with the given arguments, writing its files (json, md, png, log) to $OUT.
# Usage: bash scripts/gpu_bench.sh [benchmark options, e.g. --quick or --shapes 8192x8192]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
shopt -s nullglob
wheels=(.peer/*.whl)
if [ ${#wheels[@]} -gt 0 ]; then
  # --no-deps --no-index: the machine has no internet; humming-kernels' own dependencies (triton,
  # numpy, jinja2, cuda-bindings, ...) must already be there, and the benchmark records it as
  # skipped, with the import error, when one is missing. --target keeps it out of site-packages.
  python3 -m pip install --no-deps --no-index --upgrade --target /tmp/peer "${wheels[@]}" > "$OUT/peer-install.log" 2>&1 \
    && export PYTHONPATH="/tmp/peer${PYTHONPATH:+:$PYTHONPATH}" \
    || echo "installing ${wheels[*]} failed (see peer-install.log); humming-jit will be listed as skipped"
else
  echo "no .peer/*.whl carried; humming-jit will be listed as skipped"
fi
# The checkout copy on the GPU machine may have no .git: pass HUMMING_GIT_SHA=... to record the sha.
# Results go to benchmarks/results/<device>/ and, because OUT is set, are copied to $OUT.
export OUT
python3 benchmarks/bench_gemm.py "$@"
