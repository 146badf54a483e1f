#!/usr/bin/env bash
# On the lent GPU machine: ncu of one grouped (MoE) GEMM by humming-aot and by humming-kernels
# 0.1.20 on the same routed rows (scripts/moe_gemm_once.py), for the question why the peer's MoE
# GEMM is faster: duration, DRAM, issue use, warps, stall reasons, instructions of each. Builds the
# u4g128 bf16 grouped instances unless SKIP_BUILD=1; needs the peer's wheel in .peer/ (carry it).
# Writes ncu_moe_<impl>_<model>_<tokens>_<part>.txt to $OUT.
# Usage: [MODEL=qwen3-30b-a3b] [TOKENS=64] [PART=gate-up] [IMPLS="aot jit"] [NCU_SOURCE=1] [MOE_FORMAT=...]
#   [MOE_ACT=e4m3-pt] [MOE_INSTANCE=...] [MOE_FILTER=REGEX] [MOE_GLU=silu] bash scripts/ncu_moe_peer.sh
#   (MOE_FORMAT: humming-aot's weight format, default u4g128-sbf16; MOE_ACT=e4m3-pt: W4A8 on both
#   sides, the activation quantization in the profile too; MOE_INSTANCE: humming-aot's instance
#   instead of its choice; MOE_FILTER: the instances built instead of the u4g128 bf16 ones. See
#   scripts/moe_gemm_once.py.)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$OUT"
. scripts/build_filtered.sh
build_filtered "${MOE_FILTER:-^sm90_wgmma_moe_a-bf16_w-u4g128-sbf16_c-bf16}"
peer=/tmp/humming-peer
# The peer only where IMPLS runs it (session 58's PART=b ran IMPLS=aot without .peer carried, and
# the extraction's failure ended the script before its profile).
if [[ " ${IMPLS:-aot jit} " == *" jit "* && ! -d "$peer/humming" ]]; then
  mkdir -p "$peer" && python3 -m zipfile -e .peer/humming_kernels-0.1.20-*.whl "$peer" || exit 1
  chmod +x "$peer"/humming/_native/*/* # zipfile drops the launcher's and compiler's exec bits
fi
model=${MODEL:-qwen3-30b-a3b} tokens=${TOKENS:-64} part=${PART:-gate-up}
for impl in ${IMPLS:-aot jit}; do
  tag=${MOE_INSTANCE:+_$(echo "$MOE_INSTANCE" | grep -oE '_t[0-9]+x.*$')}
  report="$OUT/ncu_moe_${impl}${MOE_ACT:+_$MOE_ACT}${MOE_FORMAT:+_$MOE_FORMAT}${tag}${MOE_GLU:+_glu}_${model}_${tokens}_${part}.txt"
  # NCU_SOURCE=1: the report kept and its SASS page summed (stall samples by reason, instructions
  # by opcode: scripts/ncu_sass_summary.py) into ..._sass.txt.
  extra=()
  rep="/tmp/ncu_moe_$impl$tag"
  [ "${NCU_SOURCE:-0}" = "1" ] && extra=(--section SourceCounters -f -o "$rep")
  pp=""
  [ "$impl" = jit ] && pp="$peer"
  PYTHONPATH="$pp" timeout 240 ncu --nvtx --nvtx-include "measured/" \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis --section InstructionStats --metrics smsp__inst_executed.sum,dram__bytes_read.sum \
    "${extra[@]}" python3 scripts/moe_gemm_once.py "$impl" "$model" "$tokens" "$part" > "$report" 2>&1
  echo "$impl: ncu rc=$?"
  if [ "${NCU_SOURCE:-0}" = "1" ]; then
    ncu --import "$rep.ncu-rep" --page details >> "$report" 2>&1
    ncu --import "$rep.ncu-rep" --page source --print-source sass --csv > "$rep.csv" 2>&1
    python3 scripts/ncu_sass_summary.py "$rep.csv" > "${report%.txt}_sass.txt" 2>&1
    gzip -c "$rep.csv" > "${report%.txt}_sass.csv.gz"
    head -80 "${report%.txt}_sass.txt"
  fi
  grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Registers Per|Warp Cycles Per Issued|Issue Slots Busy|Block Size|Grid Size|Achieved Active Warps|No Eligible|Eligible Warps|smsp__inst_executed.sum|dram__bytes_read.sum|Dynamic Shared|Stall|Executed Ipc A" "$report" | head -40
done
