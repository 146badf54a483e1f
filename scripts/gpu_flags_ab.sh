#!/usr/bin/env bash
# On the lent GPU machine, one call: an A/B of compile-time flags (a kernel knob given as -DNAME=V)
# on the decode tiles. Builds the filtered instances once per flag set (VARIANTS, sets separated by
# ';', the first the baseline, same machine), times them at each M (graph us after a reading flush,
# scripts/time_shapes.py), runs the GPU tests on the last build (its filter FILTER, wider than the
# timed builds' AB_FILTER), then the timeline probe of that build (scripts/probe_sm90.sh) while
# time remains. Logs under $OUT/v<i>, $OUT/probe. Each build passes its flags as the
# CMAKE_CUDA_FLAGS cache variable (scripts/gpu_ab.sh), so builds in the one build directory never
# keep an earlier build's flags.
# SHAPES, MS, FORMATS narrow or widen the timing; TIMING replaces it (e.g. scripts/bench_moe.py,
# writing under $AB_OUT); TESTS names the test files (default tests/test_gpu.py; none: no tests); PROBE=0 skips
# the probe; BUDGET_S (default 540) bounds the whole call.
# Used in session 32 for the sm90 accumulation chains (-DHUMMING_SM90_CHAINS=1;2;4): no difference.
# Usage: VARIANTS='-DKNOB=0;-DKNOB=1' bash scripts/gpu_flags_ab.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$OUT"
export BUDGET_S="${BUDGET_S:-540}" START
START=$(date +%s)
IFS=';' read -r -a variants <<< "${VARIANTS:?VARIANTS: compile flag sets separated by ;}"
FILTER="${FILTER:-^sm90_wgmma_dense_a-bf16_w-u4(g32|g64|g128|gc)-sbf16(-zi)?_c-bf16_t(8|16)x}"
AB_FILTER="${AB_FILTER:-^sm90_wgmma_dense_a-bf16_w-u4(g128|gc)-sbf16_c-bf16_t(8|16)x}"
SHAPES="${SHAPES:-8192x8192,28672x8192,5120x13824,28672x4096}"
MS="${MS:-1,16}"
FORMATS="${FORMATS:-u4g128-sbf16 u4gc-sbf16}"
timing="${TIMING:-}"
[ -n "$timing" ] || for f in $FORMATS; do
  timing+="python3 scripts/time_shapes.py $SHAPES $MS --format $f --match '_w-${f%%-*}-sbf16_c-bf16_t(8|16)x' --graph --flush read --iters 10; "
done
last=$((${#variants[@]} - 1))
for i in "${!variants[@]}"; do
  cmds=("$timing")
  filter=$AB_FILTER
  if [ "$i" = "$last" ]; then
    filter=$FILTER
    [ "${TESTS:-}" = "none" ] && run_tests=0 || run_tests=1
    # The tests get what the budget leaves after the probe's two minutes; failures listed last.
    [ "$run_tests" = 1 ] && cmds+=('timeout $(( BUDGET_S - 120 - ($(date +%s) - START) )) python3 -m pytest -q ${TESTS:-tests/test_gpu.py} -p no:cacheprovider -rsf 2>&1 | tail -15')
  fi
  echo "=== v$i: ${variants[$i]}"
  CUDAFLAGS="${variants[$i]}" OUT="$OUT/v$i" HUMMING_FILTER="$filter" bash scripts/gpu_ab.sh "${cmds[@]}" 2>&1 | grep -v "^###"
done
left=$(( BUDGET_S - SECONDS ))
if [ "${PROBE:-1}" != "1" ]; then
  echo "probe skipped (PROBE=${PROBE})"
elif [ "$left" -gt 100 ]; then
  PROBE_CUDAFLAGS="${variants[$last]}" OUT="$OUT/probe" HUMMING_FILTER="$FILTER" timeout "$left" \
    bash scripts/probe_sm90.sh 8192x8192,28672x8192 "$MS" --match 't(8|16)x256'
else
  echo "probe skipped: ${left} s left"
fi
# The device tool returns only the first few files under $OUT (by name), so everything also goes
# into one archive named to come first.
tar czf /tmp/0-results.tgz -C "$OUT" . && mv /tmp/0-results.tgz "$OUT/0-results.tgz"
