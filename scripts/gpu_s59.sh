#!/usr/bin/env bash
# On the lent GPU machine, session 59's calls; logs to $OUT/s59<PART>.txt
# (benchmarks/results/h100/tuning/h100-2026-12-07-s59-README.md). PART picks the call:
#   a (about 400 s): the grouped tiles' output boxes (DenseA8::kOutBytes and Dense::kOutBytes for
#      grouped tiles of up to three consumers; session 58's patch) and the dense 8-bit-activation tiles:
#      a dev build of the grouped e2m1gc W4A8 and FP8 tiles, the W4A16 u4g128 grouped tiles and every
#      dense sm90_wgmma_dense_a-e4m3 instance; test_moe.py's grouped-kernel tests; test_gpu.py's
#      instance tests on the dense 8-bit tiles and its W4A8 / W8A8 layer tests (session 57's last
#      kernel commits, 4f1dd3c, 7228cb7 and 0064669, had not run them); the grouped t128 against the
#      dense one on the same work (session 58's call b: 237.1 against 195.4 us without boxes).
#   b (about 250 s, carry .peer; after a on the same machine, SKIP_BUILD=1): the MoE standings with
#      the boxes: W4A8 e2m1gc against humming-kernels' W4A8 at 256, 1024 and 4096 tokens, W4A16 u4g128
#      against its W4A16 at 1024 and 4096 tokens (Qwen3-30B-A3B and Mixtral-8x7B).
#   c (about 350 s, carry .peer; SHORT=1: no standings): the taller grouped tiles (session 59,
#      experimental): after the ncu call (humming-kernels runs Qwen3-30B-A3B at 4096 tokens, 256 rows
#      per expert, in 144-token tiles, two an expert, where t128 runs a third for about half the
#      experts), a dev+experimental build of the grouped e2m1gc and u4g128 W4A8 tiles and the W4A16
#      u4g128 grouped tiles of 8 to 256 tokens (t144, t160 and t192 included); test_moe.py's
#      grouped-kernel tests; scripts/moe_spill.py with t128, t144, t160 and t192 (lone walk) forced
#      and the default choice at 128 (DeepSeek-V3 at 4096 tokens), 256 and 1024 rows per expert; the
#      W4A8 MoE standing against humming-kernels at 1024 and 4096 tokens, the W4A16 one at 1024.
#      Never ran in session 59 (no machine): move t144 / t144l to dev first if the default choice
#      should take it (tools/matrix/sm90_a8_moe.json; in this build's profile it does either way).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
PART="${PART:-a}"
. scripts/build_filtered.sh
device_log "s59$PART.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
W4="sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_"
A4="--act e4m3-pt --graph --flush read --iters 30 --weights randn --prequant"
case "$PART" in
a)
  HUMMING_PROFILE=dev build_filtered "^(sm90_wgmma_moe_a-e4m3-(pt|g128)_w-(e2m1gc|e4m3gc|e4m3g128n128)-|sm90_wgmma_moe_a-bf16_w-u4g128-sbf16_|sm90_wgmma_dense_a-e4m3-)"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests test_moe test_moe.py sm90_kernels
  echo "moe tests done at $(($(date +%s) - start)) s" | log
  python3 scripts/time_shapes.py 28672x4096 1024 --format e2m1gc-sbf16 --layout sm90a8 $A4 --iters 10 \
    --instances ${W4}t128x128x128_w1x2x1_s6_l4 2>&1 | sed "s/^/dense /" | log
  python3 scripts/moe_spill.py mixtral-8x7b:512,mixtral-8x7b:4096,qwen3-30b-a3b:1024 --kinds one,random --iters 10 2>&1 \
    | grep -E "spill|rror" | log
  echo "timing done at $(($(date +%s) - start)) s" | log
  gpu_tests test_gpu test_gpu.py "a-e4m3 or w4a8 or w8a8"
  echo "gpu tests done at $(($(date +%s) - start)) s" | log
  ;;
b)
  install_peer
  w4a8_moe_standing 256,1024,4096
  w4a16_moe_standing 1024,4096
  ;;
c)
  HUMMING_PROFILE=dev+experimental build_filtered \
    "^sm90_wgmma_moe_a-(e4m3-pt_w-(e2m1gc|u4g128)|bf16_w-u4g128)-sbf16_c-bf16_t(8|16|24|32|48|64|80|128|144|160|192|256)x"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests test_moe test_moe.py sm90_kernels
  echo "moe tests done at $(($(date +%s) - start)) s" | log
  G4="sm90_wgmma_moe_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_"
  python3 scripts/moe_spill.py qwen3-30b-a3b:4096,mixtral-8x7b:1024,mixtral-8x7b:4096,deepseek-v3:4096 \
    --kinds random --iters 10 --instances ${G4}t128x128x128_w1x2x1_s6_l4_lone,${G4}t144x128x128_w1x2x1_s6_l4_lone,${G4}t160x128x128_w1x2x1_s5_l4_lone,${G4}t192x128x128_w1x2x1_s5_l4_lone \
    2>&1 | grep -E "spill|rror" | log
  echo "timing done at $(($(date +%s) - start)) s" | log
  [ "${SHORT:-0}" = "1" ] && exit 0 # SHORT=1: no standings (a call with little device time left)
  install_peer
  w4a8_moe_standing 1024,4096
  w4a16_moe_standing 1024
  ;;
*)
  echo "PART must be a, b or c" >&2
  exit 2
  ;;
esac
echo "all done at $(($(date +%s) - start)) s" | log
# The device tool returns only the first files under $OUT (by name): the log and reports in one archive, named first.
tar czf /tmp/0-s59.tgz -C "$OUT" --exclude=build.log . && mv /tmp/0-s59.tgz "$OUT/0-s59$PART.tgz"
