#!/usr/bin/env bash
# On the lent GPU machine, session 56's last call (about 250 s); logs to $OUT/s56d.txt. With the
# final MidSpread::kDeep (scheduler/streamk.h: two rows of W8A8 t64 tiles keep whole tiles over a
# deep K where more than half the multiprocessors would have one):
#   1. a dev build of the W8A8 tiles (e4m3 and i8 per channel, 128 x 128 blocks) and the W4A16
#      u4g128 ones (those the graph tests take);
#   2. their GPU tests;
#   3. the per-channel W8A8 dispatcher's choices at m = 64 to 256 on five deep layers and three
#      headline ones: quantize + GEMM (as QuantLinear runs), then the GEMM alone with cuBLASLt FP8.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s56d.txt
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
HUMMING_PROFILE=dev build_filtered \
  "^sm90_wgmma_dense_a-(e4m3-pt_w-e4m3gc-sf32|i8-pt_w-i8gc-sf32|e4m3-g128_w-e4m3g128n128-sf32|bf16_w-u4g128-sbf16)_c-bf16_"
echo "build done at $(($(date +%s) - start)) s" | log
gpu_tests test_gpu test_gpu.py "in_step or heavy or instance_against or dispatch or graph or split_k or stream or scratch"
echo "tests done at $(($(date +%s) - start)) s" | log
S=7168x16384,3584x18944,4096x14336,5120x13824,8192x28672,28672x8192,8192x8192,6144x4096
A8="--format e4m3gc-sf32 --layout generic --act e4m3-pt --graph --flush read --iters 30 --weights randn"
python3 scripts/time_shapes.py $S 64,96,128,192,256 $A8 2>&1 | sed "s/^/layer default /" | log
python3 scripts/time_shapes.py $S 64,96,128,192,256 $A8 --prequant --cublaslt 2>&1 | sed "s/^/gemm default /" | log
echo "all done at $(($(date +%s) - start)) s" | log
