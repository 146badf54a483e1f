#!/usr/bin/env bash
# On the lent GPU machine: where the sm90 weight-only kernels spend their time at decode and on
# small layers. A filtered build of the bf16 u4g128 sm90 instances (experimental tiles included),
# then: the SASS of every built kernel (sass.txt.gz), the copy-only TMA floor
# (scripts/mbench_stream.cu), a decode tile sweep, the dispatcher's choice on small corpus layers,
# and ncu of three launches (ncu_*.txt). Everything lands in $OUT (diag.txt, build.log, the rest).
# Usage: [SKIP_BUILD=1] [DIAG_STEPS=sass,stream,sweep,small,ncu] bash scripts/diag_sm90_w4a16.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
steps=",${DIAG_STEPS:-sass,stream,sweep,small,ncu},"
start=$(date +%s)
say() { echo "$*" | tee -a "$OUT/diag.txt"; }
if [ "${SKIP_BUILD:-0}" = "0" ]; then
  HUMMING_PROFILE=dev+experimental HUMMING_FILTER="${HUMMING_FILTER:-^sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_}" \
    CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps -v -C "cmake.define.CMAKE_CUDA_FLAGS=${CUDAFLAGS:-}" . > "$OUT/build.log" 2>&1 \
    || { tail -30 "$OUT/build.log"; exit 1; }
fi
say "build done after $(( $(date +%s) - start )) s"
pkg=$(python3 -c 'import humming_aot, os; print(os.path.dirname(humming_aot.__file__))')
if [[ $steps == *,sass,* ]]; then
  find "$pkg" -name '*.so*' -type f | while read -r f; do cuobjdump -sass "$f" 2>/dev/null; done | gzip > "$OUT/sass.txt.gz"
  say "sass: $(stat -c %s "$OUT/sass.txt.gz") bytes"
fi
if [[ $steps == *,stream,* ]]; then
  nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 -I include scripts/mbench_stream.cu -o /tmp/ms && /tmp/ms | grep "read  flush kmajor" | tee -a "$OUT/diag.txt"
fi
P=sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_
if [[ $steps == *,sweep,* ]]; then
  timeout 200 python3 scripts/time_shapes.py "${SWEEP_SHAPES:-28672x8192,8192x8192,8192x28672,5120x13824}" "${SWEEP_MS:-1,16}" --graph --flush read \
    --iters 15 --match "${SWEEP_MATCH:-${P}t(8|16)x}" 2>&1 | tee -a "$OUT/diag.txt"
fi
if [[ $steps == *,small,* ]]; then
  timeout 200 python3 scripts/time_shapes.py "${SMALL_SHAPES:-576x7168,1536x7168,3584x3584,4096x4096,2880x4096,4608x3584,6144x4096}" "${SMALL_MS:-1,16,64,256}" \
    --graph --flush read --iters 15 2>&1 | tee -a "$OUT/diag.txt"
fi
if [[ $steps == *,mid,* ]]; then
  # Mid-M tiles over small and mid layers (the dispatcher's t128 against t32 / t64 / t256).
  timeout 300 python3 scripts/time_shapes.py "${MID_SHAPES:-3584x3584,4096x4096,6144x4096,1536x7168,8192x8192,10240x8192,5120x13824,28672x8192}" \
    "${MID_MS:-64,128,256,512}" --graph --flush read --iters 10 --match "${P}t(32|64|128|256)x" 2>&1 | tee -a "$OUT/diag.txt"
  HUMMING_STREAM_K=0 timeout 120 python3 scripts/time_shapes.py 3584x3584,4096x4096,6144x4096,1536x7168 64,256 --graph --flush read \
    --iters 10 2>&1 | sed 's/^/stream-k off: /' | tee -a "$OUT/diag.txt"
fi
if [[ $steps == *,tests,* ]]; then
  timeout 300 python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -k sm90 > "$OUT/tests.log" 2>&1
  say "tests (test_gpu.py -k sm90, the built instances) rc=$?: $(tail -1 "$OUT/tests.log")"
  grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20 | tee -a "$OUT/diag.txt"
fi
if [[ $steps == *,table,* ]]; then
  # The dispatcher's choice over the corpus (python/humming_aot/bench_corpus.json) and the headline shapes.
  shapes=$(python3 -c 'import json; c = json.load(open("python/humming_aot/bench_corpus.json"))["shapes"]; print(",".join(dict.fromkeys("%dx%d" % (s["n"], s["k"]) for s in c)))')
  timeout 400 python3 scripts/time_shapes.py "${TABLE_SHAPES:-$shapes,28672x8192}" "${TABLE_MS:-1,16,64,128,256,512}" --graph --flush read \
    --iters 10 2>&1 | sed 's/^/table: /' | tee -a "$OUT/diag.txt"
fi
if [[ $steps == *,stall,* ]]; then
  # Where the warps of one launch wait: stall reasons per issued instruction and the SASS with its
  # stall samples (ncu's source page), for NCU_STALL="N K M instance tag" launches (';'-separated).
  IFS=';' read -ra sruns <<< "${NCU_STALL:-3584 3584 256 ${P}t128x128x128_w1x2x1_s4 small_m256;28672 8192 256 ${P}t128x128x128_w1x2x1_s4 big_m256}"
  for r in "${sruns[@]}"; do
    set -- $r
    timeout 200 ncu --kernel-name regex:dense_kernel --launch-skip 2 --launch-count 1 -o "/tmp/stall_$5" -f \
      --section WarpStateStats --section SourceCounters --section SchedulerStats --section SpeedOfLight \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
      python3 scripts/profile_one.py "$1" "$2" "$3" u4g128-sbf16 sm90 - "$4" > "$OUT/ncu_stall_$5.log" 2>&1
    say "ncu stall $5 rc=$?"
    ncu -i "/tmp/stall_$5.ncu-rep" --page details --print-details all > "$OUT/ncu_stall_$5.txt" 2>&1
    ncu -i "/tmp/stall_$5.ncu-rep" --page source --print-source sass --csv 2>&1 | gzip > "$OUT/ncu_src_$5.csv.gz"
    grep -E "issue_stalled" "$OUT/ncu_stall_$5.txt" | sort -k3 -g -r | head -12 | tee -a "$OUT/diag.txt"
  done
fi
if [[ $steps == *,ncu,* ]]; then
  runs=(
    "28672 8192 1 ${P}t8x256x128_w1x4x1_s8 m1 --section SourceCounters --section InstructionStats"
    "576 7168 1 ${P}t8x128x128_w1x2x1_s8 small_m1"
    "3584 3584 256 ${P}t128x128x128_w1x2x1_s4 small_m256"
  )
  for r in "${runs[@]}"; do
    set -- $r
    timeout 150 ncu --kernel-name regex:dense_kernel --launch-skip 2 --launch-count 1 --metrics gpu__time_duration.sum \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section LaunchStats \
      "${@:6}" python3 scripts/profile_one.py "$1" "$2" "$3" u4g128-sbf16 sm90 - "$4" > "$OUT/ncu_$5.txt" 2>&1
    say "ncu $5 rc=$?"
    grep -E "gpu__time_duration|DRAM Throughput|Duration|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Grid Size" "$OUT/ncu_$5.txt" | head -14 | tee -a "$OUT/diag.txt"
  done
fi
say "total $(( $(date +%s) - start )) s"
