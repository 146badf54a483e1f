#!/usr/bin/env bash
# On the lent GPU machine: one quick iteration on the W4A16 bf16 kernels. Builds only the instances
# matching HUMMING_FILTER (default: 4-bit unsigned codes, groups 128, 32 and per channel, with and without zero points, bf16 and f16; sm80 and generic), runs their GPU tests, then
# times humming-aot against cuBLAS on the decode shapes, and packs every log into $OUT/quick.tgz
# (the device tool returns few files per call). Usage: bash scripts/gpu_quick.sh [bench options]
set -uo pipefail
cd "$(dirname "$0")/.."
FINAL="${OUT:-$PWD/build/gpu-out}"
export OUT=/tmp/humming-quick
rm -rf "$OUT" && mkdir -p "$OUT"
export HUMMING_FILTER="${HUMMING_FILTER:-a-(bf16|f16)_w-u4(g128|gc|g32)?-s(bf16|f16)(-zi)?_c-}"
SKIP_CPP=1 TESTS=tests/test_gpu.py bash scripts/gpu_check.sh -k "instance_against or deterministic or graph" \
  > "$OUT/check.out" 2>&1
tail -4 "$OUT/check.out"
bash scripts/gpu_bench.sh --impls humming-aot,cublas-bf16 --formats w4a16 --shapes 28672x8192,8192x8192 \
  --ms 1,16,64,256,4096 --iters 10 --time-budget-s 150 --no-plot --name quick --out-dir "$OUT/bench" "$@" \
  > "$OUT/bench.out" 2>&1
grep -E "^\|" "$OUT/bench/quick.md" | head -40
if [ -n "${PROFILE:-}" ]; then
  # PROFILE="N K M": ncu on the sm80 kernel of that problem (first launch), summary to ncu.txt;
  # PROFILE_EXTRA adds ncu options (e.g. "--section SourceCounters" for stall reasons per line).
  # Prefix with HUMMING_MAX_SPLITS=... to compare split-K settings.
  ncu -k regex:dense_kernel -c 1 --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section LaunchStats --section InstructionStats --section MemoryWorkloadAnalysis \
    --metrics sm__cycles_active.min,sm__cycles_active.max,sm__cycles_active.avg,sm__cycles_elapsed.max,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct,smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_wait_per_warp_active.pct,smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct,smsp__warp_issue_stalled_not_selected_per_warp_active.pct,smsp__warp_issue_stalled_selected_per_warp_active.pct,smsp__warp_issue_stalled_dispatch_stall_per_warp_active.pct \
    ${PROFILE_EXTRA:-} python3 scripts/profile_one.py $PROFILE > "$OUT/ncu.txt" 2>&1
  grep -E "Duration|Throughput|Stall|Warp Cycles|Issued|Eligible|Achieved|Theoretical|Registers|Block Limit|Grid Size|Executed Ipc|Waves|sm__|smsp__" "$OUT/ncu.txt" | head -60
fi
mkdir -p "$FINAL" && tar czf "$FINAL/quick.tgz" -C "$OUT" .
