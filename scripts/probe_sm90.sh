#!/usr/bin/env bash
# On the lent GPU machine: build the package with the sm90 weight-only kernel's timeline probe
# compiled in (include/humming/backend/sm90/probe.h: -DHUMMING_PROBE, the instances HUMMING_FILTER
# names), then run scripts/probe_sm90.py with the arguments given; text and JSON go to $OUT.
# A diagnosis build: its probed kernels print a line per block, so never time anything else with it.
# The 8-bit activation kernels too: HUMMING_FILTER='^sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc' ... --format e2m1gc-sbf16 --act e4m3-pt.
# PROBE_CUDAFLAGS adds compile flags (e.g. a kernel knob, -DNAME=V). Example: bash scripts/probe_sm90.sh 8192x8192,28672x8192 1 --match 't8x256'
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/probe-out}"
mkdir -p "$OUT"
export HUMMING_PROFILE="${HUMMING_PROFILE:-dev}"
export HUMMING_FILTER="${HUMMING_FILTER:-^sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t(8|16)x}"
start=$(date +%s)
# The flags as the cache variable itself, not the CUDAFLAGS environment, which CMake reads only when
# it first configures the package's persistent build directory (a later build would keep the old).
CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps -v \
  -C "cmake.define.CMAKE_CUDA_FLAGS=-DHUMMING_PROBE ${PROBE_CUDAFLAGS:-}" . \
  > "$OUT/probe-build.log" 2>&1 || { tail -40 "$OUT/probe-build.log"; exit 1; }
echo "probe build took $(( $(date +%s) - start )) s"
python3 scripts/probe_sm90.py "$@" --json "$OUT/probe.json" | tee "$OUT/probe.txt"
