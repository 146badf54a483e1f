#!/usr/bin/env bash
# On the lent GPU machine, session 61's calls (prepared in session 60, which had no device time
# left); logs to $OUT/s61<PART>.txt. PART picks the call:
#   a (about 330 s, carry .peer): after session 60 turned the grouped walk (scheduler/moe.h
#      kGroupedRoundTurn), the tile heights again: a dev+experimental build of the grouped W4A8
#      e2m1gc and W4A16 u4g128 tiles of 8 to 256 tokens (t144 / t160 / t192 included);
#      test_moe.py's grouped-kernel and activation tests; scripts/moe_spill.py with t64 / t80 (64 rows
#      per expert: Qwen3-30B-A3B at 1024 tokens, 0.84x humming-kernels), t128 / t144 (256 rows:
#      Qwen3-30B-A3B at 4096, whose down GEMM, K = 768, ran 10 % faster in t128 before the turn) and
#      t128 / t144 / t160 (1024 rows: Mixtral-8x7B at 4096, 0.90x) forced, lone walk, W4A8 and W4A16;
#      then the W4A16 MoE standing at 1024 / 4096 tokens (not yet run with the turned walk).
#   b (about 120 s, carry .peer; after a on the same machine, SKIP_BUILD=1): ncu of the W4A8 gate-up
#      GEMM of Qwen3-30B-A3B at 1024 tokens (64 rows per expert), humming-aot's t80 against
#      humming-kernels: which tile the peer runs there and where the 0.84x goes. (Ran: the peer runs
#      80 tokens x 256 channels in two consumer warpgroups, 105.4 against our t80x128's 130.0 us,
#      27.9 against 34.1 M instructions.)
#   c (about 250 s): the three-consumer grouped tiles of 64 and 80 tokens (192 channels; the
#      four-consumer t80x256 spills 104 bytes at its 104 registers), W4A8 e2m1gc and W4A16 u4g128:
#      a dev+experimental build of the grouped tiles of 64 and 80 tokens, test_moe.py's grouped-kernel
#      and activation tests, then scripts/moe_spill.py at 64 rows per expert (Qwen3-30B-A3B 1024,
#      Mixtral-8x7B 256, gpt-oss-120b 2048, DeepSeek-V3 2048), each tile forced.
#   d (about 250 s, carry .peer): t80x192 in dev, taken by the mid rule: the build, the tests, the
#      default choices at c's points, the W4A8 and W4A16 standings at 1024 tokens.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
PART="${PART:-a}"
. scripts/build_filtered.sh
device_log "s61$PART.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
G8="sm90_wgmma_moe_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_"
G16="sm90_wgmma_moe_a-bf16_w-u4g128-sbf16_c-bf16_"
# grouped_built_and_tested HEIGHTS [MORE]: a dev+experimental build of the grouped W4A8 e2m1gc and
# W4A16 u4g128 tiles of these heights (a regex alternation), and of the instances regex MORE
# matches, then test_moe.py's grouped-kernel and activation tests on them.
grouped_built_and_tested() {
  HUMMING_PROFILE=dev+experimental build_filtered "^(${G8}|${G16})t($1)x${2:+|$2}"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests test_moe test_moe.py "sm90_kernels or activation"
  echo "moe tests done at $(($(date +%s) - start)) s" | log
}
case "$PART" in
a)
  grouped_built_and_tested "8|16|24|32|48|64|80|128|144|160|192|256"
  python3 scripts/moe_spill.py qwen3-30b-a3b:1024 --kinds random --iters 10 \
    --instances ${G8}t64x128x128_w1x2x1_s8_l4_lone,${G8}t80x128x128_w1x2x1_s7_l4_lone 2>&1 | grep -E "spill|rror" | log
  python3 scripts/moe_spill.py qwen3-30b-a3b:4096 --kinds random --iters 10 \
    --instances ${G8}t128x128x128_w1x2x1_s6_l4_lone,${G8}t144x128x128_w1x2x1_s6_l4_lone 2>&1 | grep -E "spill|rror" | log
  python3 scripts/moe_spill.py mixtral-8x7b:4096 --kinds random --iters 10 \
    --instances ${G8}t128x128x128_w1x2x1_s6_l4_lone,${G8}t144x128x128_w1x2x1_s6_l4_lone,${G8}t160x128x128_w1x2x1_s5_l4_lone \
    2>&1 | grep -E "spill|rror" | log
  python3 scripts/moe_spill.py qwen3-30b-a3b:1024,qwen3-30b-a3b:4096,mixtral-8x7b:4096 --w4a16 --kinds random --iters 10 \
    --instances ${G16}t64x128x128_w1x2x1_s5_lone,${G16}t80x128x128_w1x2x1_s5_lone,${G16}t128x128x128_w1x2x1_s4_lone,${G16}t144x128x128_w1x2x1_s4_lone \
    2>&1 | grep -E "spill|rror" | sed "s/^/w16 /" | log
  echo "timing done at $(($(date +%s) - start)) s" | log
  install_peer
  w4a16_moe_standing 1024,4096
  ;;
