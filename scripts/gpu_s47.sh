#!/usr/bin/env bash
# On the lent GPU machine, session 47's calls; logs to $OUT/s47.txt, everything in $OUT/PART.tgz.
# PART=order (the default): layout 4's spread e2m1 bit order (layout/sm90_a8.h fp4_order;
#   numeric/nibble_lut.h e2m1_a8_to_shifted_e4m3: 5 instructions per 8 codes where the nibble
#   order takes 9), session 46's branch s46-e2m1-a8-order. ORDER_PATCH (default order.patch,
#   untracked: `git diff <tree without it> -- include src`) is taken out for A and put back for B.
#   A is session 46's landed tree: its GPU tests first (tests/test_moe.py permute-quantize, QuantMoE
#   and 8-bit activations; tests/test_gpu.py quantize, per-instance and graph), its build with the
#   u4g128 W4A16 grouped tiles those QuantMoE tests need. Each variant: scripts/bench_moe.py's
#   default choice on Qwen3-30B-A3B and Mixtral-8x7B at 256 and 1024 tokens and DeepSeek-V3 at 1024,
#   and the dense e2m1 layout-4 tiles of 64 and 128 tokens on 8192x8192 and 28672x8192 at m = 64,
#   2048 and 8192. On B the GPU tests of every path that reads layout 4 (tests/test_moe.py 8-bit
#   activations, tests/test_gpu.py per-instance, graph and pack/unpack round trips).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s47.txt
# The grouped e2m1 per-channel W4A8 tiles and the generic fallback every build needs.
A8='sm90_wgmma_moe_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16|generic_dense_a-bf16_w-u4-s'
# The instances both variants of PART=order build: the grouped e2m1 per-channel W4A8 tiles, the
# FP8-block grouped tiles, the dense e2m1 per-channel layout-4 tiles and the generic fallback.
F='sm90_wgmma_moe_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16|sm90_wgmma_moe_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16|sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t.*_l4$|generic_dense_a-bf16_w-u4-s'
order_points() { # $1: the variant
  local mt
  for mt in qwen3-30b-a3b:256,1024 mixtral-8x7b:256,1024 deepseek-v3:1024; do
    python3 scripts/bench_moe.py "$OUT/moe-order-$1-${mt%%:*}.json" --models "${mt%%:*}" --tokens "${mt#*:}" \
      --format e2m1gc-sbf16 --act e4m3-pt --impls humming-aot 2>&1 | grep -E "humming|rror" | sed "s/^/$1 moe /" | log
  done
  python3 scripts/time_shapes.py 8192x8192,28672x8192 64,2048,8192 --format e2m1gc-sbf16 --act e4m3-pt \
    --layout sm90a8 --prequant --graph --flush read --iters 20 \
    --match 'sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t(64|128)x.*_l4$' 2>&1 | sed "s/^/$1 dense /" | log
}
if [ "${PART:-order}" = order ]; then
  OP=${ORDER_PATCH:-order.patch}
  patch -s -R -p1 < "$OP" || exit 1
  HUMMING_PROFILE=dev build_filtered "^($F|sm90_wgmma_moe_a-bf16_w-u4g128-sbf16_c-bf16)"
  echo "A build done at $(($(date +%s) - start)) s" | log
  gpu_tests "A test_moe" test_moe.py "permute or quant_moe or 8bit_activations"
  gpu_tests "A test_gpu" test_gpu.py "quantize or instance_against or graph"
  echo "A tests done at $(($(date +%s) - start)) s" | log
  order_points A
  patch -s -p1 < "$OP" || exit 1
  HUMMING_PROFILE=dev build_filtered "^($F)"
  echo "B build done at $(($(date +%s) - start)) s" | log
  order_points B
  gpu_tests "B test_moe" test_moe.py "8bit_activations"
  gpu_tests "B test_gpu" test_gpu.py "instance_against or graph or pack"
  (cd "$OUT" && tar czf order.tgz moe-order-* s47.txt build.log && rm -f moe-order-*)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=standing (carry .peer): where the W4A8 e2m1 per-channel points stand after the order, in one
