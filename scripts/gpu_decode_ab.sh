#!/usr/bin/env bash
# On the lent GPU machine, one call: does the sm90 weight-only kernel's decode speed up with
# independent WGMMA accumulation chains (backend/sm90/chains.h; compile-time knob
# HUMMING_SM90_CHAINS, default 1)? Builds the decode tiles' instances once per chain count
# (CHAINS, default "1 2 4"; the first is the baseline, same machine), times them at each M (graph
# us after a reading flush, scripts/time_shapes.py), runs tests/test_gpu.py on the last build
# (TEST_CHAINS picks which: default 2, built last), then the timeline probe of that build
# (scripts/probe_sm90.sh) while time remains. Logs under $OUT/c<N>, $OUT/probe.
# FILTER / AB_FILTER, SHAPES, MS, FORMATS narrow or widen it; BUDGET_S (default 540) bounds the
# whole call (about 2.5 minutes of builds, 2 of timing, the tests, then the probe).
# For other A/Bs of the same knob: TIMING replaces the timing commands (e.g. scripts/bench_moe.py,
# writing under $AB_OUT), TESTS the test files (default tests/test_gpu.py), EXTRA_CUDAFLAGS is
# added to every build (e.g. -DHUMMING_SM90_CHAINS_GROUPED=1 for the grouped MoE tiles), and
# PROBE=0 skips the probe.
# Usage: bash scripts/gpu_decode_ab.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$OUT"
export BUDGET_S="${BUDGET_S:-540}" START
START=$(date +%s)
TEST_CHAINS="${TEST_CHAINS:-2}"
# The tested build takes FILTER (every group size and zero point of the decode tiles), the others
# AB_FILTER (only the timed formats), so that their builds stay short.
FILTER="${FILTER:-^sm90_wgmma_dense_a-bf16_w-u4(g32|g64|g128|gc)-sbf16(-zi)?_c-bf16_t(8|16)x}"
AB_FILTER="${AB_FILTER:-^sm90_wgmma_dense_a-bf16_w-u4(g128|gc)-sbf16_c-bf16_t(8|16)x}"
SHAPES="${SHAPES:-8192x8192,28672x8192,5120x13824,28672x4096}"
MS="${MS:-1,16}"
FORMATS="${FORMATS:-u4g128-sbf16 u4gc-sbf16}"
order=()
for c in ${CHAINS:-1 2 4}; do [ "$c" = "$TEST_CHAINS" ] || order+=("$c"); done
order+=("$TEST_CHAINS")
timing="${TIMING:-}"
[ -n "$timing" ] || for f in $FORMATS; do
  timing+="python3 scripts/time_shapes.py $SHAPES $MS --format $f --match '_w-${f%%-*}-sbf16_c-bf16_t(8|16)x' --graph --flush read --iters 10; "
done
for c in "${order[@]}"; do
  cmds=("$timing")
  filter=$AB_FILTER
  [ "$c" = "$TEST_CHAINS" ] && filter=$FILTER
  # The tests get what the budget leaves after the probe's two minutes.
  [ "$c" = "$TEST_CHAINS" ] &&
    cmds+=('timeout $(( BUDGET_S - 120 - ($(date +%s) - START) )) python3 -m pytest -q ${TESTS:-tests/test_gpu.py} -p no:cacheprovider -rfs 2>&1 | tail -15')
  echo "=== chains $c"
  CUDAFLAGS="-DHUMMING_SM90_CHAINS=$c ${EXTRA_CUDAFLAGS:-}" OUT="$OUT/c$c" HUMMING_FILTER="$filter" bash scripts/gpu_ab.sh "${cmds[@]}" 2>&1 | grep -v "^###"
done
left=$(( BUDGET_S - SECONDS ))
if [ "${PROBE:-1}" != "1" ]; then
  echo "probe skipped (PROBE=${PROBE})"
elif [ "$left" -gt 100 ]; then
  PROBE_CUDAFLAGS="-DHUMMING_SM90_CHAINS=$TEST_CHAINS" OUT="$OUT/probe" HUMMING_FILTER="$FILTER" timeout "$left" \
    bash scripts/probe_sm90.sh 8192x8192,28672x8192 "$MS" --match 't(8|16)x256'
else
  echo "probe skipped: ${left} s left"
fi
