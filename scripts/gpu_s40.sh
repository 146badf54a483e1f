#!/usr/bin/env bash
# On the lent GPU machine, session 40's calls; logs to $OUT/s40.txt.
# PART=a (the default): one build (dev+experimental: the grouped u4g128 bf16 tiles with and without
#   -zi, the new grouped heights t24 / t48 / t80 among them, and the grouped e2m1g32 ones with the
#   K-split twin t8ws; the generic and sm80 instances the tests fall back to), then
#   1. tests/test_moe.py (the new heights; QuantMoE's correction bias under session 38's bitwise test
#      of programmatic launches off / on; e2m1's t8ws);
#   2. bench_moe u4g128 with every built height near the mean (humming-aot-heights) and the default
#      choice, at the token counts whose rows per expert lie between the power-of-two heights
#      (MODELS, TOKENS) to $OUT/moe-heights.json;
#   3. bench_moe e2m1g32 at 1 and 2 tokens (Mixtral-8x7B, gpt-oss-120b), where t8ws is taken.
# PART=ncu (after, on the warm machine, no build): ncu of the grouped e2m1g32 and u4g128 gate-up GEMM
#   of Qwen3-30B-A3B at 64 tokens (scripts/ncu_moe_peer.sh, MOE_FORMAT), with the per-instruction
#   stall page (NCU_SOURCE=1): why grouped e2m1 costs 1.4x u4g128 where dense costs 1.08x.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s40.txt
# The grouped u4g128 (with and without -zi) and e2m1g32 bf16 tiles, and the generic and sm80 instances
# the tests fall back to.
GROUPED='^(sm90_wgmma_moe_a-bf16_w-(u4g128-sbf16(-zi)?|e2m1g32-sbf16)_c-bf16|generic_dense_a-bf16_w-u4-s|sm80_mma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t16x128)'
if [ "${PART:-a}" = a ]; then
  HUMMING_PROFILE="${HUMMING_PROFILE:-dev+experimental}" build_filtered "$GROUPED"
  echo "build took $(($(date +%s) - start)) s" | log
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs 2>&1 | tail -12 | sed "s/^/test_moe /" | log
  echo "tests done at $(($(date +%s) - start)) s" | log
  python3 scripts/bench_moe.py "$OUT/moe-heights.json" --format u4g128-sbf16 \
    --models "${MODELS:-qwen3-30b-a3b,mixtral-8x7b,gpt-oss-120b}" --tokens "${TOKENS:-256,1024}" \
    --impls humming-aot,humming-aot-heights 2>&1 | grep -E "humming-aot|rror" | sed "s/^/heights /" | log
  echo "heights done at $(($(date +%s) - start)) s" | log
  python3 scripts/bench_moe.py "$OUT/moe-e2m1-split.json" --format e2m1g32-sbf16 --models mixtral-8x7b,gpt-oss-120b \
    --tokens 1,2 --impls humming-aot 2>&1 | grep -E "humming-aot:|rror" | sed "s/^/e2m1 split /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
if [ "${PART:-a}" = ncu ]; then
  for f in e2m1g32-sbf16 u4g128-sbf16; do
    SKIP_BUILD=1 IMPLS=aot NCU_SOURCE=1 MOE_FORMAT=$f TOKENS="${TOKENS:-64}" bash scripts/ncu_moe_peer.sh 2>&1 \
      | tail -50 | sed "s/^/ncu $f /" | log
  done
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=b (the second call): a build of the grouped e2m1g32 and u4g128 bf16 tiles (dev+experimental:
#   e2m1's heights t24 / t48 / t80 and lone twins; the warp-walk ones spill 8 bytes), then
#   tests/test_moe.py, bench_moe e2m1g32 with every built height (Qwen3-30B-A3B, gpt-oss-120b at 256
#   and 1024 tokens) to $OUT/moe-e2m1-heights.json, then (unless NCU=0) PART=ncu's two profiles.
if [ "${PART:-a}" = b ]; then
  HUMMING_PROFILE="${HUMMING_PROFILE:-dev+experimental}" build_filtered "$GROUPED"
  echo "build took $(($(date +%s) - start)) s" | log
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs 2>&1 | tail -4 | sed "s/^/test_moe /" | log
  python3 scripts/bench_moe.py "$OUT/moe-e2m1-heights.json" --format e2m1g32-sbf16 \
    --models qwen3-30b-a3b,gpt-oss-120b --tokens 256,1024 --impls humming-aot,humming-aot-heights 2>&1 \
    | grep -E "humming-aot|rror" | sed "s/^/e2m1 heights /" | log
  echo "heights done at $(($(date +%s) - start)) s" | log
  [ "${NCU:-1}" = 1 ] && PART=ncu bash "$0"
fi