#   run with the peers. A dev build of the grouped and dense e2m1 per-channel W4A8 tiles; the
#   dense tiles of 128, 160 and 192 tokens forced on 8192x8192 and 28672x8192 at m = 2048 and 8192
#   (the table's large-m choice is t192); the harness (python -m humming_aot.bench, format w4a8)
#   against cuBLASLt FP8 and humming-kernels 0.1.20 W4A8 on the three headline shapes at m = 1, 64,
#   256 and 8192; scripts/bench_moe.py against humming-kernels' W4A8 MoE on Qwen3-30B-A3B and
#   Mixtral-8x7B at 64, 256 and 1024 tokens. Everything in $OUT/standing.tgz.
if [ "${PART:-order}" = standing ]; then
  HUMMING_PROFILE=dev build_filtered "^(sm90_wgmma_(moe|dense)_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16|generic_dense_a-bf16_w-u4-s)"
  echo "build done at $(($(date +%s) - start)) s" | log
  install_peer
  python3 scripts/time_shapes.py 8192x8192,28672x8192 2048,8192 --format e2m1gc-sbf16 --act e4m3-pt \
    --layout sm90a8 --prequant --graph --flush read --iters 20 \
    --match 'sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t(128|160|192)x.*_l4$' --cublaslt 2>&1 | sed "s/^/tiles /" | log
  w4a8_standing
  (cd "$OUT" && tar czf standing.tgz dense-w4a8* moe-standing-* s47.txt && rm -f moe-standing-* dense-w4a8*)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=sweep: the dense W4A8 tiles of layout 4 (dev+experimental), every tile forced over the shape
#   corpus (scripts/sweep_tiles.py: graph us of the layer with its activation quantization, after a
#   read flush, and the dispatcher's own choice) at m = 1 to 256: e2m1 per channel first (the
#   order's change made its conversion cheaper than u4's, which the table's a8w4 costs lump together),
#   then u4 per channel. For tools/fit_tile_costs.py and tools/table_regret.py. $OUT/sweep.tgz.
if [ "${PART:-order}" = sweep ]; then
  HUMMING_PROFILE=dev+experimental build_filtered "^(sm90_wgmma_dense_a-e4m3-pt_w-(e2m1|u4)gc-sbf16_c-bf16_.*_l4$|generic_dense_a-bf16_w-u4-s)"
  echo "build done at $(($(date +%s) - start)) s" | log
  for f in e2m1gc u4gc; do
    timeout "${SWEEP_S:-220}" python3 scripts/sweep_tiles.py "$OUT/sweep-$f.json" --format $f-sbf16 --act e4m3-pt \
      --layout sm90a8 --match "^sm90_wgmma_dense_a-e4m3-pt_w-$f-sbf16_c-bf16_.*_l4\$" --ms "${SWEEP_MS:-1,8,16,32,64,128,256}" \
      --iters 8 2>&1 | sed "s/^/$f /" | log
    echo "$f done at $(($(date +%s) - start)) s" | log
  done
  (cd "$OUT" && tar czf sweep.tgz sweep-*.json s47.txt)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=warm: the dense W4A8 kernels' weight boxes of each block's first K tiles brought into L2
