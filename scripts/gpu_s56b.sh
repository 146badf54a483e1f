#!/usr/bin/env bash
# On the lent GPU machine, session 56's second call (about 150 s); logs to $OUT/s56b.txt. The
# per-channel W8A8 GEMM alone (activations quantized before the timed call, as cuBLASLt's FP8 GEMM
# is timed) at m = 64 to 256 with cuBLASLt beside, on the five deep layers of scripts/gpu_s56.sh and
# three headline ones; then every mid tile forced at m = 96, where the dispatcher takes t32 on
# 8192 x 28672 (144 us on the H100 with the quantization, against 91 for cuBLASLt).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s56b.txt
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
W8="sm90_wgmma_dense_a-e4m3-pt_w-e4m3gc-sf32_c-bf16_"
A8="--act e4m3-pt --graph --flush read --iters 30 --weights randn --prequant"
HUMMING_PROFILE=dev build_filtered "^$W8"
echo "build done at $(($(date +%s) - start)) s" | log
python3 scripts/time_shapes.py 7168x16384,3584x18944,4096x14336,5120x13824,8192x28672,28672x8192,8192x8192,6144x4096 \
  64,96,128,192,256 --format e4m3gc-sf32 --layout generic $A8 --cublaslt 2>&1 | sed "s/^/gemm default /" | log
echo "default done at $(($(date +%s) - start)) s" | log
python3 scripts/time_shapes.py 8192x28672,7168x16384,5120x13824 96 --format e4m3gc-sf32 --layout generic $A8 \
  --instances ${W8}t128x128x128_w1x2x1_s6,${W8}t64x128x128_w1x2x1_s8,${W8}t64x192x128_w1x3x1_s6,${W8}t32x128x128_w1x2x1_s8 \
  2>&1 | sed "s/^/gemm m96 /" | log
echo "all done at $(($(date +%s) - start)) s" | log
