#!/usr/bin/env bash
# On the lent GPU machine: ncu of the 8-bit activation kernels (W4A8 against W8A8, decode and large M),
# with a build of only the instances it profiles. Writes ncu_<tag>.txt and build.log to $OUT.
# Usage: [NCU_RUNS=w4a8_m1,w4a8_big] [NCU_SPEC="N K M WFMT INSTANCE TAG [ACT [LAYOUT]];..."] [SKIP_BUILD=1] bash scripts/ncu_a8.sh
# NCU_SPEC replaces the runs below (ACT defaults to e4m3-pt, LAYOUT to generic), e.g. the block-scaled
# W8A8 with ACT e4m3-g128, or a weight-only sm90 instance with ACT - and LAYOUT sm90. NCU_SOURCE=1
# adds ncu's SourceCounters section (the SASS lines where warps stall most).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$OUT"
P=sm90_wgmma_dense_a-e4m3-pt_w-
runs=(
  "28672 8192 1 e2m1gc-sbf16 ${P}e2m1gc-sbf16_c-bf16_t16x256x128_w1x4x1_s8 w4a8_m1"
  "28672 8192 1 e4m3gc-sf32 ${P}e4m3gc-sf32_c-bf16_t8x128x128_w1x2x1_s8 w8a8_m1"
  "28672 8192 8192 e2m1gc-sbf16 ${P}e2m1gc-sbf16_c-bf16_t128x128x128_w1x2x1_s6 w4a8_big"
  "28672 8192 8192 e4m3gc-sf32 ${P}e4m3gc-sf32_c-bf16_t128x128x128_w1x2x1_s6 w8a8_big"
)
if [ -n "${NCU_SPEC:-}" ]; then IFS=';' read -r -a runs <<< "$NCU_SPEC"; fi
# NCU_RUNS: which of them (tags, comma-separated; default all). SKIP_BUILD=1 profiles the installed
# build (which must hold the instances).
if [ -n "${NCU_RUNS:-}" ]; then
  keep=()
  for r in "${runs[@]}"; do [[ ",$NCU_RUNS," == *",${r##* },"* ]] && keep+=("$r"); done
  runs=("${keep[@]}")
fi
filter=$(printf '%s\n' "${runs[@]}" | awk '{print $5}' | sort -u | paste -sd'|')
. scripts/build_filtered.sh
build_filtered "^($filter)\$"
for r in "${runs[@]}"; do
  set -- $r
  # NCU_SOURCE=1: the report kept, its SASS page (stall samples per instruction) written as CSV.
  extra=()
  [ "${NCU_SOURCE:-0}" = "1" ] && extra=(--section SourceCounters -f -o "/tmp/ncu_$6")
  timeout 120 ncu --kernel-name regex:dense_kernel --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats --section SchedulerStats --section WarpStateStats "${extra[@]}" \
    python3 scripts/profile_one.py "$1" "$2" "$3" "$4" "${8:-generic}" "${7:-e4m3-pt}" "$5" > "$OUT/ncu_$6.txt" 2>&1
  echo "ncu $6 rc=$?"
  if [ "${NCU_SOURCE:-0}" = "1" ]; then
    ncu --import "/tmp/ncu_$6.ncu-rep" --page details >> "$OUT/ncu_$6.txt" 2>&1
    ncu --import "/tmp/ncu_$6.ncu-rep" --page source --print-source sass --csv > "$OUT/ncu_$6_sass.csv" 2>&1
    echo "sass page: $(wc -l < "$OUT/ncu_$6_sass.csv") lines"
  fi
  grep -E "DRAM Throughput|Memory Throughput|Duration|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Stall|Warp Cycles Per Issued" "$OUT/ncu_$6.txt" | head -14
done
# The device tool returns only the first few files under $OUT (by name): one archive, named first.
tar czf /tmp/0-ncu.tgz -C "$OUT" --exclude=build.log . && mv /tmp/0-ncu.tgz "$OUT/0-ncu.tgz"
