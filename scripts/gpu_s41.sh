#!/usr/bin/env bash
# On the lent GPU machine, session 41's calls; logs to $OUT/s41.txt.
# PART=a (the default): one build (dev+experimental) of the grouped sm90 kernels with 8-bit
#   activations (tools/matrix/sm90_a8_moe.json: FP8 blocks and per-channel FP8), the dense ones of
#   the same formats (the per-expert loop they are timed against), the grouped weight-only u4g128
#   bf16 tiles (their kernel's walk and notes moved into shared helpers this session; e2m1's heights
#   too, session 40's unrun check), and the generic and sm80 instances the tests fall back to; then
#   1. tests/test_moe.py;
#   2. scripts/bench_moe_a8.py on the FP8 block format (DeepSeek-V3's gate-up and down GEMMs, and
#      4 experts x 8192 rows: issue 14's FP8 target; the tokens-M tiles forced too) to
#      $OUT/moe-a8-blocks.json, and on per-channel FP8 to $OUT/moe-a8-channels.json;
#   3. (unless E2M1=0) bench_moe e2m1g32 with every built height (Qwen3-30B-A3B, gpt-oss-120b at
#      256 and 1024 tokens) to $OUT/moe-e2m1-heights.json.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s41.txt
BUILT='^(sm90_wgmma_moe_a-e4m3|sm90_wgmma_dense_a-e4m3-(g128_w-e4m3g128n128-sf32|pt_w-e4m3gc-sf32)_c-bf16|'
BUILT+='sm90_wgmma_moe_a-bf16_w-(u4g128-sbf16|e2m1g32-sbf16)_c-bf16|generic_dense_a-bf16_w-u4-s|'
BUILT+='sm80_mma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t16x128)'
if [ "${PART:-a}" = a ]; then
  HUMMING_PROFILE="${HUMMING_PROFILE:-dev+experimental}" build_filtered "$BUILT"
  echo "build took $(($(date +%s) - start)) s" | log
  python3 -c "from humming_aot import registry; print(len(registry.instances()), 'instances')" 2>&1 | log
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs 2>&1 | tail -30 | sed "s/^/test_moe /" | log
  echo "tests done at $(($(date +%s) - start)) s" | log
  python3 scripts/bench_moe_a8.py "$OUT/moe-a8-blocks.json" --iters "${ITERS:-10}" \
    --impls humming-aot,humming-aot=_t128x128x128_,humming-aot=_t192x128x128_,humming-aot-loop,cublaslt-fp8-loop \
    2>&1 | tail -40 | sed "s/^/a8 /" | log
  python3 scripts/bench_moe_a8.py "$OUT/moe-a8-channels.json" --iters "${ITERS:-10}" --format e4m3gc-sf32:e4m3-pt \
    --cases "deepseek-v3:gate_up:1,64,4096;4x8192" 2>&1 | tail -20 | sed "s/^/a8 pc /" | log
  echo "a8 bench done at $(($(date +%s) - start)) s" | log
  if [ "${E2M1:-1}" = 1 ]; then
    python3 scripts/bench_moe.py "$OUT/moe-e2m1-heights.json" --format e2m1g32-sbf16 \
      --models qwen3-30b-a3b,gpt-oss-120b --tokens 256,1024 --impls humming-aot,humming-aot-heights 2>&1 \
      | grep -E "humming-aot|rror" | sed "s/^/e2m1 heights /" | log
  fi
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=dbg: a build of the grouped 8-bit activation instances only, then
# scripts/debug_a8_moe_s41.py (per-row errors of each instance where an expert's rows start at a
# row that is not a multiple of 4) and the 8-bit grouped tests of tests/test_moe.py.
if [ "${PART:-a}" = dbg ]; then
  HUMMING_PROFILE=dev+experimental build_filtered '^(sm90_wgmma_moe_a-e4m3|sm90_wgmma_dense_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16_t(128|192)x128x128_w[23]x1x1|generic_dense_a-bf16_w-u4-s)'
  echo "build took $(($(date +%s) - start)) s" | log
  python3 scripts/debug_a8_moe_s41.py 2>&1 | tail -60 | log
  [ "${TESTS:-1}" = 1 ] && python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -k "8bit or fp8" 2>&1 | tail -8 | log
