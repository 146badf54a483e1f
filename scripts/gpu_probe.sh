#!/usr/bin/env bash
# On the lent GPU machine, after scripts/gpu_check.sh has installed the build: the measurements a
# session takes besides tests and the benchmark. Host time per eager call split into its parts
# (scripts/host_parts.py), decode timings of the symmetric and float-zero-point formats, and ncu
# sections of the decode kernel and of a large-M kernel (profile_one.py calls the layer three
# times; the third launch is profiled). Text to $OUT/probe.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  echo "### host parts"; python3 scripts/host_parts.py 8192 8192 1
  for f in u4g128-sbf16 u4g128-sbf16-zf u4g128-sbf16-zi; do
    echo "### decode $f"; python3 scripts/time_shapes.py 28672x8192,8192x8192 1,16 --graph --format "$f"
  done
} > "$OUT/probe.txt" 2>&1
for spec in "8192 8192 1:decode" "28672 8192 16:m16" "28672 8192 8192:large"; do
  shape=${spec%%:*} tag=${spec##*:}
  timeout 150 ncu --kernel-name regex:dense_kernel --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section Occupancy --section SchedulerStats --section WarpStateStats --section LaunchStats \
    python3 scripts/profile_one.py $shape > "$OUT/ncu_$tag.txt" 2>&1
  echo "ncu $tag rc=$?" >> "$OUT/probe.txt"
done
cat "$OUT/probe.txt"