b)
  SKIP_BUILD=1 MODEL=qwen3-30b-a3b TOKENS=1024 PART=gate-up MOE_ACT=e4m3-pt MOE_FORMAT=e2m1gc-sbf16 IMPLS="aot jit" \
    bash scripts/ncu_moe_peer.sh 2>&1 | log
  ;;
c)
  grouped_built_and_tested "64|80"
  P="qwen3-30b-a3b:1024,mixtral-8x7b:256,gpt-oss-120b:2048,deepseek-v3:2048"
  python3 scripts/moe_spill.py $P --kinds random --iters 10 \
    --instances ${G8}t80x128x128_w1x2x1_s7_l4_lone,${G8}t80x192x128_w1x3x1_s6_l4,${G8}t80x192x128_w1x3x1_s6_l4_lone,${G8}t64x192x128_w1x3x1_s7_l4_lone,${G8}t64x256x128_w1x4x1_s6_l4_lone \
    2>&1 | grep -E "spill|rror" | log
  python3 scripts/moe_spill.py $P --w4a16 --kinds random --iters 10 \
    --instances ${G16}t80x128x128_w1x2x1_s5_lone,${G16}t80x192x128_w1x3x1_s5,${G16}t80x192x128_w1x3x1_s5_lone,${G16}t64x192x128_w1x3x1_s5_lone \
    2>&1 | grep -E "spill|rror" | sed "s/^/w16 /" | log
  ;;
d)
  # After c: t80x192 / t80x192l in dev for the per-channel W4A8 formats and W4A16 u4g128 (sym, -zi),
  # taken by the mid rule (humming.h grouped_tiles_mid). The tiles of 8 to 256 tokens of the
  # standing's formats, and the t80 tiles of u4gc W4A8 and -zi W4A16 for the tests; the default
  # choice at the points of c (which twin the rule takes); the standings at 1024 tokens.
  grouped_built_and_tested "8|16|24|32|48|64|80|128|144|160|192|256" \
    "^sm90_wgmma_moe_a-(e4m3-pt_w-u4gc-sbf16|bf16_w-u4g128-sbf16-zi)_c-bf16_t80x"
  # Most wanted first (the log comes back from a call cut short by its limit).
  install_peer
  w4a8_moe_standing 1024
  echo "w4a8 standing done at $(($(date +%s) - start)) s" | log
  P="qwen3-30b-a3b:1024,mixtral-8x7b:256,gpt-oss-120b:2048,deepseek-v3:2048"
  python3 scripts/moe_spill.py $P --kinds random --iters 10 2>&1 | grep -E "spill|rror" | log
  python3 scripts/moe_spill.py $P --w4a16 --kinds random --iters 10 2>&1 | grep -E "spill|rror" | sed "s/^/w16 /" | log
  echo "timing done at $(($(date +%s) - start)) s" | log
  w4a16_moe_standing 1024
  ;;
*)
  echo "PART must be a, b, c or d" >&2
  exit 2
  ;;
esac
echo "all done at $(($(date +%s) - start)) s" | log
# The device tool returns only the first files under $OUT (by name): the log and reports in one archive, named first.
tar czf /tmp/0-s61.tgz -C "$OUT" --exclude=build.log . && mv /tmp/0-s61.tgz "$OUT/0-s61$PART.tgz"
