#!/usr/bin/env bash
# On the lent GPU machine, session 44's calls; logs to $OUT/s44.txt.
# PART=turns (the default): an A/B of the 8-bit activation kernel's issue turns (IssueTurns,
#   backend/sm90/pipeline.h; -DHUMMING_SM90_ISSUE_TURNS=0 never, 2 in every tile with two or more
#   consumer warpgroups that adds a stage's sums with no group of its own in flight), one build
#   directory rebuilt per variant, in the order 0, 2, 0 (the card's drift): FP8 block tiles
#   t192n128s4 / t128n128s5 (7168x16384 and 18432x7168 at m = 4096), the dense W4A8 e2m1 per-channel
#   tiles in layout 4 (8192x8192 and 28672x8192 at m = 64 and 8192; scripts/time_shapes.py, GEMM
#   alone, graph us after a read flush), and the grouped W4A8 MoE (Qwen3-30B-A3B at 64 / 256
#   tokens, scripts/bench_moe.py, gate-up + down). After the turns build: tests/test_gpu.py's
#   per-instance, stream-K, wave and graph tests and tests/test_moe.py's sm90 ones on those
#   instances. (Run at 0137346, reverted in c51295e: the macro and IssueTurns exist only in that
#   tree.)
# PART=wide: the grouped W4A8 tiles' twins (experimental since this session): four consumer
#   warpgroups (256 channels: t8w, t16w, t32w) and the producer thread's lone walk (t8l, t16l, t32l,
#   t64l, t8wl, t16wl, t32wl), which the dispatcher takes as it does the weight-only grouped tiles'
#   (humming.h grouped_tiles_wide, grouped_walk_alone). A dev+experimental build of the grouped
#   e2m1 per-channel W4A8 tiles (layout 4), then scripts/bench_moe.py (e4m3 per-token rows
#   quantized inside each call, gate-up + down): the default choice against the forced narrow warp
#   walk (the choice before these twins), lone, wide and wide-lone, on Qwen3-30B-A3B, Mixtral-8x7B
#   and DeepSeek-V3 at 1 to 1024 tokens ($OUT/moe-wide.json / .md); humming-kernels' W4A8 on
#   Qwen3-30B-A3B and Mixtral-8x7B at 1, 64, 256 and 1024 tokens in the same call (carry .peer;
#   $OUT/moe-wide-jit.json / .md); then tests/test_moe.py's 8-bit activation grouped tests on the
#   build.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s44.txt
TT='^(sm90_wgmma_dense_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16_t(192x128x128_w3x1x1_s4|128x128x128_w2x1x1_s5)$|'
TT+='sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t.*_l4$|sm90_wgmma_moe_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_|'
TT+='generic_dense_a-bf16_w-u4-s)'
B=sm90_wgmma_dense_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16_t
time_turns() { # $1: the variant's name in the log
  python3 scripts/time_shapes.py 7168x16384,18432x7168 4096 --format e4m3g128n128-sf32 --act e4m3-g128 --prequant \
    --graph --flush read --iters 20 --instances ${B}192x128x128_w3x1x1_s4,${B}128x128x128_w2x1x1_s5 2>&1 \
    | sed "s/^/$1 blk /" | log
  python3 scripts/time_shapes.py 8192x8192,28672x8192 64,8192 --format e2m1gc-sbf16 --act e4m3-pt --layout sm90a8 \
    --prequant --graph --flush read --iters 20 --match 'sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc.*_l4$' 2>&1 \
    | sed "s/^/$1 w4a8 /" | log
  python3 scripts/bench_moe.py "$OUT/moe-w4a8-$1.json" --models qwen3-30b-a3b --tokens 64,256 --format e2m1gc-sbf16 \
    --act e4m3-pt --impls humming-aot 2>&1 | grep -E "humming|rror" | sed "s/^/$1 moe /" | log
}
w4a8_grouped_tests() { # $1: profile, $2: instance filter: the build, its instance count, then
  # tests/test_moe.py's grouped 8-bit activation tests (every built W8A8 / W4A8 grouped tile)
  HUMMING_PROFILE=$1 build_filtered "$2"
  echo "build took $(($(date +%s) - start)) s" | log
  python3 -c "import humming_aot.registry as r; print(len(list(r.instances())), 'instances')" 2>&1 | log
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs -k "8bit_activations" 2>&1 | tail -4 \
    | sed "s/^/test_moe /" | log
}
if [ "${PART:-turns}" = turns ]; then
  for v in 0 2 ${AGAIN:-0}; do
    CUDAFLAGS=-DHUMMING_SM90_ISSUE_TURNS=$v HUMMING_PROFILE=dev build_filtered "$TT"
    echo "turns=$v build done at $(($(date +%s) - start)) s" | log
    time_turns "turns$v"
    if [ $v = 2 ]; then
      python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -rfs -k \
        "instance_against or output_rows or block_scaled or split_k or waves or rings or graph" 2>&1 | tail -6 \
        | sed "s/^/test_gpu /" | log
      python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs -k "sm90 or a8 or w4a8" 2>&1 | tail -6 \
        | sed "s/^/test_moe /" | log
    fi
  done
  echo "all done at $(($(date +%s) - start)) s" | log