#   before griddepcontrol.wait (backend/sm90/a8_stage_loads.h warm_weights), while the activations'
#   quantization, whose grid lets the GEMM start early, still runs. WARM_PATCH (default warm.patch,
#   untracked: `git diff <tree without it> -- include`) is taken out for A and put back for B, each
#   a dev build of the dense e2m1 per-channel layout-4 tiles: the layer as QuantLinear runs it
#   (quantization + GEMM, the dispatcher's choice, scripts/time_shapes.py --graph) on five corpus
#   shapes at m = 1 to 2048; on B tests/test_gpu.py's per-instance and graph tests. (Run at
#   75cb804 on branch s47-warm: B slower by 1-2 us at m <= 64, taken out; the change is
#   benchmarks/results/h100/tuning/h100-2026-12-06-s47-warm-weights.patch, for `git apply`.)
if [ "${PART:-order}" = warm ]; then
  WP=${WARM_PATCH:-warm.patch}
  for v in A B; do
    if [ $v = A ]; then patch -s -R -p1 < "$WP" || exit 1; else patch -s -p1 < "$WP" || exit 1; fi
    HUMMING_PROFILE=dev build_filtered "^(sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_.*_l4$|generic_dense_a-bf16_w-u4-s)"
    echo "$v build done at $(($(date +%s) - start)) s" | log
    python3 scripts/time_shapes.py 28672x8192,8192x8192,8192x28672,5120x13824,4096x14336 1,16,64,256,2048 \
      --format e2m1gc-sbf16 --act e4m3-pt --layout sm90a8 --graph --flush read --iters 30 2>&1 | sed "s/^/$v /" | log
  done
  gpu_tests "B test_gpu" test_gpu.py "instance_against or graph"
  (cd "$OUT" && tar czf warm.tgz s47.txt)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=route: top-k and align in one kernel at decode (src/moe_route.cu topk_align_kernel,
#   moe_topk_align_cuda; moe.route, which QuantMoE now routes with). A dev build of the grouped e2m1
#   per-channel W4A8 tiles, the u4g128 W4A16 grouped tiles and the FP8-block grouped tiles (the
#   routing kernels are always built); tests/test_moe.py's routing, QuantMoE and 8-bit activation
#   tests (every QuantMoE layer routes through the new kernel); then scripts/bench_moe.py
#   --routing-parts on the four models at 1 to 256 tokens, W4A8, where each routing point times the
#   one kernel (us) and the two (us_topk_then_align) in the same run, and the whole layer with it.
#   (Run at eecb627 on branch s47-route: tests passed, routing no faster at 1 to 8 tokens and up to
#   2.4x slower from 64; taken out. The change is
#   benchmarks/results/h100/tuning/h100-2026-12-06-s47-topk-align.patch, for `git apply`.)
if [ "${PART:-order}" = route ]; then
  HUMMING_PROFILE=dev build_filtered "^($A8|sm90_wgmma_moe_a-bf16_w-u4g128-sbf16_c-bf16|sm90_wgmma_moe_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16)"
  echo "build done at $(($(date +%s) - start)) s" | log
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rf -k "route or routing or align or quant_moe or 8bit_activations" 2>&1 \
    | grep -E "^FAILED|^E  |passed|failed" | cut -c1-300 | head -40 | sed "s/^/test_moe /" | log
  echo "tests done at $(($(date +%s) - start)) s" | log
  for mt in qwen3-30b-a3b deepseek-v3 mixtral-8x7b gpt-oss-120b; do
    timeout 60 python3 scripts/bench_moe.py "$OUT/moe-route-$mt.json" --models "$mt" --tokens 1,8,64,256 --routing-parts \
      --format e2m1gc-sbf16 --act e4m3-pt --impls humming-aot 2>&1 | grep -E "humming|routing|rror" | sed "s/^/route /" | log
  done
  (cd "$OUT" && tar czf route.tgz moe-route-* s47.txt && rm -f moe-route-*)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=final: the landed tree's GPU tests (the e2m1 layout-4 order of call 1 and the tile costs'
#   batch read where later name parts follow it): a dev build of the dense and grouped e2m1
#   per-channel W4A8 tiles, the u4 per-channel dense layout-4 tiles and the u4g128 W4A16 grouped
#   tiles; tests/test_gpu.py's per-instance, graph and dispatch tests, tests/test_moe.py's QuantMoE,
#   permute-quantize and 8-bit activation tests; then the layer as QuantLinear runs it (the
#   dispatcher's choice, which the batch read may change at m = 16 to 64) on three shapes.
if [ "${PART:-order}" = final ]; then
  HUMMING_PROFILE=dev build_filtered "^($A8|sm90_wgmma_dense_a-e4m3-pt_w-(e2m1|u4)gc-sbf16_c-bf16_.*_l4$|sm90_wgmma_moe_a-bf16_w-u4g128-sbf16_c-bf16)"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests "test_gpu" test_gpu.py "instance_against or graph or dispatch"
  gpu_tests "test_moe" test_moe.py "quant_moe or permute or 8bit_activations"
  echo "tests done at $(($(date +%s) - start)) s" | log
  python3 scripts/time_shapes.py 28672x8192,8192x8192,4608x3584 1,16,32,64 --format e2m1gc-sbf16 --act e4m3-pt \
    --layout sm90a8 --graph --flush read --iters 30 2>&1 | sed "s/^/layer /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
