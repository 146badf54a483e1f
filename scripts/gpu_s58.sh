#!/usr/bin/env bash
# On the lent GPU machine, session 58's calls; logs to $OUT/s58<PART>.txt
# (benchmarks/results/h100/tuning/h100-2026-12-07-s58-README.md). PART picks the call:
#   a (about 300 s, carry .peer): what the experts' last, partly filled row tiles cost the grouped
#      W4A8 GEMMs (scripts/moe_spill.py: random routing against the same rows spread evenly, the
#      default choice and the lone t64 / t80 / t128 forced) on Mixtral-8x7B, Qwen3-30B-A3B,
#      DeepSeek-V3 and gpt-oss-120b at 1024 tokens and Qwen3-30B-A3B at 4096; then the W4A8 MoE
#      standing against humming-kernels at 1024 and 4096 tokens.
#   b (about 400 s): why the grouped t128 tile trails the dense one at 1024 rows per expert: the dense
#      e2m1gc t128 (layout 4) on Mixtral-8x7B's expert shapes at m = 1024 and 2048 (GEMM alone), the
#      grouped t128 (lone walk and warp walk) with one expert holding all rows, evenly spread and
#      random rows (scripts/moe_spill.py); ncu with source counters of the grouped GEMM (Mixtral-8x7B
#      gate-up at 4096 tokens, scripts/ncu_moe_peer.sh) and of the dense t128 at 28672 x 4096, m = 1024.
#   c (about 450 s, carry .peer): the narrow grouped W4A8 tiles (DenseA8::kNarrowLo / kNarrowHi): a dev
#      build of every grouped e2m1gc tile and of the W4A8 and FP8 MoE formats test_moe.py tests; its 8-bit
#      grouped tests; moe_spill.py under HUMMING_NARROW_TILES=0 and 1 (the default and the heights forced)
#      on Mixtral-8x7B and Qwen3-30B-A3B at 1024 and 4096 tokens and DeepSeek-V3 at 4096; the W4A8 MoE
#      standing against humming-kernels at 256, 1024 and 4096 tokens.
#   d (about 150 s; never got a machine): the grouped tiles' output boxes, after
#      `git apply benchmarks/results/h100/tuning/h100-2026-12-07-s58-grouped-boxes.patch`
#      (DenseA8::kOutBytes and Dense::kOutBytes for grouped tiles of up to three consumers): a dev
#      build of the grouped e2m1gc W4A8 and FP8 tiles, the W4A16 u4g128 grouped tiles and the dense
#      e2m1gc t128; test_moe.py's grouped-kernel tests; b's timing (the grouped t128 against the dense
#      one, a few points).
#   e (about 350 s, carry .peer; after d on the same machine, SKIP_BUILD=1): the MoE standings with the
#      boxes: W4A8 e2m1gc against humming-kernels' W4A8 at 256, 1024 and 4096 tokens, W4A16 u4g128
#      against its W4A16 at 1024 and 4096 tokens (Qwen3-30B-A3B and Mixtral-8x7B).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
PART="${PART:-a}"
. scripts/build_filtered.sh
device_log "s58$PART.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
G4="sm90_wgmma_moe_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_"
HEIGHTS=${G4}t64x128x128_w1x2x1_s8_l4_lone,${G4}t80x128x128_w1x2x1_s7_l4_lone,${G4}t128x128x128_w1x2x1_s6_l4_lone
W4="sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_"
A4="--act e4m3-pt --graph --flush read --iters 30 --weights randn --prequant"
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
b)
  HUMMING_PROFILE=dev build_filtered "^(${G4}t128x.*_l4(_lone)?|${W4}t128x128x128_w1x2x1_s6_l4)\$"
  echo "build done at $(($(date +%s) - start)) s" | log
  python3 scripts/time_shapes.py 28672x4096,4096x14336 1024,2048 --format e2m1gc-sbf16 --layout sm90a8 $A4 \
    --instances ${W4}t128x128x128_w1x2x1_s6_l4 2>&1 | sed "s/^/dense /" | log
  python3 scripts/moe_spill.py mixtral-8x7b:512,mixtral-8x7b:4096 --kinds one,even,random \
    --instances ${G4}t128x128x128_w1x2x1_s6_l4_lone,${G4}t128x128x128_w1x2x1_s6_l4 2>&1 | grep -E "spill|rror" | log
  echo "timing done at $(($(date +%s) - start)) s" | log
  SKIP_BUILD=1 IMPLS=aot NCU_SOURCE=1 MODEL=mixtral-8x7b TOKENS=4096 PART=gate-up MOE_ACT=e4m3-pt \
    MOE_FORMAT=e2m1gc-sbf16 MOE_INSTANCE=${G4}t128x128x128_w1x2x1_s6_l4_lone bash scripts/ncu_moe_peer.sh 2>&1 \
    | grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Ipc A|DRAM Th" \
    | sed "s/^/ncu grouped /" | log
  ncu_one dense_t128_28672x4096_m1024 28672 4096 1024 e2m1gc-sbf16 sm90a8 ${W4}t128x128x128_w1x2x1_s6_l4
  ;;
