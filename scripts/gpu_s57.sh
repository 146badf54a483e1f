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
#      (DenseA8::kCodesAhead, -DHUMMING_A8_CODES_AHEAD=0/1/2 as they were then: 1 read after the
#      conversion into the same set, 2 into a second set, the default; since then 2 is the only way,
#      spelled 1, and any value but 0 means it): the e2m1gc t64 and
#      t128 tiles (layout 4, and the t128 in the generic layout) timed as in a under each value;
#      under 2 (last) also u4g128 in layout 4 and the GPU tests of the W4A8 tiles whose loop
#      changed (dense and grouped).
#   c (about 450 s): the same for the tiles of mainloop_promoted (below 48 tokens, and t192): the
#      e2m1gc small tiles in layout 4 at m = 1, 16, 32 and t192 at m = 8192, built with
#      -DHUMMING_A8_CODES_AHEAD=0 and then by default; then the default build of every dense e2m1gc
#      tile, the grouped e2m1gc ones in layout 4 and the dense u4g128 small ones in layout 4, timed
#      the same, and their GPU tests (test_gpu.py, and test_moe.py's 8-bit activation tests).
#   d (about 150 s, after c on the same machine, no build): the dispatcher's e2m1gc choice in
#      layout 4 (the W4A8 default), GEMM alone, with cuBLASLt FP8 beside, on eight layers at m = 1,
#      16, 64, 128, 256, 1024 and 8192.
#   e (about 400 s, carry .peer): a dev build of the dense and grouped e2m1gc tiles in layout 4; the
#      t64, t128 and t192 forced at m = 512, 1024 and 2048 on the eight layers (GEMM alone: is t192
#      right at m = 1024, where d found it 1.07-1.23x behind cuBLASLt on three layers?); the W4A8
#      standing with the peers (scripts/build_filtered.sh, w4a8_standing's dense half).
#   f (about 200 s, after e on the same machine, no build): w4a8_standing's MoE half.
#   g (about 300 s): a sweep of every dense e2m1gc tile in layout 4 over the shape corpus at m = 48
#      to 2048 (scripts/sweep_tiles.py; layer time, activations quantized in each call, as session
#      55's H200 sweep), for refitting the a8w4 tile costs after the codes-ahead loops.
#   h (about 200 s): after the refit, a dev build of the dense and grouped e2m1gc tiles in layout 4,
#      the dense u4g128 ones in layout 4 and the W4A16 u4g128 ones (the graph tests); the GPU tests
#      (test_gpu.py: instances, dispatch, graph, split-K, waves, 8-bit activation tests; test_moe.py's
#      8-bit activation tests); then d's timing (the dispatcher's e2m1gc choice against cuBLASLt).
#   i (about 200 s): the integer loop (i8 activations x u4 codes, mainloop_int) reading codes ahead
#      too: the i8 x u4gc tiles built with -DHUMMING_A8_CODES_AHEAD=0 and by default, timed at
#      m = 256, 1024 and 8192 on three layers (GEMM alone); under the default also the i8 x i4gc
#      tiles and the e2m1gc t64 / t128 / grouped tiles in layout 4 (whose loop moved into a shared
#      helper), and their GPU tests.
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
c)
  SH=5120x13824,8192x8192,28672x8192,7168x16384
  SMALL=$(for t in 8x128x128_w1x2x1_s8 8x256x128_w1x4x1_s6 16x128x128_w1x2x1_s8 16x256x128_w1x4x1_s8 \
    32x128x128_w1x2x1_s8 32x256x128_w1x4x1_s8; do printf "%s," "${W4}t${t}_l4"; done)
  for v in 0 2; do
    if [ $v = 2 ]; then
      HUMMING_PROFILE=dev build_filtered "^(${W4}|sm90_wgmma_dense_a-e4m3-pt_w-u4g128-sbf16_c-bf16_t(8|16|32)x.*_l4\$|sm90_wgmma_moe_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_.*_l4\$)"
    else
      CUDAFLAGS=-DHUMMING_A8_CODES_AHEAD=0 HUMMING_PROFILE=dev build_filtered "^${W4}t(8|16|32|192)x.*_l4\$"
    fi
    echo "build $v done at $(($(date +%s) - start)) s" | log
    python3 scripts/time_shapes.py $SH 1,16,32 --format e2m1gc-sbf16 --layout sm90a8 $A4 --instances ${SMALL%,} 2>&1 \
      | sed "s/^/ahead$v small /" | log
    python3 scripts/time_shapes.py $SH 256,8192 --format e2m1gc-sbf16 --layout sm90a8 $A4 --instances \
      ${W4}t192x128x128_w1x2x1_s5_l4 2>&1 | sed "s/^/ahead$v t192 /" | log
  done
  gpu_tests test_gpu test_gpu.py "instance_against or split_k or waves or rings or heavy or in_step or w4a8 or subnormal or mxfp4"
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs -k "8bit or a8 or w4a8" 2>&1 \
    | grep -E "^FAILED|^SKIPPED|passed|failed" | cut -c1-300 | sed "s/^/test_moe /" | log
  ;;
