#!/usr/bin/env bash
# On the lent GPU machine, session 60's call; log to $OUT/s60<PART>.txt
# (benchmarks/results/h100/tuning/h100-2026-12-07-s60-README.md). Session 60's first call was
# scripts/gpu_s59.sh PART=c. PART picks the call:
#   b (about 330 s, carry .peer): the grouped W4A16 tiles' gated activation with the exchange in the
#      output boxes' bytes (kernel/sm90_dense.cuh kGlu; t128 had lost it when the grouped tiles got
#      boxes in session 59, and tests/test_moe.py's activation test failed on it) and t144 in dev: a
#      dev+experimental build of the grouped W4A16 u4g128 tiles (symmetric and -zi) and the grouped
#      e2m1gc / u4g128 W4A8 tiles of 8 to 256 tokens; test_moe.py's grouped-kernel and activation
#      tests; scripts/moe_spill.py --w4a16 with t128 and t144 (lone walk) forced and the default
#      choice at 128, 256 and 1024 rows per expert; the W4A16 MoE standing at 4096 tokens; ncu of
#      the W4A8 gate-up GEMM (its default choice, t144) of Qwen3-30B-A3B at 4096 tokens (session 59:
#      t128 read 477 MB, humming-kernels 269 MB).
#   c (about 300 s; STANDING=1 about 430 s, carry .peer): the grouped walk turned each round (scheduler/moe.h
#      kGroupedRoundTurn: call b's ncu found the multiprocessors idle for a fifth of the grouped
#      kernel, the blocks ending unevenly): a dev+experimental build of the grouped W4A8 e2m1gc and
#      W4A16 u4g128 (and -zi) tiles; test_moe.py's grouped-kernel and activation tests; the default
#      choice's grouped GEMMs alone (moe_spill.py, W4A8 and --w4a16) at five points; ncu of the W4A8
#      gate-up at Qwen3-30B-A3B's 4096 tokens; with STANDING=1 the W4A8 standing at 1024 / 4096; then the same build
#      with kGroupedRoundTurn = 0 (the walk before) and the same GEMMs timed again (A/B in one call).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
PART="${PART:-b}"
. scripts/build_filtered.sh
device_log "s60$PART.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
case "$PART" in
b)
  HUMMING_PROFILE=dev+experimental build_filtered \
    "^sm90_wgmma_moe_a-(e4m3-pt_w-(e2m1gc|u4g128)-sbf16|bf16_w-u4g128-sbf16(-zi)?)_c-bf16_t(8|16|24|32|48|64|80|128|144|160|192|256)x"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests test_moe test_moe.py "sm90_kernels or activation"
  echo "moe tests done at $(($(date +%s) - start)) s" | log
  G16="sm90_wgmma_moe_a-bf16_w-u4g128-sbf16_c-bf16_"
  python3 scripts/moe_spill.py qwen3-30b-a3b:4096,mixtral-8x7b:1024,mixtral-8x7b:4096,deepseek-v3:4096 --w4a16 \
    --kinds random --iters 10 --instances ${G16}t128x128x128_w1x2x1_s4_lone,${G16}t144x128x128_w1x2x1_s4_lone \
    2>&1 | grep -E "spill|rror" | sed "s/^/w16 /" | log
  echo "timing done at $(($(date +%s) - start)) s" | log
  install_peer
  w4a16_moe_standing 4096
  echo "standing done at $(($(date +%s) - start)) s" | log
  SKIP_BUILD=1 MODEL=qwen3-30b-a3b TOKENS=4096 PART=gate-up MOE_ACT=e4m3-pt MOE_FORMAT=e2m1gc-sbf16 IMPLS=aot \
    bash scripts/ncu_moe_peer.sh 2>&1 | log
  ;;
c)
  filter="^sm90_wgmma_moe_a-(e4m3-pt_w-e2m1gc-sbf16|bf16_w-u4g128-sbf16(-zi)?)_c-bf16_t(8|16|24|32|48|64|80|128|144|256)x"
  pts=qwen3-30b-a3b:1024,qwen3-30b-a3b:4096,mixtral-8x7b:1024,mixtral-8x7b:4096,deepseek-v3:4096
  HUMMING_PROFILE=dev+experimental build_filtered "$filter"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests test_moe test_moe.py "sm90_kernels or activation"
  echo "moe tests done at $(($(date +%s) - start)) s" | log
  python3 scripts/moe_spill.py $pts --kinds random --iters 10 2>&1 | grep -E "spill|rror" | sed "s/^/turn13 w8 /" | log
  python3 scripts/moe_spill.py $pts --w4a16 --kinds random --iters 10 2>&1 | grep -E "spill|rror" | sed "s/^/turn13 w16 /" | log
  echo "timing done at $(($(date +%s) - start)) s" | log
  SKIP_BUILD=1 MODEL=qwen3-30b-a3b TOKENS=4096 PART=gate-up MOE_ACT=e4m3-pt MOE_FORMAT=e2m1gc-sbf16 IMPLS=aot \
    bash scripts/ncu_moe_peer.sh 2>&1 | grep -E "dense_kernel|Elapsed|SM Active|Duration|dram__bytes" | log
  if [ "${STANDING:-0}" = "1" ]; then # STANDING=1: the W4A8 standing too (about 130 s more)
    install_peer
    w4a8_moe_standing 1024,4096
    echo "standing done at $(($(date +%s) - start)) s" | log
  fi
  # The walk before (every gridDim.x-th tile): the same build with the turn 0, on this copy only.
  sed -i "s/kGroupedRoundTurn = 13;/kGroupedRoundTurn = 0;/" include/humming/scheduler/moe.h
  # The copied file is older than these objects, and call d rebuilt nothing (build/.patched-files
  # did not help there); since session 61 every build touches the files whose content changed
  # (scripts/stale_sources.sh, touch_changed_sources).
  mkdir -p build && echo include/humming/scheduler/moe.h >> build/.patched-files
  HUMMING_PROFILE=dev+experimental build_filtered "$filter"
  echo "turn-0 build done at $(($(date +%s) - start)) s" | log
  python3 scripts/moe_spill.py $pts --kinds random --iters 10 2>&1 | grep -E "spill|rror" | sed "s/^/turn0 w8 /" | log
  python3 scripts/moe_spill.py $pts --w4a16 --kinds random --iters 10 2>&1 | grep -E "spill|rror" | sed "s/^/turn0 w16 /" | log
  ;;
*)
  echo "PART must be b or c" >&2
  exit 2
  ;;
esac
echo "all done at $(($(date +%s) - start)) s" | log
# The device tool returns only the first files under $OUT (by name): the log and reports in one archive, named first.
tar czf /tmp/0-s60.tgz -C "$OUT" --exclude=build.log . && mv /tmp/0-s60.tgz "$OUT/0-s60$PART.tgz"
