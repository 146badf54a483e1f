#!/usr/bin/env bash
# On the lent GPU machine, session 50's calls; logs to $OUT/s50.txt.
# PART=ab (the default): QuantLinear's quantize-and-GEMM call with the GEMM copying its first
#   stages' weights before it waits for the quantize kernel (GemmArgs::early_weights) and the
#   quantize kernels chained (backend/pdl.h), A/B: A without EARLY_PATCH (default early.patch,
#   untracked: `git diff main -- include src` of the change), B with it, each built with the same
#   instances (POINTS). On each: the layer (activation quantization + GEMM, graph, read flush) of
#   W4A8 e2m1 per channel on five corpus shapes at m = 1 to 256, of W8A8 e4m3 per channel and
#   W4A8 u4g128 on three; the GEMM alone (--prequant, which the change leaves waiting as before:
#   the code the compiler made around it is all that differs) at m = 1, 16 and 2048.
# PART=one (carry .peer; for a session that may get one call): A built with POINTS and its layer
#   points, B built with ALL, its points, the GPU tests, and where under 400 s have gone, the
#   standing at m = 1 and 16.
# PART=bc (after PART=one, whose layer times moved in eager mode but mostly not in graphs): B built
#   with POINTS; the layer in graphs as QuantLinear's one call runs it (B: early weights) and through
#   the two torch ops (HUMMING_EAGER_OPS=1, C: the same quantize kernel, the GEMM waiting first), in
#   turn, twice, 60 replays each.
# PART=final (carry .peer): B built with every instance the GPU tests need, the tests, then the
#   dense W4A8 e2m1 standing in one run with the peers (m = 1 to 256, as session 49's).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s50.txt
S5=28672x8192,8192x8192,8192x28672,5120x13824,4096x14336
S3=28672x8192,8192x8192,5120x13824
RUN="--graph --flush read --iters 30"
A8="--format e2m1gc-sbf16 --act e4m3-pt --layout sm90a8 $RUN"
POINTS="^(sm90_wgmma_dense_a-e4m3-pt_w-(e2m1gc-sbf16_c-bf16_.*_l4|e4m3gc-sf32_c-bf16_.*|u4g128-sbf16_c-bf16_.*_l4)$|generic_dense_a-bf16_w-u4-s)"
ALL="^(sm90_wgmma_dense_a-e4m3-pt_|sm90_wgmma_(dense|moe)_.*_l4(_lone)?$|sm90_wgmma_(dense|moe)_a-bf16_w-u4g128-sbf16_c-bf16_|generic_dense_a-bf16_w-u4-s)"
# layer_points V: the layer timings of variant V.
layer_points() {
  python3 scripts/time_shapes.py $S5 1,16,64,256 $A8 2>&1 | sed "s/^/$1 layer w4a8 /" | log
  python3 scripts/time_shapes.py $S3 1,16 --format e4m3gc-sf32 --act e4m3-pt $RUN 2>&1 | sed "s/^/$1 layer w8a8 /" | log
}
# points V: PART=ab's timings of variant V.
points() {
  python3 scripts/time_shapes.py $S5 1,16,64,256 $A8 2>&1 | sed "s/^/$1 layer w4a8 /" | log
  python3 scripts/time_shapes.py $S3 1,16 --format e4m3gc-sf32 --act e4m3-pt $RUN 2>&1 | sed "s/^/$1 layer w8a8 /" | log
  python3 scripts/time_shapes.py $S3 1,16 --format u4g128-sbf16 --act e4m3-pt --layout sm90a8 $RUN 2>&1 \
    | sed "s/^/$1 layer w4a8-u4g128 /" | log
  python3 scripts/time_shapes.py 28672x8192,8192x8192,4096x14336 1,16,2048 $A8 --prequant 2>&1 \
    | sed "s/^/$1 gemm w4a8 /" | log
}
if [ "${PART:-ab}" = ab ]; then
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
  EP=${EARLY_PATCH:-early.patch}
  for v in A B; do
    if [ $v = A ]; then patch -s -R -p1 < "$EP" || exit 1; else patch -s -p1 < "$EP" || exit 1; fi
    HUMMING_PROFILE=dev build_filtered "$POINTS"
    echo "$v build done at $(($(date +%s) - start)) s" | log
    points $v
    echo "$v points done at $(($(date +%s) - start)) s" | log
  done
  echo "all done at $(($(date +%s) - start)) s" | log
