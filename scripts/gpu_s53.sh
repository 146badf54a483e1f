#!/usr/bin/env bash
# On the lent GPU machine, session 53's calls (carry .peer); logs to $OUT/s53.txt.
# PART=spread (about 450 s), on session 53's change (branch s53-a8-spread; re-made and run in
# session 54 as 1bd07fd, then narrowed on main to W4A8, streamk.h HeavySpread): there the
# 8-bit activation kernels spread a launch of few t128 tiles over a deep K as the weight-only ones do
# (scheduler/streamk.h spread_heavy; session 52's standing: W4A8 5120 x 13824 at m = 256, 80 whole
# tiles, 52.8 us graph against cuBLASLt FP8's 40.4). On main, sk0 and sk1 below run the same plan.
#   1. the session 50 ALL build with the change;
#   2. W4A8 e2m1 and W8A8 e4m3 per channel at m = 128 and 256 on 7 corpus shapes (and the FP8 block
#      and i8 x i8 t128 tiles at two points the change spreads): t128 forced with
#      HUMMING_STREAM_K=0 (whole tiles: the plan before the change wherever the change spreads) and
#      1 (the new plan), t64 forced, the dispatcher's choice, cuBLASLt FP8 beside; then the graph /
#      stream-K / instance GPU tests (session 52's 16 MiB limit on a graph's own scratch had not run
#      on a GPU either);
#   3. session 52's W4A16 m = 1 probe (t8x256 and t16x256 forced, nn.Linear and randn weights, the
#      benchmark beside: 28672 x 8192 took 58 us in the benchmark and 50 in time_shapes).
# PART=moe (a warm follow-up, SKIP_BUILD=1): the W4A8 MoE standing with humming-kernels.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s53.txt
A8="--act e4m3-pt --graph --flush read --iters 30 --weights randn"
# The FP8 128 x 128 block and i8 x i8 kernels share the 8-bit plan: their t128 tiles are timed too.
BLK=sm90_wgmma_dense_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16_t128x128x128_w2x1x1_s5
I8=sm90_wgmma_dense_a-i8-pt_w-i8gc-sf32_c-bf16_t128x128x128_w1x2x1_s6
ALL="^($BLK|$I8|sm90_wgmma_dense_a-e4m3-pt_|sm90_wgmma_(dense|moe)_.*_l4(_lone)?$|sm90_wgmma_(dense|moe)_a-bf16_w-u4g128-sbf16_c-bf16_|generic_dense_a-bf16_w-u4-s)"
S8=5120x13824,8192x8192,4096x14336,7168x16384,3584x18944,5120x5120,10240x8192
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
install_peer
# LEAN=1: only the e2m1 and e4m3 per-channel W4A8 / W8A8 dense tiles, no W4A16 probe (little device time left).
[ "${LEAN:-0}" = 1 ] && ALL="^($BLK|$I8|sm90_wgmma_dense_a-e4m3-pt_w-(e2m1gc-sbf16|e4m3gc-sf32)_c-bf16_)"
if [ "${PART:-spread}" = spread ]; then
  HUMMING_PROFILE=dev build_filtered "$ALL"
  echo "build done at $(($(date +%s) - start)) s" | log
  W4=sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16
  W8=sm90_wgmma_dense_a-e4m3-pt_w-e4m3gc-sf32_c-bf16
  for sk in 0 1; do
    HUMMING_STREAM_K=$sk python3 scripts/time_shapes.py $S8 128,256 --format e2m1gc-sbf16 --layout sm90a8 $A8 \
      --instances ${W4}_t128x128x128_w1x2x1_s6_l4 2>&1 | sed "s/^/w4a8 sk$sk /" | log
    HUMMING_STREAM_K=$sk python3 scripts/time_shapes.py $S8 128,256 --format e4m3gc-sf32 $A8 \
      --instances ${W8}_t128x128x128_w1x2x1_s6 2>&1 | sed "s/^/w8a8 sk$sk /" | log
    # The other corpus points where the W4A8 table picks t128 and the change spreads it (the
    # dispatcher's picks, tools/table_regret.py's rule): 3584 x 18944 at m = 384, 10240 x 8192 at 80, 100.
    for sm in 3584x18944:384 10240x8192:80,100; do
      HUMMING_STREAM_K=$sk python3 scripts/time_shapes.py ${sm%%:*} ${sm#*:} --format e2m1gc-sbf16 --layout sm90a8 $A8 \
        --instances ${W4}_t128x128x128_w1x2x1_s6_l4 2>&1 | sed "s/^/w4a8 sk$sk /" | log
    done
    for sm in 5120x13824:256 3584x18944:384; do
      HUMMING_STREAM_K=$sk python3 scripts/time_shapes.py ${sm%%:*} ${sm#*:} --format e4m3g128n128-sf32 \
        --act e4m3-g128 --graph --flush read --iters 30 --weights randn --instances $BLK 2>&1 | sed "s/^/blocks sk$sk /" | log
      HUMMING_STREAM_K=$sk python3 scripts/time_shapes.py ${sm%%:*} ${sm#*:} --format i8gc-sf32 --act i8-pt \
        --graph --flush read --iters 30 --weights randn --instances $I8 2>&1 | sed "s/^/i8 sk$sk /" | log
    done
  done
  python3 scripts/time_shapes.py $S8 128,256 --format e2m1gc-sbf16 --layout sm90a8 $A8 \
    --instances ${W4}_t64x128x128_w1x2x1_s8_l4 2>&1 | sed "s/^/w4a8 t64 /" | log
  python3 scripts/time_shapes.py $S8 128,256 --format e2m1gc-sbf16 --layout sm90a8 $A8 --cublaslt 2>&1 \
    | sed "s/^/w4a8 default /" | log
  python3 scripts/time_shapes.py $S8 128,256 --format e4m3gc-sf32 $A8 2>&1 | sed "s/^/w8a8 default /" | log
  echo "a8 done at $(($(date +%s) - start)) s" | log
  gpu_tests "test_gpu" test_gpu.py "instance_against or split_k or graph or quantize_and_gemm or stream or dispatch"
  echo "tests done at $(($(date +%s) - start)) s" | log
  [ "${LEAN:-0}" = 1 ] && exit 0
  w4a16_decode_probe
  echo "all done at $(($(date +%s) - start)) s" | log
fi
if [ "${PART:-spread}" = moe ]; then
  w4a8_moe_standing 1,64,256,1024
  echo "all done at $(($(date +%s) - start)) s" | log
fi
