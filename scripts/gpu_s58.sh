#!/usr/bin/env bash
# On the lent GPU machine, session 58's calls; logs to $OUT/s58<PART>.txt
# (benchmarks/results/h100/tuning/h100-2026-12-07-s58-README.md). PART picks the call:
#   a (about 300 s, carry .peer): what the experts' last, partly filled row tiles cost the grouped
#      W4A8 GEMMs (scripts/moe_spill.py: random routing against the same rows spread evenly, the
#      default choice and the lone t64 / t80 / t128 forced) on Mixtral-8x7B, Qwen3-30B-A3B,
#      DeepSeek-V3 and gpt-oss-120b at 1024 tokens and Qwen3-30B-A3B at 4096; then the W4A8 MoE
#      standing against humming-kernels at 1024 and 4096 tokens.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
PART="${PART:-a}"
. scripts/build_filtered.sh
device_log "s58$PART.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
G4="sm90_wgmma_moe_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_"
HEIGHTS=${G4}t64x128x128_w1x2x1_s8_l4_lone,${G4}t80x128x128_w1x2x1_s7_l4_lone,${G4}t128x128x128_w1x2x1_s6_l4_lone
case "$PART" in
a)
  HUMMING_PROFILE=dev build_filtered "^${G4}.*_l4(_lone)?\$"
  echo "build done at $(($(date +%s) - start)) s" | log
  python3 scripts/moe_spill.py mixtral-8x7b:1024,qwen3-30b-a3b:1024,qwen3-30b-a3b:4096,deepseek-v3:1024,gpt-oss-120b:1024 \
    --instances $HEIGHTS 2>&1 | grep -E "spill|rror" | log
  echo "spill done at $(($(date +%s) - start)) s" | log
  install_peer
  w4a8_moe_standing 1024,4096
  ;;
*)
  echo "PART must be a" >&2
  exit 2
  ;;
esac
echo "all done at $(($(date +%s) - start)) s" | log
# The device tool returns only the first files under $OUT (by name): the log and reports in one archive, named first.
tar czf /tmp/0-s58.tgz -C "$OUT" --exclude=build.log . && mv /tmp/0-s58.tgz "$OUT/0-s58$PART.tgz"
