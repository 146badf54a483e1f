#!/usr/bin/env bash
# On the lent GPU machine, after a build is installed (scripts/gpu_check.sh or gpu_final.sh):
# compute-sanitizer memcheck and racecheck over one GEMM per sm90 tile and M
# (scripts/sanitize_sm90.py, which also checks each result against the reference), then memcheck
# over a sample of the GPU fuzz cases (SANITIZE_FUZZ=0 skips it), then both tools over the grouped
# (MoE) GEMM tests (SANITIZE_MOE=0 skips them). Every kernel is instrumented
# (SANITIZE_TOOLS picks the tools for the GEMMs, SANITIZE_PATTERN the instances: scripts/sanitize_sm90.py).
# Logs to $OUT/sanitize_{memcheck,racecheck}{,_whole}.txt and sanitize_fuzz.txt, a summary to stdout.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$OUT"
rc=0
# Each tool runs twice: with the default plans, and with HUMMING_STREAM_K=0 ("whole": one block per
# tile). The default plans split the small test layer's K so finely that the blocks of most tiles
# take at most 5 K tiles and never reuse a stage of their ring; whole tiles of 9 or 18 K tiles wrap
# every ring, which is where the producer's copies and the consumers' reads of a stage meet.
for tool in ${SANITIZE_TOOLS-memcheck racecheck}; do
  for plan in default whole; do
    log="$OUT/sanitize_$tool$([ $plan = whole ] && echo _whole).txt"
    env $([ $plan = whole ] && echo HUMMING_STREAM_K=0) timeout "${SANITIZE_TIMEOUT_S:-240}" \
      compute-sanitizer --tool "$tool" --error-exitcode 9 python3 scripts/sanitize_sm90.py > "$log" 2>&1
    r=$?
    echo "compute-sanitizer $tool ($plan plans): rc=$r, $(grep -c ' ok$' "$log") GEMMs ok, $(grep -c WRONG "$log") wrong; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)"
    [ $r -eq 0 ] || rc=$r
  done
done
# The GPU half of the fuzz suite, a sample of it (every FUZZ_EVERY-th op-level case, default 20,
# and the device mix-ups) under memcheck: broken arguments must never read or write out of bounds.
if [ "${SANITIZE_FUZZ:-1}" != "0" ]; then
  HUMMING_FUZZ_GPU_EVERY="${FUZZ_EVERY:-20}" timeout "${SANITIZE_TIMEOUT_S:-240}" compute-sanitizer --tool memcheck \
    --error-exitcode 9 python3 -m pytest -q tests/test_fuzz.py -p no:cacheprovider -k fuzz_gpu \
    > "$OUT/sanitize_fuzz.txt" 2>&1
  r=$?
  echo "compute-sanitizer memcheck, GPU fuzz sample: rc=$r, $(grep -E 'passed|failed' "$OUT/sanitize_fuzz.txt" | tail -1); $(grep -E 'ERROR SUMMARY' "$OUT/sanitize_fuzz.txt" | tail -1)"
  [ $r -eq 0 ] || rc=$r
fi
# The grouped (MoE) GEMMs' GPU tests under memcheck and racecheck (SANITIZE_MOE=0 skips them): every
# grouped instance, expert boundaries inside tiles, empty experts, masked slots, and offsets and
# counts past the rows, which the kernels must clip without reading or writing outside the tensors.
if [ "${SANITIZE_MOE:-1}" != "0" ]; then
  for tool in memcheck racecheck; do
    timeout "${SANITIZE_TIMEOUT_S:-240}" compute-sanitizer --tool "$tool" --error-exitcode 9 python3 -m pytest -q \
      tests/test_moe.py -p no:cacheprovider -k "sm90_kernels or past_the_rows" > "$OUT/sanitize_moe_$tool.txt" 2>&1
    r=$?
    echo "compute-sanitizer $tool, grouped GEMM tests: rc=$r, $(grep -E 'passed|failed' "$OUT/sanitize_moe_$tool.txt" | tail -1); $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_moe_$tool.txt" | tail -1)"
    [ $r -eq 0 ] || rc=$r
  done
fi
exit $rc
