#!/usr/bin/env bash
# On the lent GPU machine, session 56's call; logs to $OUT/s56.txt, ncu reports to $OUT/ncu_*.txt.
#   1. a dev build of the dense W4A8 e2m1 per-channel and u4g128 tiles, the W8A8 e4m3 per-channel
#      ones and the W4A16 u4g128 ones (those the graph tests take);
#   2. their GPU tests (rows in step, now the default, and grouped; heavy tiles spread over K; every
#      instance against the reference; dispatch; graphs and their stream-K scratch; split K; streams);
#   3. the per-channel W8A8 dispatcher's choices on five deep layers at m = 96, 128 and 256 with
#      cuBLASLt FP8 beside, rows in step (the default) and grouped (HUMMING_LOCKSTEP_ROWS=0);
#   4. ncu of the W8A8 t128 against cuBLASLt FP8 where cuBLASLt is 1.15-1.3x faster (H100, session
#      56): 7168 x 16384 at m = 128 and 4096 x 14336 at m = 256.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s56.txt
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
W4="sm90_wgmma_dense_a-e4m3-pt_w-(e2m1gc|u4g128)-sbf16_c-bf16_"
W8="sm90_wgmma_dense_a-e4m3-pt_w-e4m3gc-sf32_c-bf16_"
A8="--act e4m3-pt --graph --flush read --iters 30 --weights randn"
STEP=7168x16384,3584x18944,4096x14336,5120x13824,8192x28672
HUMMING_PROFILE=dev build_filtered "^($W4|$W8|sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_)"
echo "build done at $(($(date +%s) - start)) s" | log
gpu_tests test_gpu test_gpu.py "in_step or heavy or instance_against or dispatch or graph or split_k or stream or scratch"
echo "tests done at $(($(date +%s) - start)) s" | log
python3 scripts/time_shapes.py $STEP 96,128,256 --format e4m3gc-sf32 --layout generic $A8 --cublaslt 2>&1 \
  | sed "s/^/w8a8 default /" | log
HUMMING_LOCKSTEP_ROWS=0 python3 scripts/time_shapes.py $STEP 96,128,256 --format e4m3gc-sf32 --layout generic $A8 2>&1 \
  | sed "s/^/w8a8 grouped /" | log
echo "timing done at $(($(date +%s) - start)) s" | log
NCU="--launch-skip 2 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section LaunchStats --section Occupancy"
for nkm in "7168 16384 128" "4096 14336 256"; do
  set -- $nkm
  timeout 120 ncu --kernel-name regex:dense_kernel $NCU python3 scripts/profile_one.py $1 $2 $3 e4m3gc-sf32 generic e4m3-pt \
    ${W8}t128x128x128_w1x2x1_s6 > "$OUT/ncu_w8a8_t128_${1}x${2}_m$3.txt" 2>&1
  timeout 120 ncu --kernel-name regex:"gemm|sm90|cutlass|xmma" $NCU python3 scripts/profile_scaled_mm.py $1 $2 $3 \
    > "$OUT/ncu_cublaslt_${1}x${2}_m$3.txt" 2>&1
  for f in "$OUT/ncu_w8a8_t128_${1}x${2}_m$3.txt" "$OUT/ncu_cublaslt_${1}x${2}_m$3.txt"; do
    grep -E "^  [a-z_].*\(|Duration|DRAM Throughput|Memory Throughput|L2 Hit|Compute \(SM\)|Grid Size|Block Size|Registers|Cluster|Issue Slots Busy|No Eligible|Shared Memory Configuration Size" "$f" \
      | head -24 | sed "s|^|$(basename "$f" .txt) |" | log
  done
done
echo "all done at $(($(date +%s) - start)) s" | log
