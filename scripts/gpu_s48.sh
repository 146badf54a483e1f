#!/usr/bin/env bash
# On the lent GPU machine, session 48's calls; logs to $OUT/s48.txt, everything in $OUT/PART.tgz.
# PART=stream (the default): where the W4A8 decode pace stands against the weight stream's own
#   floor. scripts/mbench_rows.cu first (no build: the stage boxes of 4-bit codes read by TMA, in
#   the generic row order of layout 4 and in two block orders), then a dev build of the dense e2m1
#   per-channel layout-4 tiles: the GEMM alone (--prequant) and the layer (quantization + GEMM) at
#   m = 1, 16 and 64 on the shapes the stream bench reads.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s48.txt
if [ "${PART:-stream}" = stream ]; then
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
  nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 -I include scripts/mbench_rows.cu -o /tmp/mr && /tmp/mr 2>&1 \
    | sed "s/^/stream /" | log
  echo "stream done at $(($(date +%s) - start)) s" | log
  HUMMING_PROFILE=dev build_filtered "^(sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_.*_l4$|generic_dense_a-bf16_w-u4-s)"
  echo "build done at $(($(date +%s) - start)) s" | log
  python3 scripts/time_shapes.py 28672x8192,8192x8192,8192x28672,57344x8192 1,16,64 --format e2m1gc-sbf16 --act e4m3-pt \
    --layout sm90a8 --prequant --graph --flush read --iters 30 2>&1 | sed "s/^/gemm /" | log
  python3 scripts/time_shapes.py 28672x8192,8192x8192,8192x28672,57344x8192 1,16,64 --format e2m1gc-sbf16 --act e4m3-pt \
    --layout sm90a8 --graph --flush read --iters 30 2>&1 | sed "s/^/layer /" | log
  (cd "$OUT" && tar czf stream.tgz s48.txt)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