fi
if [ "${PART:-turns}" = wide ]; then
  w4a8_grouped_tests dev+experimental '^(sm90_wgmma_moe_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16|generic_dense_a-bf16_w-u4-s)'
  python3 scripts/bench_moe.py "$OUT/moe-wide.json" --models "${MODELS:-qwen3-30b-a3b,mixtral-8x7b,deepseek-v3}" \
    --tokens "${TOKENS:-1,8,64,256,1024}" --format e2m1gc-sbf16 --act e4m3-pt \
    --impls humming-aot,humming-aot-warp,humming-aot-lone,humming-aot-wide,humming-aot-wide-lone 2>&1 \
    | grep -E "humming|rror" | sed "s/^/wide /" | log
  echo "aot done at $(($(date +%s) - start)) s" | log
  if [ "${JIT:-1}" = 1 ]; then
    install_peer
    PYTHONPATH=/tmp/peer python3 scripts/bench_moe.py "$OUT/moe-wide-jit.json" --models qwen3-30b-a3b,mixtral-8x7b \
      --tokens "${JIT_TOKENS:-1,64,256,1024}" --format e2m1gc-sbf16 --act e4m3-pt --jit-config w4a8 \
      --impls humming-aot,humming-jit --jit-budget-s 300 2>&1 | grep -E "humming|rror" | sed "s/^/jit /" | log
  fi
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=twins: the GPU tests of every grouped W4A8 tile with its twins (u4 and e2m1, per channel and
#   per 128 inputs, layout 4; dev+experimental: also t8l, t16l, t32l and the experimental t64w,
#   t64wl, t128l), then scripts/bench_moe.py --impls humming-aot,humming-aot-heights (each tile
#   height near the mean rows per expert, with the default's twin rules) on e2m1 per channel where
#   the default took t128 or t64 in PART=wide: Qwen3-30B-A3B at 1024 tokens, Mixtral-8x7B at 256 and
#   1024, DeepSeek-V3 at 1024 ($OUT/moe-heights.json / .md).
if [ "${PART:-turns}" = twins ]; then
  w4a8_grouped_tests dev+experimental '^(sm90_wgmma_moe_a-e4m3-pt_w-(u4|e2m1)(gc|g128)-sbf16_c-bf16|generic_dense_a-bf16_w-u4-s)'
  w4a8_heights heights qwen3-30b-a3b:1024 mixtral-8x7b:256,1024 deepseek-v3:1024
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=w16wide: 256-channel twins of the grouped W4A16 tiles of 24 and 32 rows (t24w, t32w and
#   their lone twins; experimental; t48w and t64w spill 120-228 bytes at the four consumer
#   warpgroups' 96 registers, so they were not built), u4g128 bf16: scripts/bench_moe.py's default
#   choice on a dev build without them, then on a dev+experimental build with them (the dispatcher
#   takes them by grouped_tiles_wide), Qwen3-30B-A3B, Mixtral-8x7B and DeepSeek-V3 at 64, 256 and
#   1024 tokens, with humming-kernels' W4A16 in the second run on the first two models (carry .peer);
#   tests/test_moe.py's grouped sm90 tests on the second build.
if [ "${PART:-turns}" = w16wide ]; then
  F16='^(sm90_wgmma_moe_a-bf16_w-u4g128-sbf16_c-bf16_t|generic_dense_a-bf16_w-u4-s)'
  HUMMING_PROFILE=dev build_filtered "$F16"
  echo "base build took $(($(date +%s) - start)) s" | log
  python3 scripts/bench_moe.py "$OUT/w16-base.json" --models qwen3-30b-a3b,mixtral-8x7b,deepseek-v3 --tokens 64,256,1024 \
    --impls humming-aot 2>&1 | grep -E "humming|rror" | sed "s/^/base /" | log
  HUMMING_PROFILE=dev+experimental build_filtered "$F16"
  echo "wide build done at $(($(date +%s) - start)) s" | log
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs -k "sm90_kernels or masked_on_the_sm90" 2>&1 | tail -4 \
    | sed "s/^/test_moe /" | log
  python3 scripts/bench_moe.py "$OUT/w16-wide.json" --models deepseek-v3 --tokens 64,256,1024 \
    --impls humming-aot 2>&1 | grep -E "humming|rror" | sed "s/^/wide /" | log
  install_peer
  PYTHONPATH=/tmp/peer python3 scripts/bench_moe.py "$OUT/w16-wide-jit.json" --models qwen3-30b-a3b,mixtral-8x7b \
    --tokens 64,256,1024 --impls humming-aot,humming-jit --jit-budget-s 240 2>&1 | grep -E "humming|rror" \
    | sed "s/^/wide /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=final: the GPU tests of the landed grouped tiles: a dev build of every grouped W4A16 u4g128
#   (with and without -zi) and e2m1g32 tile and every grouped W4A8 tile (u4 / e2m1, per channel and
#   g128, layout 4), with this session's twins; tests/test_moe.py's grouped sm90 tests (W4A16 and
#   W4A8 against the reference, the masked layout, graphs).
if [ "${PART:-turns}" = final ]; then
  HUMMING_PROFILE=dev build_filtered \
    '^(sm90_wgmma_moe_a-(bf16_w-(u4g128|e2m1g32)|e4m3-pt_w-(u4|e2m1))|generic_dense_a-bf16_w-u4-s)'
  echo "build took $(($(date +%s) - start)) s" | log
  python3 -c "import humming_aot.registry as r; print(len(list(r.instances())), 'instances')" 2>&1 | log
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs -k "sm90" 2>&1 | tail -6 | sed "s/^/test_moe /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=heights8: grouped W4A8 tiles of 24, 48 and 80 rows (the weight-only grouped heights between
#   the powers of two; experimental), with lone and 256-channel twins (t24w, t48w): a
#   dev+experimental build of the grouped e2m1 per-channel W4A8 tiles, tests/test_moe.py's 8-bit
#   activation grouped tests on them, then scripts/bench_moe.py's default choice and every tile
#   height near the mean (--impls humming-aot,humming-aot-heights) on Qwen3-30B-A3B at 256 / 1024
#   tokens, Mixtral-8x7B at 64 / 256 / 1024 and DeepSeek-V3 at 256 / 1024 ($OUT/moe-h8-*.json).
if [ "${PART:-turns}" = heights8 ]; then
  w4a8_grouped_tests dev+experimental '^(sm90_wgmma_moe_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16|generic_dense_a-bf16_w-u4-s)'
  w4a8_heights h8 qwen3-30b-a3b:256,1024 mixtral-8x7b:64,256,1024 deepseek-v3:256,1024
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=standing: W4A8 MoE on the landed dev tiles against humming-kernels' W4A8 in one run (carry
#   .peer): a dev build of the grouped e2m1 per-channel W4A8 tiles, scripts/bench_moe.py
#   --jit-config w4a8 on Qwen3-30B-A3B and Mixtral-8x7B at 256 and 1024 tokens
#   ($OUT/moe-standing.json / .md).
if [ "${PART:-turns}" = standing ]; then
  HUMMING_PROFILE=dev build_filtered '^(sm90_wgmma_moe_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16|generic_dense_a-bf16_w-u4-s)'
  echo "build took $(($(date +%s) - start)) s" | log
  install_peer
  PYTHONPATH=/tmp/peer python3 scripts/bench_moe.py "$OUT/moe-standing.json" --models qwen3-30b-a3b,mixtral-8x7b \
    --tokens "${TOKENS:-256,1024}" --format e2m1gc-sbf16 --act e4m3-pt --jit-config w4a8 \
    --impls humming-aot,humming-jit --jit-budget-s 150 2>&1 | grep -E "humming|rror" | grep -v "\[jit\]" \
    | sed "s/^/standing /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
