#!/usr/bin/env bash
# On the lent GPU machine: build the dev profile for only the formats being benchmarked (every
# backend's instances of them, so the dispatcher picks as in a full dev build), then run the GEMM
# benchmark over the shape corpus with the peers (scripts/gpu_bench.sh; carry .peer/ for
# humming-kernels). Usage: CORPUS_FILTER=REGEX bash scripts/gpu_corpus.sh [benchmark options]
# CORPUS_FILTER defaults to the w4a16 format (a-bf16_w-u4g128-sbf16_c-bf16); SKIP_BUILD=1 reuses
# the package a previous call installed on a still-warm machine.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -z "${SKIP_BUILD:-}" ]; then
  start=$(date +%s)
  HUMMING_PROFILE=dev HUMMING_FILTER="${CORPUS_FILTER:-a-bf16_w-u4g128-sbf16_c-bf16}" CMAKE_BUILD_PARALLEL_LEVEL=16 \
    python3 -m pip install --no-build-isolation --no-deps -v -C "cmake.define.CMAKE_CUDA_FLAGS=${CUDAFLAGS:-}" . > "$OUT/build.log" 2>&1
  rc=$?
  echo "build rc=$rc after $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
  [ $rc -eq 0 ] || { tail -30 "$OUT/build.log"; exit $rc; }
fi
humming-aot info 2>&1 | tee -a "$OUT/summary.txt"
bash scripts/gpu_bench.sh "$@" > "$OUT/bench.out" 2>&1
rc=$?
tail -5 "$OUT/bench.out"
exit $rc
