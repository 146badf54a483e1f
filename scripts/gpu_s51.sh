#!/usr/bin/env bash
# On the lent GPU machine, session 51's calls; logs to $OUT/s51.txt.
# PART=one (carry .peer): every instance the GPU tests need (session 50's ALL), the tests on main
#   (session 50's host-code move had not run on a GPU), then whether programmatic launches overlap
#   inside CUDA graphs as they do eagerly: W4A8 e2m1 per channel, m = 1, the layer (quantize + GEMM,
#   GemmArgs::early_weights) and the GEMM alone, eager and graph, HUMMING_PDL 0 and 1, alone and
#   after a sleep kernel (time_shapes.py --lead: the pair less the sleep, as a model's previous
#   kernel precedes a layer); then the dense W4A8 standing with the peers (m = 1 to 256).
# PART=moe (carry .peer; EARLY_PATCH, default moe-early.patch, untracked): the grouped kernels'
#   early weights A/B: A without the patch, B with it, each built with the grouped and dense
#   layout-4 tiles; bench_moe's layer and GEMMs at 1 / 8 / 64 tokens, the GPU tests on B.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s51.txt
ALL="^(sm90_wgmma_dense_a-e4m3-pt_|sm90_wgmma_(dense|moe)_.*_l4(_lone)?$|sm90_wgmma_(dense|moe)_a-bf16_w-u4g128-sbf16_c-bf16_|generic_dense_a-bf16_w-u4-s)"
A8="--format e2m1gc-sbf16 --act e4m3-pt --layout sm90a8 --graph --flush read --iters 30"
TESTS_GPU="instance_against or split_k or graph or pack or dispatch or w8a8_layer or quantize_and_gemm or quantize_act or generic_layout"
TESTS_MOE="quant_moe or permute or 8bit_activations"
# overlap TAG: PART=one's programmatic-launch points.
overlap() {
  for pdl in 1 0; do
    for lead in 0 40000; do
      for what in layer gemm; do
        HUMMING_PDL=$pdl python3 scripts/time_shapes.py 8192x8192,28672x8192 1 $A8 --lead $lead \
          $([ $what = gemm ] && echo --prequant) 2>&1 | sed "s/^/$1 pdl$pdl lead$lead $what /" | log
      done
    done
  done
}
if [ "${PART:-one}" = one ]; then
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
  HUMMING_PROFILE=dev build_filtered "$ALL"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests "test_gpu" test_gpu.py "$TESTS_GPU"
  gpu_tests "test_moe" test_moe.py "$TESTS_MOE"
  echo "tests done at $(($(date +%s) - start)) s" | log
  overlap main
  echo "overlap done at $(($(date +%s) - start)) s" | log
  install_peer
  PYTHONPATH=/tmp/peer python3 -m humming_aot.bench --shapes 28672x8192,8192x8192,8192x28672 --ms 1,16,64,256 \
    --formats w4a8 --impls humming-aot,cublaslt-fp8,humming-jit --jit-formats w4a8 --out-dir "$OUT" \
    --name dense-w4a8 --no-plot --time-budget-s 120 2>&1 | tail -40 | sed "s/^/dense /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
