#!/usr/bin/env bash
# On the lent GPU machine: ncu of the MoE routing helpers at one decode step (top-k, align, permute,
# combine of one layer's routing; scripts/routing_once.py), each kernel's own duration and where
# its warps wait, with the caches flushed before each kernel (ncu's default). The question it
# answers: how much of a helper's time in a graph (scripts/bench_moe.py --routing-parts) is the
# kernel itself. Builds one small instance (the routing ops need the extension, not the GEMMs)
# unless SKIP_BUILD=1. Writes ncu_routing_<model>_<tokens>.txt (and build.log) to $OUT.
# Usage: [MODEL=qwen3-30b-a3b] [TOKENS=1] [NCU_SOURCE=1] bash scripts/ncu_routing.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$OUT"
. scripts/build_filtered.sh
build_filtered '^generic_dense_a-bf16_w-u4-sbf16_c-bf16$'
model=${MODEL:-qwen3-30b-a3b} tokens=${TOKENS:-1}
report="$OUT/ncu_routing_${model}_${tokens}.txt"
extra=()
[ "${NCU_SOURCE:-0}" = "1" ] && extra=(--section SourceCounters)
# The second routing's kernels (the first call warms up: module loads, the allocator).
timeout 150 ncu --kernel-name regex:'topk|align|permute|combine' --launch-skip 4 --launch-count 4 \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats \
  "${extra[@]}" python3 scripts/routing_once.py "$model" "$tokens" > "$report" 2>&1
echo "ncu rc=$?"
grep -E "^  [a-z_]+.*\(|Duration|Elapsed Cycles|Registers Per|Warp Cycles Per Issued|Issue Slots Busy|Block Size|Grid Size" "$report" | head -80
