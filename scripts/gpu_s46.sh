#!/usr/bin/env bash
# On the lent GPU machine, session 46's calls; logs to $OUT/s46.txt, everything in $OUT/PART.tgz.
# PART=held (the default): the grouped W4A8 tiles of 128 channels per consumer warpgroup, whose
#   sums the tensor cores hold for the whole K (DenseA8 WgChannels 128, kHeldSums;
#   tools/matrix/sm90_a8_moe.json t48d / t64d / t80d and their lone twins). A: a dev build of the
#   grouped e2m1 per-channel W4A8 tiles without them; B: with them (the default choice then takes
#   them as the wide twins of heights 48, 64 and 80), plus the u4 per-channel ones and one dense
#   W4A8 tile of each format for scripts/a8_error.py. Each: scripts/bench_moe.py's default choice
#   (moe_points). On B: tests/test_moe.py's 8-bit activation grouped tests, then scripts/a8_error.py
#   on the held tiles against the windowed ones of the same heights (one expert of all the rows).
#   (Run at 58a38b4, the only tree with those tiles: slower or equal, and less exact over long K;
#   taken out in the next commit, benchmarks/results/h100/tuning/h100-2026-12-06-s46-README.md.)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s46.txt
# The grouped e2m1 per-channel W4A8 tiles (and the generic fallback every build needs).
A8='sm90_wgmma_moe_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16|generic_dense_a-bf16_w-u4-s'
HELD='x256x128_w1x2x1'
# moe_points TAG: the default choice on the MoE points of the grouped W4A8 tiles' A/B.
moe_points() {
  local mt
  for mt in qwen3-30b-a3b:64,256,1024 mixtral-8x7b:256,1024 deepseek-v3:256,1024 gpt-oss-120b:1024; do
    python3 scripts/bench_moe.py "$OUT/moe-$1-${mt%%:*}.json" --models "${mt%%:*}" --tokens "${mt#*:}" \
      --format e2m1gc-sbf16 --act e4m3-pt --impls humming-aot 2>&1 | grep -E "humming|rror" | sed "s/^/$1 /" | log
  done
}
if [ "${PART:-held}" = held ]; then
  HUMMING_PROFILE=dev build_filtered "^(?!.*$HELD)($A8)"
  echo "A build done at $(($(date +%s) - start)) s" | log
  moe_points A
  HUMMING_PROFILE=dev build_filtered \
    "^($A8|sm90_wgmma_moe_a-e4m3-pt_w-u4gc-sbf16_c-bf16_t\d+$HELD|sm90_wgmma_dense_a-e4m3-pt_w-(e2m1|u4)gc-sbf16_c-bf16_t64x128x128_w1x2x1_s8_l4$)"
  echo "B build done at $(($(date +%s) - start)) s" | log
  grep -E "ptxas.*(spill|stack)" "$OUT/build.log" | sort | uniq -c | head -5 | log
  moe_points B
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs -k "8bit_activations" 2>&1 | tail -3 \
    | sed "s/^/test_moe /" | log
  python3 scripts/a8_error.py 4096 2048 512 --ks 2048,8192,28672 --formats e2m1gc-sbf16,u4gc-sbf16 \
    --moe '_t(64|80)x(128|256)x128_w1x2x1_s\d_l4$' 2>&1 | sed "s/^/error /" | log
  (cd "$OUT" && tar czf held.tgz moe-* s46.txt && rm -f moe-*)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# fuse_build: the dev build of PART=fuse, fuse2 and final: the grouped e2m1 per-channel W4A8 tiles