c)
  HUMMING_PROFILE=dev build_filtered "^sm90_wgmma_moe_a-e4m3-(pt|g128)_w-(e2m1gc|u4gc|u4g128|e2m1g128|e4m3gc|e4m3g128n128|e2m1g32)"
  echo "build done at $(($(date +%s) - start)) s" | log
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs -k "8bit or a8 or w4a8" 2>&1 \
    | grep -E "^FAILED|^SKIPPED|passed|failed|rror" | cut -c1-300 | sed "s/^/test_moe /" | log
  echo "tests done at $(($(date +%s) - start)) s" | log
  for v in 0 1; do
    HUMMING_NARROW_TILES=$v python3 scripts/moe_spill.py \
      mixtral-8x7b:1024,mixtral-8x7b:4096,qwen3-30b-a3b:1024,qwen3-30b-a3b:4096,deepseek-v3:4096 --kinds random \
      --instances ${HEIGHTS},${G4}t48x128x128_w1x2x1_s8_l4 2>&1 | grep -E "spill|rror" | sed "s/^/narrow$v /" | log
  done
  echo "spill done at $(($(date +%s) - start)) s" | log
  install_peer
  w4a8_moe_standing 256,1024,4096
  ;;
d)
  HUMMING_PROFILE=dev build_filtered "^(sm90_wgmma_moe_a-e4m3-(pt|g128)_w-(e2m1gc|e4m3gc|e4m3g128n128)-|sm90_wgmma_moe_a-bf16_w-u4g128-sbf16_|${W4}t128x128x128_w1x2x1_s6_l4\$)"
  echo "build done at $(($(date +%s) - start)) s" | log
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs -k "sm90_kernels" 2>&1 \
    | grep -E "^FAILED|^SKIPPED|passed|failed|rror" | cut -c1-300 | sed "s/^/test_moe /" | log
  echo "tests done at $(($(date +%s) - start)) s" | log
  python3 scripts/time_shapes.py 28672x4096 1024 --format e2m1gc-sbf16 --layout sm90a8 $A4 --iters 10 \
    --instances ${W4}t128x128x128_w1x2x1_s6_l4 2>&1 | sed "s/^/dense /" | log
  python3 scripts/moe_spill.py mixtral-8x7b:512,mixtral-8x7b:4096,qwen3-30b-a3b:1024 --kinds one,random --iters 10 2>&1 \
    | grep -E "spill|rror" | log
  ;;
e)
  install_peer
  w4a8_moe_standing 256,1024,4096
  w4a16_moe_standing 1024,4096
  ;;
*)
  echo "PART must be a, b, c, d or e" >&2
  exit 2
  ;;
esac
echo "all done at $(($(date +%s) - start)) s" | log
# The device tool returns only the first files under $OUT (by name): the log and reports in one archive, named first.
tar czf /tmp/0-s58.tgz -C "$OUT" --exclude=build.log . && mv /tmp/0-s58.tgz "$OUT/0-s58$PART.tgz"
