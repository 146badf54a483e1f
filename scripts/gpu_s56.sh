#!/usr/bin/env bash
# On the lent GPU machine, session 56's calls; logs to $OUT/s56<PART>.txt, ncu reports and sweeps
# beside it (benchmarks/results/h100/tuning/h100-2026-12-07-s56-README.md). PART picks the call:
#   (none, about 150 s) rows of an uneven spread in step made the default: a dev build of the dense
#      W4A8 e2m1 per-channel and u4g128 tiles, the W8A8 e4m3 per-channel ones and the W4A16 u4g128
#      ones (those the graph tests take); their GPU tests; the per-channel W8A8 dispatcher's choices
#      on five deep layers at m = 96, 128, 256 with cuBLASLt beside, in step and grouped
#      (HUMMING_LOCKSTEP_ROWS=0); ncu of the W8A8 t128 against cuBLASLt FP8 at 7168 x 16384 m = 128
#      and 4096 x 14336 m = 256.
#   b (about 90 s): the W8A8 GEMM alone (activations quantized before the timed call, as cuBLASLt's
#      FP8 GEMM is timed) at m = 64 to 256 against cuBLASLt on eight layers, and every mid tile
#      forced at m = 96.
#   c (about 230 s): the W8A8 tiles (e4m3 and i8 per channel, 128 x 128 blocks) and the W4A16 u4g128
#      ones, their GPU tests, and sweeps of the e4m3 and i8 per-channel tiles at m = 48 to 256 over
#      the corpus (for tools/table_regret.py).
#   d (about 120 s): the same build and tests; the per-channel W8A8 choices at m = 64 to 256 on
#      eight layers, quantize + GEMM, then the GEMM alone with cuBLASLt.
#   e (about 90 s): the 128 x 128 block-scaled t64x128 whole (default) against spread
#      (HUMMING_STREAM_K=2, the plan before MidSpread::kDeep) on five deep layers at m = 96 and 128,
#      and every per-channel tile on 28672 x 8192 at m = 96 and 128, GEMM alone.
#   f (about 150 s): the W4A8 standing at mid M (e2m1 per channel in the generic layout, u4g128 in
#      layout 4): the dispatcher's choice at m = 64 to 256 on the eight layers, GEMM alone, with
#      cuBLASLt FP8 (W8A8) beside, where issue 11 asks for no point slower than it by over 5 %.
#   g (about 100 s): rows in step (the default) against grouped (HUMMING_LOCKSTEP_ROWS=0) for the
#      weight-only W4A16 u4g128 tiles: the dispatcher's choice and t64x128 forced on the five deep
#      layers at m = 96, 128 and 256.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
PART="${PART:-}"
. scripts/build_filtered.sh
device_log "s56$PART.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
W8="sm90_wgmma_dense_a-e4m3-pt_w-e4m3gc-sf32_c-bf16_"
B="sm90_wgmma_dense_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16_"
A8="--format e4m3gc-sf32 --layout generic --act e4m3-pt --graph --flush read --iters 30 --weights randn"
DEEP=7168x16384,3584x18944,4096x14336,5120x13824,8192x28672
EIGHT=$DEEP,28672x8192,8192x8192,6144x4096
TESTS="in_step or heavy or instance_against or dispatch or graph or split_k or stream or scratch"
W8_ALL="^sm90_wgmma_dense_a-(e4m3-pt_w-e4m3gc-sf32|i8-pt_w-i8gc-sf32|e4m3-g128_w-e4m3g128n128-sf32|bf16_w-u4g128-sbf16)_c-bf16_"
case "$PART" in
"")
  HUMMING_PROFILE=dev build_filtered "^(sm90_wgmma_dense_a-e4m3-pt_w-(e2m1gc|u4g128)-sbf16_c-bf16_|$W8|sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_)"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests test_gpu test_gpu.py "$TESTS"
  python3 scripts/time_shapes.py $DEEP 96,128,256 $A8 --cublaslt 2>&1 | sed "s/^/w8a8 default /" | log
  HUMMING_LOCKSTEP_ROWS=0 python3 scripts/time_shapes.py $DEEP 96,128,256 $A8 2>&1 | sed "s/^/w8a8 grouped /" | log
  NCU="--launch-skip 2 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section LaunchStats --section Occupancy"
  for nkm in "7168 16384 128" "4096 14336 256"; do
    set -- $nkm
    timeout 120 ncu --kernel-name regex:dense_kernel $NCU python3 scripts/profile_one.py $1 $2 $3 e4m3gc-sf32 generic \
      e4m3-pt ${W8}t128x128x128_w1x2x1_s6 > "$OUT/ncu_w8a8_t128_${1}x${2}_m$3.txt" 2>&1
    timeout 120 ncu --kernel-name regex:"gemm|sm90|cutlass|xmma" $NCU python3 scripts/profile_scaled_mm.py $1 $2 $3 \
      > "$OUT/ncu_cublaslt_${1}x${2}_m$3.txt" 2>&1
  done
  ;;
