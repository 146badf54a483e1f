#!/usr/bin/env bash
# On the lent GPU machine, session 57's calls; logs to $OUT/s57<PART>.txt, ncu reports beside it
# (benchmarks/results/h100/tuning/h100-2026-12-07-s57-README.md). PART picks the call:
#   a (about 300 s): why the W4A8 e2m1 per-channel tiles trail the W8A8 ones of the same plan at
#      m = 256 (session 56: 5120 x 13824, t128, 55.7 against 40.1 us): the e2m1gc tiles in the
#      generic layout and in layout 4 forced, t64 and t128, GEMM alone, with cuBLASLt FP8 beside, at
#      m = 256, 1024 and 8192 on four layers; ncu with source counters of the t128 (both layouts)
#      and of the W8A8 t128 at 5120 x 13824 m = 256, and of the t128 in layout 4 at 8192 x 8192
#      m = 8192.
#   b (about 400 s): the W4A8 main loop reading each stage's codes a trip ahead of their conversion
#      (DenseA8::kCodesAhead, -DHUMMING_A8_CODES_AHEAD=0/1/2; 2 the default): the e2m1gc t64 and
#      t128 tiles (layout 4, and the t128 in the generic layout) timed as in a under each value;
#      under 2 (last) also u4g128 in layout 4 and the GPU tests of the W4A8 tiles whose loop
#      changed (dense and grouped).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
PART="${PART:-a}"
. scripts/build_filtered.sh
device_log "s57$PART.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
W8="sm90_wgmma_dense_a-e4m3-pt_w-e4m3gc-sf32_c-bf16_"
W4="sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_"
A4="--act e4m3-pt --graph --flush read --iters 30 --weights randn --prequant"
NCU="--launch-skip 2 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats --section SchedulerStats --section WarpStateStats --section SourceCounters"
# ncu_one TAG N K M FORMAT LAYOUT INSTANCE: ncu of one forced instance (report, details and its SASS
# page with stall samples per instruction, gzipped, to $OUT).
ncu_one() {
  timeout 150 ncu --kernel-name regex:dense_kernel $NCU -f -o "/tmp/ncu_$1" python3 scripts/profile_one.py $2 $3 $4 $5 $6 \
    e4m3-pt $7 > /dev/null 2>&1
  ncu --import "/tmp/ncu_$1.ncu-rep" --page details > "$OUT/ncu_$1.txt" 2>&1
  ncu --import "/tmp/ncu_$1.ncu-rep" --page source --print-source sass --csv 2>/dev/null | gzip > "$OUT/ncu_$1_sass.csv.gz"
  grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Ipc A" \
    "$OUT/ncu_$1.txt" | sed "s/^/ncu $1 /" | log
}
case "$PART" in
a)
  HUMMING_PROFILE=dev build_filtered "^($W4|${W8}t128x128x128_w1x2x1_s6\$)"
  echo "build done at $(($(date +%s) - start)) s" | log
  SH=5120x13824,8192x8192,28672x8192,7168x16384
  python3 scripts/time_shapes.py $SH 256,1024,8192 --format e2m1gc-sbf16 --layout generic $A4 --cublaslt --instances \
    ${W4}t128x128x128_w1x2x1_s6,${W4}t64x128x128_w1x2x1_s8 2>&1 | sed "s/^/generic /" | log
  python3 scripts/time_shapes.py $SH 256,1024,8192 --format e2m1gc-sbf16 --layout sm90a8 $A4 --instances \
    ${W4}t128x128x128_w1x2x1_s6_l4,${W4}t64x128x128_w1x2x1_s8_l4,${W4}t192x128x128_w1x2x1_s5_l4 2>&1 | sed "s/^/l4 /" | log
  python3 scripts/time_shapes.py $SH 256,1024,8192 --format e4m3gc-sf32 --layout generic $A4 --instances \
    ${W8}t128x128x128_w1x2x1_s6 2>&1 | sed "s/^/w8a8 /" | log
  ncu_one w4_gen_t128_5120x13824_m256 5120 13824 256 e2m1gc-sbf16 generic ${W4}t128x128x128_w1x2x1_s6
  ncu_one w4_l4_t128_5120x13824_m256 5120 13824 256 e2m1gc-sbf16 sm90a8 ${W4}t128x128x128_w1x2x1_s6_l4
  ncu_one w8_t128_5120x13824_m256 5120 13824 256 e4m3gc-sf32 generic ${W8}t128x128x128_w1x2x1_s6
  ncu_one w4_l4_t128_8192x8192_m8192 8192 8192 8192 e2m1gc-sbf16 sm90a8 ${W4}t128x128x128_w1x2x1_s6_l4
  ;;
b)
  SH=5120x13824,8192x8192,28672x8192,7168x16384
  L4=${W4}t128x128x128_w1x2x1_s6_l4,${W4}t64x128x128_w1x2x1_s8_l4
  U4="sm90_wgmma_dense_a-e4m3-pt_w-u4g128-sbf16_c-bf16_"
  for v in 0 1 2; do
    if [ $v = 2 ]; then
      HUMMING_PROFILE=dev build_filtered "^(${W4}t(64|128)x|${U4}t(64|128)x|sm90_wgmma_moe_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t(48|64|80|128)x.*_l4\$)"
    else
      CUDAFLAGS=-DHUMMING_A8_CODES_AHEAD=$v HUMMING_PROFILE=dev build_filtered "^${W4}t(64|128)x"
    fi
    echo "build $v done at $(($(date +%s) - start)) s" | log
    peer=""
    [ $v = 2 ] && peer=--cublaslt
    python3 scripts/time_shapes.py $SH 256,1024,8192 --format e2m1gc-sbf16 --layout sm90a8 $A4 $peer --instances $L4 2>&1 \
      | sed "s/^/ahead$v l4 /" | log
    python3 scripts/time_shapes.py $SH 256,8192 --format e2m1gc-sbf16 --layout generic $A4 --instances \
      ${W4}t128x128x128_w1x2x1_s6 2>&1 | sed "s/^/ahead$v generic /" | log
  done
  python3 scripts/time_shapes.py $SH 256,1024,8192 --format u4g128-sbf16 --layout sm90a8 $A4 --instances \
    ${U4}t128x128x128_w1x2x1_s6_l4,${U4}t64x128x128_w1x2x1_s8_l4 2>&1 | sed "s/^/ahead2 u4g128 l4 /" | log
  gpu_tests test_gpu test_gpu.py "instance_against or split_k or waves or rings or heavy or in_step or w4a8 or subnormal or mxfp4"
  gpu_tests test_moe test_moe.py "sm90 or grouped"
  ;;
*)
  echo "PART must be a or b" >&2
  exit 2
  ;;
esac
echo "all done at $(($(date +%s) - start)) s" | log
# The device tool returns only the first files under $OUT (by name): the log and reports in one archive, named first.
tar czf /tmp/0-s57.tgz -C "$OUT" --exclude=build.log . && mv /tmp/0-s57.tgz "$OUT/0-s57$PART.tgz"
