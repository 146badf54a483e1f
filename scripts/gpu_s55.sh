#!/usr/bin/env bash
# On the lent GPU machine, session 55's call; logs to $OUT/s55.txt, sweeps to $OUT/sweep-*.json.
# Session 54's planned call (its scripts/gpu_s54.sh never ran; this one replaced it) with session
# 55's change measured first: an uneven spread of several rows of tiles walks the rows in step
# (scheduler/streamk.h, StreamKPlan::step_rows; on by default when call 1 ran, off since, with
# HUMMING_LOCKSTEP_ROWS=1 turning it on; step 3 sets it either way). Call 1, about 510 s:
#   1. a dev build of the dense W4A8 e2m1 per-channel and u4g128 tiles, the W8A8 e4m3 per-channel
#      ones and the W4A16 u4g128 ones;
#   2. the GPU tests of those (test_gpu.py: rows in step, heavy tiles spread over K, every instance
#      against the reference, dispatch, graphs and their stream-K scratch, split K, streams);
#   3. rows in step on and off (HUMMING_LOCKSTEP_ROWS=1 / 0) where session 54 saw the per-channel
#      W8A8 t64x192 at 1.4-1.9x t128's time (7168 x 16384 at m = 128, 3584 x 18944 and 4096 x
#      14336 at 256), with t128 whole and cuBLASLt beside, and the W4A8 e2m1 t64 on the deep layers;
#   4. session 54's plan: the sk0 / sk1 A/B of the W4A8 t128 spread (u4g128 layout 4, e2m1
#      generic), the deepest layers' picks, the graph scratch limit at 16 / 17 MiB, and the W4A8
#      layout-4 sweeps at m = 48 to 512 for refitting the a8w4 tile costs.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s55.txt
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
W4="sm90_wgmma_dense_a-e4m3-pt_w-(e2m1gc|u4g128)-sbf16_c-bf16_"
W8="sm90_wgmma_dense_a-e4m3-pt_w-e4m3gc-sf32_c-bf16_"
A8="--act e4m3-pt --graph --flush read --iters 30 --weights randn"
STEP=7168x16384,3584x18944,4096x14336,5120x13824,8192x28672
# PART=last (the second call, about 270 s; it never ran in session 55): the per-channel W8A8 part
# of step 3 again, its weights in the generic layout that 8-bit codes use (the first call asked for
# layout 4, which refused them), and its mid tiles whole (HUMMING_STREAM_K=0); then the W4A8
# layout-4 sweeps at m = 1 to 32, which the first call's (m = 48 to 512) lack.
if [ "${PART:-}" = "last" ]; then
  HUMMING_PROFILE=dev build_filtered "^($W4|$W8)"
  echo "build done at $(($(date +%s) - start)) s" | log
  for ls in 1 0; do
    HUMMING_LOCKSTEP_ROWS=$ls python3 scripts/time_shapes.py $STEP 128,256 --format e4m3gc-sf32 --layout generic $A8 \
      --instances ${W8}t64x192x128_w1x3x1_s6,${W8}t64x128x128_w1x2x1_s8 2>&1 | sed "s/^/step$ls w8a8 /" | log
  done
  python3 scripts/time_shapes.py $STEP 128,256 --format e4m3gc-sf32 --layout generic $A8 --cublaslt \
    --instances ${W8}t128x128x128_w1x2x1_s6 2>&1 | sed "s/^/step w8a8 t128 /" | log
  # The dispatcher's choice, which since session 55 charges launches whose rows are apart
  # (humming.h, kRowsApartPenalty8: t128 or t32 where it took t64x192 on these layers).
  python3 scripts/time_shapes.py $STEP 96,128,256 --format e4m3gc-sf32 --layout generic $A8 2>&1 \
    | sed "s/^/step w8a8 default /" | log
  # The same mid tiles as whole tiles (one block each, no spread): whether the spread itself is
  # what those launches lose by.
  HUMMING_STREAM_K=0 python3 scripts/time_shapes.py $STEP 128,256 --format e4m3gc-sf32 --layout generic $A8 \
    --instances ${W8}t64x192x128_w1x3x1_s6,${W8}t64x128x128_w1x2x1_s8 2>&1 | sed "s/^/whole w8a8 /" | log
  echo "step a/b done at $(($(date +%s) - start)) s" | log
  for fmt in e2m1gc u4g128; do
    python3 scripts/sweep_tiles.py "$OUT/sweep-w4a8-$fmt-l4-small.json" --format $fmt-sbf16 --act e4m3-pt --layout sm90a8 \
      --match "^sm90_wgmma_dense_a-e4m3-pt_w-$fmt-sbf16_c-bf16_.*_l4$" --ms 1,8,16,24,32 2>&1 | sed "s/^/sweep $fmt /" | log
    echo "sweep $fmt done at $(($(date +%s) - start)) s" | log
  done
  exit 0