b)
  HUMMING_PROFILE=dev build_filtered "^$W8"
  python3 scripts/time_shapes.py $EIGHT 64,96,128,192,256 $A8 --prequant --cublaslt 2>&1 | sed "s/^/gemm default /" | log
  python3 scripts/time_shapes.py 8192x28672,7168x16384,5120x13824 96 $A8 --prequant --instances \
    ${W8}t128x128x128_w1x2x1_s6,${W8}t64x128x128_w1x2x1_s8,${W8}t64x192x128_w1x3x1_s6,${W8}t32x128x128_w1x2x1_s8 \
    2>&1 | sed "s/^/gemm m96 /" | log
  ;;
c)
  HUMMING_PROFILE=dev build_filtered "$W8_ALL"
  gpu_tests test_gpu test_gpu.py "$TESTS"
  for fa in e4m3gc-sf32:e4m3-pt i8gc-sf32:i8-pt; do
    f=${fa%%:*} a=${fa#*:}
    python3 scripts/sweep_tiles.py "$OUT/sweep-w8a8-${f%%-*}-mid.json" --format $f --act $a --layout generic \
      --match "^sm90_wgmma_dense_a-${a}_w-${f}_c-bf16_" --ms 48,64,96,128,192,256 2>&1 | sed "s/^/sweep $f /" | log
  done
  ;;
d)
  HUMMING_PROFILE=dev build_filtered "$W8_ALL"
  gpu_tests test_gpu test_gpu.py "$TESTS"
  python3 scripts/time_shapes.py $EIGHT 64,96,128,192,256 $A8 2>&1 | sed "s/^/layer default /" | log
  python3 scripts/time_shapes.py $EIGHT 64,96,128,192,256 $A8 --prequant --cublaslt 2>&1 | sed "s/^/gemm default /" | log
  ;;
e)
  HUMMING_PROFILE=dev build_filtered "^($B|$W8)"
  BA="--format e4m3g128n128-sf32 --layout generic --act e4m3-g128 --graph --flush read --iters 30 --weights randn --prequant"
  for sk in 1 2; do
    HUMMING_STREAM_K=$sk python3 scripts/time_shapes.py $DEEP 96,128 $BA --instances ${B}t64x128x128_w1x2x1_s8 2>&1 \
      | sed "s/^/blocks sk$sk /" | log
  done
  python3 scripts/time_shapes.py $DEEP 96,128 $BA 2>&1 | sed "s/^/blocks default /" | log
  python3 scripts/time_shapes.py 28672x8192 96,128 $A8 --prequant --cublaslt --instances \
    ${W8}t128x128x128_w1x2x1_s6,${W8}t128x192x128_w1x3x1_s4,${W8}t128x192x128_w1x3x1_s5,${W8}t64x128x128_w1x2x1_s8,${W8}t64x192x128_w1x3x1_s6,${W8}t32x128x128_w1x2x1_s8 \
    2>&1 | sed "s/^/wide /" | log
  ;;
f)
  HUMMING_PROFILE=dev build_filtered "^sm90_wgmma_dense_a-e4m3-pt_w-(e2m1gc|u4g128)-sbf16_c-bf16_"
  A4="--act e4m3-pt --graph --flush read --iters 30 --weights randn --prequant"
  python3 scripts/time_shapes.py $EIGHT 64,96,128,192,256 --format e2m1gc-sbf16 --layout generic $A4 --cublaslt 2>&1 \
    | sed "s/^/e2m1 /" | log
  python3 scripts/time_shapes.py $EIGHT 64,96,128,192,256 --format u4g128-sbf16 --layout sm90a8 $A4 2>&1 \
    | sed "s/^/u4g128 l4 /" | log
  ;;
g)
  HUMMING_PROFILE=dev build_filtered "^sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_"
  A16="--format u4g128-sbf16 --graph --flush read --iters 30 --weights randn"
  T64=sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t64x128x128_w1x2x1_s5
  for ls in 1 0; do
    HUMMING_LOCKSTEP_ROWS=$ls python3 scripts/time_shapes.py $DEEP 96,128,256 $A16 2>&1 | sed "s/^/w4a16 step$ls default /" | log
    HUMMING_LOCKSTEP_ROWS=$ls python3 scripts/time_shapes.py $DEEP 96,128,256 $A16 --instances $T64 2>&1 \
      | sed "s/^/w4a16 step$ls t64 /" | log
  done
  ;;
*)
  echo "PART must be empty, b, c, d, e, f or g" >&2
  exit 2
  ;;
esac
echo "all done at $(($(date +%s) - start)) s" | log
