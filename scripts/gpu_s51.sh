#!/usr/bin/env bash
# On the lent GPU machine, session 51's calls; logs to $OUT/s51.txt.
# PART=one (carry .peer): every instance the GPU tests need (session 50's ALL), the tests on main
#   (session 50's host-code move had not run on a GPU), then whether programmatic launches overlap
#   inside CUDA graphs as they do eagerly: W4A8 e2m1 per channel, m = 1, the layer (quantize + GEMM,
#   GemmArgs::early_weights) and the GEMM alone, eager and graph, HUMMING_PDL 0 and 1, alone and
#   after a sleep kernel (time_shapes.py --lead: the pair less the sleep, as a model's previous
#   kernel precedes a layer); then the dense W4A8 standing with the peers (m = 1 to 256).
# PART=moe (EARLY_PATCH, default moe-early.patch, untracked: `git diff` of the change, applied in
#   the tree carried; the change measured slower and stays on branch s51-moe-early, its diff in
#   benchmarks/results/h100/tuning/h100-2026-12-06-s51-moe-early.patch): the grouped kernels' early weights A/B. B (the tree) built with ALL: the GPU
#   tests (with the new early-weights test), bench_moe (W4A8 e2m1 per channel, graph us) on
#   Qwen3-30B-A3B and Mixtral-8x7B at 1 / 8 / 64 tokens, PART=one's overlap points. A (main: the
#   patch taken out) built with the e2m1 per-channel dense and grouped layout-4 tiles: the same MoE
#   points and the layer at m = 1 after nothing and after a sleep.
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
# moe_points V: PART=moe's MoE timings of variant V.
moe_points() {
  python3 scripts/bench_moe.py "$OUT/moe-$1.json" --models qwen3-30b-a3b,mixtral-8x7b --tokens 1,8,64 \
    --format e2m1gc-sbf16 --act e4m3-pt --impls humming-aot 2>&1 | grep -E "humming|rror" | sed "s/^/$1 moe /" | log
}
if [ "${PART:-one}" = moe ]; then
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
  EP=${EARLY_PATCH:-moe-early.patch}
  # B first (the tree as carried), so that its tests run whatever time is left for A.
  HUMMING_PROFILE=dev build_filtered "$ALL"
  echo "B build done at $(($(date +%s) - start)) s" | log
  gpu_tests "B test_moe" test_moe.py "$TESTS_MOE or early_weights"
  gpu_tests "B test_gpu" test_gpu.py "$TESTS_GPU"
  echo "B tests done at $(($(date +%s) - start)) s" | log
  moe_points B
  echo "B moe done at $(($(date +%s) - start)) s" | log
  for pdl in 1 0; do
    for lead in 0 40000; do
      HUMMING_PDL=$pdl python3 scripts/time_shapes.py 8192x8192,28672x8192 1 $A8 --lead $lead 2>&1 \
        | sed "s/^/B pdl$pdl lead$lead layer /" | log
    done
  done
  python3 scripts/time_shapes.py 8192x8192,28672x8192 1 $A8 --prequant 2>&1 | sed "s/^/B pdl1 lead0 gemm /" | log
  echo "B overlap done at $(($(date +%s) - start)) s" | log
  patch -s -R -p1 < "$EP" || exit 1
  HUMMING_PROFILE=dev build_filtered "^sm90_wgmma_(dense|moe)_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_.*_l4(_lone)?$"
  echo "A build done at $(($(date +%s) - start)) s" | log
  moe_points A
  echo "A moe done at $(($(date +%s) - start)) s" | log
  for lead in 0 40000; do
    python3 scripts/time_shapes.py 8192x8192,28672x8192 1 $A8 --lead $lead 2>&1 | sed "s/^/A pdl1 lead$lead layer /" | log
  done
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=mini (for a call of about 300 s; EARLY_PATCH as PART=moe): B (the tree) built with the e2m1
#   per-channel dense and grouped layout-4 tiles: the GPU tests that reach them, the MoE points on
#   Qwen3-30B-A3B (1 / 8 / 64 tokens), the layer at m = 1 with programmatic launches on and off;
#   then A (main) on the same instances: the same MoE points.
if [ "${PART:-one}" = mini ]; then
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
  EP=${EARLY_PATCH:-moe-early.patch}
  E2M1="^sm90_wgmma_(dense|moe)_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_.*_l4(_lone)?$"
  HUMMING_PROFILE=dev build_filtered "$E2M1"
  echo "B build done at $(($(date +%s) - start)) s" | log
  gpu_tests "B test_moe" test_moe.py "$TESTS_MOE or early_weights"
  gpu_tests "B test_gpu" test_gpu.py "instance_against or graph or quantize_and_gemm or quantize_act"
  echo "B tests done at $(($(date +%s) - start)) s" | log
  moe_qwen() {
    python3 scripts/bench_moe.py "$OUT/moe-$1.json" --models qwen3-30b-a3b --tokens 1,8,64 --format e2m1gc-sbf16 \
      --act e4m3-pt --impls humming-aot 2>&1 | grep -E "humming|rror" | sed "s/^/$1 moe /" | log
  }
  moe_qwen B
  for pdl in 1 0; do
    HUMMING_PDL=$pdl python3 scripts/time_shapes.py 8192x8192,28672x8192 1 $A8 2>&1 | sed "s/^/B pdl$pdl layer /" | log
  done
  echo "B done at $(($(date +%s) - start)) s" | log
  patch -s -R -p1 < "$EP" || exit 1
  HUMMING_PROFILE=dev build_filtered "$E2M1"
  echo "A build done at $(($(date +%s) - start)) s" | log
  moe_qwen A
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=scratch (a call of about 300 s): graphs' own stream-K scratch (src/torch/ops.cpp,
#   GraphScratch, HUMMING_GRAPH_SCRATCH=1), built with the W4A16 u4g128 and W4A8 e2m1 per-channel
#   dense tiles: the GPU tests of graphs and stream-K (the new test runs both modes), then the W4A8
#   layer (quantize + GEMM) at m = 1 and 16 after nothing and after a sleep, and the W4A16 layer
#   after a sleep, with HUMMING_GRAPH_SCRATCH 0 and 1 in turn, twice.
# PART=scratch uses FILTER (default: the W4A16 u4g128 and W4A8 e2m1 per-channel dense tiles) and
#   runs TESTS (default: graph, stream-K and quantize-and-GEMM tests); with STANDING=1 (carry .peer)
#   it ends with the dense W4A8 standing with the peers. For the next session's first call, with
#   everything the GPU tests need (ALL): FILTER=all TESTS=all STANDING=1 PART=scratch (about 550 s;
#   LEADS=40000 STANDING=0 keeps it near 400 s, and the standing can follow on the warm machine).
if [ "${PART:-one}" = scratch ]; then
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
  F="${FILTER:-^(sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_|sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_.*_l4$|generic_dense_a-bf16_w-u4-s)}"
  [ "$F" = all ] && F="$ALL"
  HUMMING_PROFILE=dev build_filtered "$F"
  echo "build done at $(($(date +%s) - start)) s" | log
  if [ "${TESTS:-}" = all ]; then
    gpu_tests "test_gpu" test_gpu.py "$TESTS_GPU or graphs_keep"
    gpu_tests "test_moe" test_moe.py "$TESTS_MOE"
  else
    gpu_tests "test_gpu" test_gpu.py "graph or split_k or quantize_and_gemm or stream"
  fi
  echo "tests done at $(($(date +%s) - start)) s" | log
  # HUMMING_GRAPH_SCRATCH is read at each captured launch: 0 (the graph's pool and a replayed fill)
  # against 1 (the graph's own buffer), twice, on one build.
  for r in 1 2; do
    for own in 0 1; do
      for lead in ${LEADS:-0 40000}; do
        HUMMING_GRAPH_SCRATCH=$own python3 scripts/time_shapes.py 8192x8192,28672x8192,5120x13824 1,16 $A8 \
          --lead $lead 2>&1 | sed "s/^/own$own r$r lead$lead w4a8 layer /" | log
      done
      HUMMING_GRAPH_SCRATCH=$own python3 scripts/time_shapes.py 8192x8192,5120x13824 1,16 --format u4g128-sbf16 \
        --graph --flush read --iters 30 --lead 40000 2>&1 | sed "s/^/own$own r$r lead40000 w4a16 /" | log
    done
  done
  if [ "${STANDING:-0}" = 1 ]; then
    install_peer
    PYTHONPATH=/tmp/peer python3 -m humming_aot.bench --shapes 28672x8192,8192x8192,8192x28672 --ms 1,16,64,256 \
      --formats w4a8 --impls humming-aot,cublaslt-fp8,humming-jit --jit-formats w4a8 --out-dir "$OUT" \
      --name dense-w4a8 --no-plot --time-budget-s 120 2>&1 | tail -40 | sed "s/^/dense /" | log
  fi
  echo "all done at $(($(date +%s) - start)) s" | log
fi
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