fi
if [ "${PART:-ab}" = one ]; then
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
  EP=${EARLY_PATCH:-early.patch}
  patch -s -R -p1 < "$EP" || exit 1
  HUMMING_PROFILE=dev build_filtered "$POINTS"
  echo "A build done at $(($(date +%s) - start)) s" | log
  layer_points A
  python3 scripts/time_shapes.py 28672x8192,8192x8192 1,2048 $A8 --prequant 2>&1 | sed "s/^/A gemm w4a8 /" | log
  echo "A points done at $(($(date +%s) - start)) s" | log
  patch -s -p1 < "$EP" || exit 1
  HUMMING_PROFILE=dev build_filtered "$ALL"
  echo "B build done at $(($(date +%s) - start)) s" | log
  layer_points B
  python3 scripts/time_shapes.py 28672x8192,8192x8192 1,2048 $A8 --prequant 2>&1 | sed "s/^/B gemm w4a8 /" | log
  echo "B points done at $(($(date +%s) - start)) s" | log
  gpu_tests "B test_gpu" test_gpu.py \
    "instance_against or split_k or graph or pack or dispatch or w8a8_layer or quantize_and_gemm or quantize_act or generic_layout"
  gpu_tests "B test_moe" test_moe.py "quant_moe or permute or 8bit_activations"
  echo "tests done at $(($(date +%s) - start)) s" | log
  if [ $(($(date +%s) - start)) -lt 400 ]; then
    install_peer
    PYTHONPATH=/tmp/peer python3 -m humming_aot.bench --shapes 28672x8192,8192x8192,8192x28672 --ms 1,16 \
      --formats w4a8 --impls humming-aot,cublaslt-fp8,humming-jit --jit-formats w4a8 --out-dir "$OUT" \
      --name dense-w4a8 --no-plot --time-budget-s 100 2>&1 | tail -40 | sed "s/^/dense /" | log
  fi
  echo "all done at $(($(date +%s) - start)) s" | log
fi
if [ "${PART:-ab}" = bc ]; then
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
  HUMMING_PROFILE=dev build_filtered "$POINTS"
  echo "build done at $(($(date +%s) - start)) s" | log
  for r in 1 2; do
    for v in B C; do
      HUMMING_EAGER_OPS=$([ $v = C ] && echo 1 || echo 0) python3 scripts/time_shapes.py ${BC_SHAPES:-$S5} ${BC_MS:-1,16,64,256} \
        --format e2m1gc-sbf16 --act e4m3-pt --layout sm90a8 --graph --flush read --iters 60 2>&1 \
        | sed "s/^/$v$r layer w4a8 /" | log
    done
  done
  echo "all done at $(($(date +%s) - start)) s" | log
fi
if [ "${PART:-ab}" = final ]; then
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
  HUMMING_PROFILE=dev build_filtered "$ALL"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests "test_gpu" test_gpu.py \
    "instance_against or split_k or graph or pack or dispatch or w8a8_layer or quantize_and_gemm or quantize_act or generic_layout"
  gpu_tests "test_moe" test_moe.py "quant_moe or permute or 8bit_activations"
  echo "tests done at $(($(date +%s) - start)) s" | log
  install_peer
  PYTHONPATH=/tmp/peer python3 -m humming_aot.bench --shapes 28672x8192,8192x8192,8192x28672 --ms 1,16,64,256 \
    --formats w4a8 --impls humming-aot,cublaslt-fp8,humming-jit --jit-formats w4a8 --out-dir "$OUT" \
    --name dense-w4a8 --no-plot --time-budget-s 150 2>&1 | tail -40 | sed "s/^/dense /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