fi
HUMMING_PROFILE=dev build_filtered "^($W4|$W8|sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_)"
echo "build done at $(($(date +%s) - start)) s" | log
gpu_tests test_gpu test_gpu.py "in_step or heavy or instance_against or dispatch or graph or split_k or stream or scratch"
echo "tests done at $(($(date +%s) - start)) s" | log
A8="--act e4m3-pt --graph --flush read --iters 30 --weights randn"
# Rows in step (StreamKPlan::step_rows) on and off, W8A8 per channel and W4A8 e2m1 layout 4.
STEP=7168x16384,3584x18944,4096x14336,5120x13824,8192x28672
for ls in 1 0; do
  HUMMING_LOCKSTEP_ROWS=$ls python3 scripts/time_shapes.py $STEP 128,256 --format e4m3gc-sf32 --layout sm90a8 $A8 \
    --instances ${W8}t64x192x128_w1x3x1_s6,${W8}t64x128x128_w1x2x1_s8 2>&1 | sed "s/^/step$ls w8a8 /" | log
  HUMMING_LOCKSTEP_ROWS=$ls python3 scripts/time_shapes.py $STEP 128,256 --format e2m1gc-sbf16 --layout sm90a8 $A8 \
    --instances sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t64x128x128_w1x2x1_s8_l4 2>&1 | sed "s/^/step$ls w4a8 /" | log
done
python3 scripts/time_shapes.py $STEP 128,256 --format e4m3gc-sf32 --layout sm90a8 $A8 --cublaslt \
  --instances ${W8}t128x128x128_w1x2x1_s6 2>&1 | sed "s/^/step w8a8 t128 /" | log
python3 scripts/time_shapes.py $STEP 128,256 --format e4m3gc-sf32 --layout sm90a8 $A8 2>&1 | sed "s/^/step w8a8 default /" | log
python3 scripts/time_shapes.py $STEP 128,256 --format e2m1gc-sbf16 --layout sm90a8 $A8 2>&1 | sed "s/^/step w4a8 default /" | log
echo "step a/b done at $(($(date +%s) - start)) s" | log
S8=5120x13824,8192x8192,4096x14336,7168x16384,3584x18944,5120x5120
for sk in 0 1; do
  HUMMING_STREAM_K=$sk python3 scripts/time_shapes.py $S8 128,256 --format u4g128-sbf16 --layout sm90a8 $A8 \
    --instances sm90_wgmma_dense_a-e4m3-pt_w-u4g128-sbf16_c-bf16_t128x128x128_w1x2x1_s6_l4 2>&1 | sed "s/^/u4 l4 sk$sk /" | log
  HUMMING_STREAM_K=$sk python3 scripts/time_shapes.py $S8 128,256 --format e2m1gc-sbf16 --layout generic $A8 \
    --instances sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t128x128x128_w1x2x1_s6 2>&1 | sed "s/^/e2m1 l1 sk$sk /" | log
done
# The corpus points where the estimates now take the W4A8 t128 spread (registry.cpp,
# persistent_launch_facts): the dispatcher's choice with cuBLASLt beside, t64 forced, whole t128.
DEEP=8192x28672,8192x29568
python3 scripts/time_shapes.py $DEEP 65,96,128 --format e2m1gc-sbf16 --layout sm90a8 $A8 --cublaslt 2>&1 \
  | sed "s/^/deep default /" | log
python3 scripts/time_shapes.py $DEEP 65,96,128 --format e2m1gc-sbf16 --layout sm90a8 $A8 \
  --instances sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t64x128x128_w1x2x1_s8_l4 2>&1 | sed "s/^/deep t64 /" | log
HUMMING_STREAM_K=0 python3 scripts/time_shapes.py $DEEP 65,96,128 --format e2m1gc-sbf16 --layout sm90a8 $A8 \
  --instances sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t128x128x128_w1x2x1_s6_l4 2>&1 | sed "s/^/deep t128 sk0 /" | log
# The t128 spread launches' 16.5 MiB of scratch from the graph's own buffer (17) against the pool
# and its replayed fill (16, the default limit): src/torch/ops.cpp, graph_scratch_max_bytes.
for mib in 16 17; do
  HUMMING_GRAPH_SCRATCH_MAX_MIB=$mib python3 scripts/time_shapes.py 5120x13824,4096x14336,3584x18944,7168x16384 128,256 \
    --format e2m1gc-sbf16 --layout sm90a8 $A8 \
    --instances sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t128x128x128_w1x2x1_s6_l4 2>&1 | sed "s/^/scratch $mib /" | log
done
echo "a/b done at $(($(date +%s) - start)) s" | log
for fmt in e2m1gc u4g128; do
  python3 scripts/sweep_tiles.py "$OUT/sweep-w4a8-$fmt-l4.json" --format $fmt-sbf16 --act e4m3-pt --layout sm90a8 \
    --match "^sm90_wgmma_dense_a-e4m3-pt_w-$fmt-sbf16_c-bf16_.*_l4$" --ms 48,64,96,128,192,256,384,512 2>&1 \
    | sed "s/^/sweep $fmt /" | log
  echo "sweep $fmt done at $(($(date +%s) - start)) s" | log
done
echo "all done at $(($(date +%s) - start)) s" | log
