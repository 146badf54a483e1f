#!/usr/bin/env bash
# On the lent GPU machine, session 56's probe (about 120 s); logs to $OUT/s56e.txt. The 128 x 128
# block-scaled W8A8 t64x128, which MidSpread::kDeep (scheduler/streamk.h) also gives whole tiles in
# two-row launches over a deep K: forced, default against HUMMING_STREAM_K=2 (spread, the plan
# before), on the five deep layers at m = 96 and 128, then the dispatcher's choices; and the
# per-channel tiles forced on 28672 x 8192 at m = 96 and 128, where the choice (t128x192 s4) took
# 1.07-1.12x cuBLASLt's time. GEMM alone (activations quantized before the timed call).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s56e.txt
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
B="sm90_wgmma_dense_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16_"
W8="sm90_wgmma_dense_a-e4m3-pt_w-e4m3gc-sf32_c-bf16_"
HUMMING_PROFILE=dev build_filtered "^($B|$W8)"
echo "build done at $(($(date +%s) - start)) s" | log
S=7168x16384,3584x18944,4096x14336,5120x13824,8192x28672
BA="--format e4m3g128n128-sf32 --layout generic --act e4m3-g128 --graph --flush read --iters 30 --weights randn --prequant"
for sk in 1 2; do
  HUMMING_STREAM_K=$sk python3 scripts/time_shapes.py $S 96,128 $BA --instances ${B}t64x128x128_w1x2x1_s8 2>&1 \
    | sed "s/^/blocks sk$sk /" | log
done
python3 scripts/time_shapes.py $S 96,128 $BA 2>&1 | sed "s/^/blocks default /" | log
python3 scripts/time_shapes.py 28672x8192 96,128 --format e4m3gc-sf32 --layout generic --act e4m3-pt --graph --flush read \
  --iters 30 --weights randn --prequant --cublaslt --instances \
  ${W8}t128x128x128_w1x2x1_s6,${W8}t128x192x128_w1x3x1_s4,${W8}t128x192x128_w1x3x1_s5,${W8}t64x128x128_w1x2x1_s8,${W8}t64x192x128_w1x3x1_s6,${W8}t32x128x128_w1x2x1_s8 \
  2>&1 | sed "s/^/wide /" | log
echo "all done at $(($(date +%s) - start)) s" | log