d)
  EIGHT=7168x16384,3584x18944,4096x14336,5120x13824,8192x28672,28672x8192,8192x8192,6144x4096
  python3 scripts/time_shapes.py $EIGHT 1,16,64,128,256,1024,8192 --format e2m1gc-sbf16 --layout sm90a8 $A4 --cublaslt \
    2>&1 | sed "s/^/default /" | log
  ;;
e)
  EIGHT=7168x16384,3584x18944,4096x14336,5120x13824,8192x28672,28672x8192,8192x8192,6144x4096
  HUMMING_PROFILE=dev build_filtered "^sm90_wgmma_(dense|moe)_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_.*_l4\$"
  echo "build done at $(($(date +%s) - start)) s" | log
  python3 scripts/time_shapes.py $EIGHT 512,1024,2048 --format e2m1gc-sbf16 --layout sm90a8 $A4 --instances \
    ${W4}t64x128x128_w1x2x1_s8_l4,${W4}t128x128x128_w1x2x1_s6_l4,${W4}t192x128x128_w1x2x1_s5_l4 2>&1 \
    | sed "s/^/forced /" | log
  install_peer
  PYTHONPATH=/tmp/peer python3 -m humming_aot.bench --shapes 28672x8192,8192x8192,8192x28672 --ms 1,64,256,8192 \
    --formats w4a8 --impls humming-aot,cublaslt-fp8,humming-jit --jit-formats w4a8 --out-dir "$OUT" \
    --name dense-w4a8 --no-plot --time-budget-s 200 2>&1 | tail -40 | sed "s/^/dense /" | log
  ;;
f)
  install_peer
  w4a8_moe_standing 64,256,1024
  ;;
g)
  HUMMING_PROFILE=dev build_filtered "^${W4}.*_l4\$"
  echo "build done at $(($(date +%s) - start)) s" | log
  python3 scripts/sweep_tiles.py "$OUT/sweep-w4a8-e2m1gc-l4.json" --format e2m1gc-sbf16 --act e4m3-pt --layout sm90a8 \
    --match "^${W4}.*_l4\$" --ms 48,64,96,128,192,256,384,512,768,1024,1536,2048 2>&1 | tail -5 | sed "s/^/sweep /" | log
  ;;
h)
  HUMMING_PROFILE=dev build_filtered "^(sm90_wgmma_(dense|moe)_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_.*_l4\$|sm90_wgmma_dense_a-e4m3-pt_w-u4g128-sbf16_c-bf16_.*_l4\$|sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_)"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests test_gpu test_gpu.py "instance_against or dispatch or graph or split_k or waves or rings or heavy or in_step or w4a8 or subnormal or mxfp4 or stream or scratch"
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rf -k "8bit or a8 or w4a8" 2>&1 \
    | grep -E "^FAILED|passed|failed" | cut -c1-300 | sed "s/^/test_moe /" | log
  echo "tests done at $(($(date +%s) - start)) s" | log
  EIGHT=7168x16384,3584x18944,4096x14336,5120x13824,8192x28672,28672x8192,8192x8192,6144x4096
  python3 scripts/time_shapes.py $EIGHT 1,16,64,128,256,512,1024,8192 --format e2m1gc-sbf16 --layout sm90a8 $A4 \
    --cublaslt 2>&1 | sed "s/^/default /" | log
  ;;
i)
  I8="sm90_wgmma_dense_a-i8-pt_w-u4gc-sbf16_c-bf16_"
  SH=5120x13824,8192x8192,28672x8192
  AI="--act i8-pt --graph --flush read --iters 30 --weights randn --prequant"
  for v in 0 2; do
    if [ $v = 2 ]; then
      HUMMING_PROFILE=dev build_filtered "^(sm90_wgmma_dense_a-i8-pt_w-(u4|i4)gc-sbf16_c-bf16_|${W4}t(64|128)x.*_l4\$|sm90_wgmma_moe_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t(80|128)x.*_l4\$)"
    else
      CUDAFLAGS=-DHUMMING_A8_CODES_AHEAD=0 HUMMING_PROFILE=dev build_filtered "^${I8}"
    fi
    echo "build $v done at $(($(date +%s) - start)) s" | log
    python3 scripts/time_shapes.py $SH 256,1024,8192 --format u4gc-sbf16 --layout sm90a8 $AI --instances \
      ${I8}t64x128x128_w1x2x1_s8_l4,${I8}t128x128x128_w1x2x1_s6_l4,${I8}t256x128x128_w1x2x1_s4_l4 2>&1 \
      | sed "s/^/ahead$v i8u4 /" | log
  done
  gpu_tests test_gpu test_gpu.py "instance_against or split_k or waves or rings or heavy or in_step or w4a8"
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rf -k "8bit or a8 or w4a8" 2>&1 \
    | grep -E "^FAILED|passed|failed" | cut -c1-300 | sed "s/^/test_moe /" | log
  ;;
*)
  echo "PART must be a, b, c, d, e, f, g, h or i" >&2
  exit 2
  ;;
esac
echo "all done at $(($(date +%s) - start)) s" | log
# The device tool returns only the first files under $OUT (by name): the log and reports in one archive, named first.
tar czf /tmp/0-s57.tgz -C "$OUT" --exclude=build.log . && mv /tmp/0-s57.tgz "$OUT/0-s57$PART.tgz"
