#!/usr/bin/env bash
# On the lent GPU machine, session 54's call; logs to $OUT/s54.txt, sweeps to $OUT/sweep-*.json.
# The W4A8 kernels (4-bit codes x e4m3) now spread launches of at most half as many t128 tiles as
# multiprocessors over a deep K (scheduler/streamk.h, HeavySpread::kHalf; session 54 measured it
# on e2m1 per channel in layout 4, scripts/gpu_s53.sh PART=spread). This call (about 400 s):
#   1. a dev build of the dense W4A8 e2m1 per-channel and u4g128 tiles and the W4A16 u4g128 ones;
#   2. the GPU tests of those (test_gpu.py: heavy tiles spread over K, every instance against the
#      reference, dispatch, graphs and their stream-K scratch with HUMMING_GRAPH_SCRATCH_MAX_MIB,
#      split K, streams);
#   3. t128 forced with HUMMING_STREAM_K=0 (whole tiles: the plan before kHalf at its points) and 1
#      for u4g128 in layout 4 and e2m1 in the generic layout, which kHalf spreads unmeasured; the
#      deepest corpus layers (8192 x 28672, 8192 x 29568) at m = 65 to 128, where the estimates now
#      take the spread W4A8 t128: the dispatcher's choice, cuBLASLt, t64 and whole t128; the W4A8
#      t128 spread launches in graphs with HUMMING_GRAPH_SCRATCH_MAX_MIB=16 (their 16.5 MiB of
#      scratch from the graph's pool, with a fill each replay) and 17 (the graph's own);
#   4. sweeps (scripts/sweep_tiles.py, every tile forced, graph us with the activations'
#      quantization) of both W4A8 formats in layout 4 over the shape corpus at m = 48 to 512, with
#      the new plan: the data for refitting the a8w4 tile costs to the spread plan.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s54.txt
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
W4="sm90_wgmma_dense_a-e4m3-pt_w-(e2m1gc|u4g128)-sbf16_c-bf16_"
HUMMING_PROFILE=dev build_filtered "^($W4|sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_)"
echo "build done at $(($(date +%s) - start)) s" | log
gpu_tests test_gpu test_gpu.py "heavy or instance_against or dispatch or graph or split_k or stream or scratch"
echo "tests done at $(($(date +%s) - start)) s" | log
A8="--act e4m3-pt --graph --flush read --iters 30 --weights randn"
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