#   and the FP8-block grouped tiles.
fuse_build() {
  HUMMING_PROFILE=dev build_filtered "^($A8|sm90_wgmma_moe_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16)"
  echo "build done at $(($(date +%s) - start)) s" | log
}
# PART=fuse: moe_permute_quantize (src/quantize_act.cu: the quantize kernels read the rows through
#   the alignment; QuantMoE quantizes the gate-up GEMM's rows as it gathers them). A dev build of the
#   grouped e2m1 per-channel W4A8 tiles and the FP8-block grouped tiles; tests/test_moe.py's
#   permute-quantize, QuantMoE and 8-bit activation grouped tests and tests/test_gpu.py's quantize
#   tests; scripts/bench_permute_quantize.py (permute then quantize_act against the one pass, e4m3
#   per token on the four models, e4m3-g128 on DeepSeek-V3); scripts/bench_quantize_act.py on
#   session 45's shapes (the plain quantization, whose kernels now read through a gather); and
#   scripts/bench_moe.py's W4A8 points with the whole layer as QuantMoE runs it (layer_us).
if [ "${PART:-held}" = fuse ]; then
  fuse_build
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs -k "permute or quant_moe or 8bit_activations" 2>&1 \
    | tail -4 | sed "s/^/test_moe /" | log
  python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -rfs -k "quantize" 2>&1 | tail -2 | sed "s/^/test_gpu /" | log
  python3 scripts/bench_permute_quantize.py "$OUT/permute-quantize-pt.json" 2>&1 | sed "s/^/pq /" | log
  python3 scripts/bench_permute_quantize.py "$OUT/permute-quantize-g128.json" --models deepseek-v3 --act e4m3-g128 \
    2>&1 | sed "s/^/pq /" | log
  python3 scripts/bench_quantize_act.py --out "$OUT/quant.json" --impls humming-aot --formats e4m3-pt,e4m3-g128,i8-pt \
    --shapes 1024x768,1024x2048,8192x768,8192x2048,8192x4096,8192x8192,8192x28672 2>&1 | cut -c1-200 \
    | sed "s/^/quant /" | log
  for mt in qwen3-30b-a3b:64,256,1024 mixtral-8x7b:64,256,1024; do
    python3 scripts/bench_moe.py "$OUT/moe-fuse-${mt%%:*}.json" --models "${mt%%:*}" --tokens "${mt#*:}" \
      --format e2m1gc-sbf16 --act e4m3-pt --impls humming-aot 2>&1 | grep -E "humming|rror" | sed "s/^/moe /" | log
  done
  (cd "$OUT" && tar czf fuse.tgz permute-quantize-* quant.json moe-* s46.txt && rm -f moe-*)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=fuse2: PART=fuse's build again; tests/test_moe.py's permute-quantize, activate-quantize,
#   QuantMoE and 8-bit activation tests with the failures' messages (PART=fuse had two, not shown),
#   tests/test_gpu.py's quantize tests; then scripts/bench_moe.py's W4A8 layer as QuantMoE ran it at
#   4b9a0fa (the gate-up rows from moe.permute_quantize, the down GEMM's from
#   moe.activate_quantize, a one-pass activation and quantization that existed only in that tree:
#   slower, taken out in the next commit) against both steps in two passes and against the
#   gather's one pass only, in the same run, on the four models at 64, 256 and 1024 tokens. Since
#   then bench_moe.py times the layer with the gather's one pass (layer_us) and with two passes
#   (layer_two_pass_us).
if [ "${PART:-held}" = fuse2 ]; then
  fuse_build
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rf -k "${TESTS:-permute or activate or quant_moe or 8bit_activations}" \
    2>&1 | grep -E "^(FAILED|E  )|passed|failed" | cut -c1-400 | head -60 | sed "s/^/test_moe /" | log
  python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -rf -k "quantize" 2>&1 | tail -2 | sed "s/^/test_gpu /" | log
  for mt in qwen3-30b-a3b mixtral-8x7b gpt-oss-120b deepseek-v3; do
    python3 scripts/bench_moe.py "$OUT/moe-layer-$mt.json" --models "$mt" --tokens 64,256,1024 \
      --format e2m1gc-sbf16 --act e4m3-pt --impls humming-aot 2>&1 | grep -E "humming|rror" | sed "s/^/moe /" | log
  done
  (cd "$OUT" && tar czf fuse2.tgz moe-* s46.txt && rm -f moe-*)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=final: the landed tree's GPU tests on PART=fuse's build: tests/test_moe.py's permute-quantize,
#   QuantMoE and 8-bit activation tests and tests/test_gpu.py's quantize, per-instance and graph
#   tests. (Not run in session 46: its device time ran out; the next session can run it first.)
if [ "${PART:-held}" = final ]; then
  fuse_build
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rf -k "permute or quant_moe or 8bit_activations" 2>&1 \
    | grep -E "^FAILED|passed|failed" | cut -c1-300 | sed "s/^/test_moe /" | log
  python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -rf -k "quantize or instance_against or graph" 2>&1 \
    | grep -E "^FAILED|passed|failed" | cut -c1-300 | sed "s/^/test_gpu /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