fi
# PART=c: a build (dev) of the grouped 8-bit activation instances and of the dense ones this
# session's kernel edits touch (the FP8 block and per-channel tiles, a W4A8 layout-4 tile pair, an
# integer tile), then tests/test_gpu.py's per-instance tests on them, tests/test_moe.py's 8-bit
# tests, and scripts/bench_moe_a8.py (FP8 blocks: DeepSeek-V3 and 4 experts x 8192 rows, the
# tokens-M tiles forced too) to $OUT/moe-a8-blocks.json.
if [ "${PART:-a}" = c ]; then
  A8='^(sm90_wgmma_moe_a-e4m3|sm90_wgmma_dense_a-e4m3-(g128_w-e4m3g128n128-sf32|pt_w-e4m3gc-sf32)_c-bf16|'
  A8+='sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t(8x256|128x128)x128_w1x[42]x1_s[0-9]+_l4|'
  A8+='sm90_wgmma_dense_a-i8-pt_w-i8gc-sbf16_c-bf16_t16x|generic_dense_a-bf16_w-u4-s)'
  HUMMING_PROFILE=dev build_filtered "$A8"
  echo "build took $(($(date +%s) - start)) s" | log
  python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -rf -k \
    "instance_against or output_rows or block_scaled or split_k or subnormal or waves or rings or heavy or w8a8" \
    2>&1 | tail -8 | sed "s/^/test_gpu /" | log
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rf -k "8bit or fp8" 2>&1 | tail -6 | sed "s/^/test_moe /" | log
  echo "tests done at $(($(date +%s) - start)) s" | log
  python3 scripts/bench_moe_a8.py "$OUT/moe-a8-blocks.json" --iters "${ITERS:-10}" \
    --impls humming-aot,humming-aot=_t128x128x128_,humming-aot=_t192x128x128_,humming-aot-loop,cublaslt-fp8-loop \
    --cases "${CASES:-4x8192;deepseek-v3:gate_up:1,64,1024,4096;deepseek-v3:down:64,4096}" 2>&1 | tail -40 \
    | sed "s/^/a8 /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=d: a build (dev+experimental: the FP8 lone twins and the W4A8 grouped tiles, all not yet run
# on a GPU) of the grouped 8-bit activation instances and the dense FP8 ones, then
# tests/test_moe.py's 8-bit tests (which cover every built grouped 8-bit tile), the lone walk against the warp's on the
# same tiles (scripts/bench_moe_a8.py to $OUT/moe-a8-lone.json), per-channel FP8 (DeepSeek-V3's gate-up, 4 x 8192) to
# $OUT/moe-a8-channels.json, and on FP8 blocks the GEMMs and whole QuantMoE layers of Qwen3-30B-A3B
# and DeepSeek-V3 at 1, 64 and 1024 tokens (the share of routing, quantization, activation and
# combine) to $OUT/moe-a8-layers.json.
if [ "${PART:-a}" = d ]; then
  HUMMING_PROFILE=dev+experimental build_filtered '^(sm90_wgmma_moe_a-e4m3|sm90_wgmma_dense_a-e4m3-(g128_w-e4m3g128n128-sf32|pt_w-e4m3gc-sf32)_c-bf16|generic_dense_a-bf16_w-u4-s)'
  echo "build took $(($(date +%s) - start)) s" | log
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rf -k "8bit or fp8" 2>&1 | tail -6 | sed "s/^/test_moe /" | log
  python3 scripts/bench_moe_a8.py "$OUT/moe-a8-lone.json" --iters 20 \
    --impls humming-aot,humming-aot=_t64x128x128_w1x2x1_s8,humming-aot=_t64x128x128_w1x2x1_s8_lone,humming-aot=_t192x128x128_w3x1x1_s4,humming-aot=_t192x128x128_w3x1x1_s4_lone,humming-aot=_t128x128x128_w2x1x1_s5_lone \
    --cases "deepseek-v3:gate_up:256,1024,4096;4x8192" 2>&1 | tail -30 | sed "s/^/a8 lone /" | log
  python3 scripts/bench_moe_a8.py "$OUT/moe-a8-channels.json" --format e4m3gc-sf32:e4m3-pt \
    --cases "deepseek-v3:gate_up:1,64,1024,4096;4x8192" 2>&1 | tail -25 | sed "s/^/a8 pc /" | log
  python3 scripts/bench_moe_a8.py "$OUT/moe-a8-layers.json" --impls humming-aot,cublaslt-fp8-loop \
    --cases "qwen3-30b-a3b:gate_up:1,64,1024;qwen3-30b-a3b:down:1,64,1024;qwen3-30b-a3b:layer:1,64,1024;deepseek-v3:down:1,1024;deepseek-v3:layer:1,64,1024" \
    2>&1 | tail -30 | sed "s/^/a8 layer /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
