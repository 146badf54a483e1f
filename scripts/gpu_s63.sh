#!/usr/bin/env bash
# On the lent GPU machine, session 63's calls (prepared in session 62); logs to $OUT/s63<PART>.txt.
# PART picks the call:
#   a (about 300 s): where the grouped two-block tile t128x256x128 lone wins (session 62, H100:
#      DeepSeek-V3 at 4096 tokens 0.82x / 0.88x t128x128x128's time, Qwen3-30B-A3B at 4096 and
#      Mixtral-8x7B's down at 1024 1.03-1.13x): a dev+experimental build of the W4A16 u4g128 lone
#      tiles of heights 128 / 144 / 256 and the two-block ones (t128x256x128, and t144x256x64: one
#      fragment set, session 63), the grouped tests, then every MoE
#      model at several token counts, each tile forced, the instance order run forward and reversed
#      (the time of one tile moved 14 % between session 62's machines, so compare within a run).
#   b (about 120 s, after a, SKIP_BUILD=1): the dense t256x128x64 against t128x128x128 at m = 1024
#      to 8192 (session 62's H100: t128 faster at 14 of 15 points; the H200 table prefers t256 on wide
#      layers from m = 1024): run it on an H200 (`kind: nvidia-h200`) to decide whether to refit;
#      then the grouped tests under compute-sanitizer (about 300 s more).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
PART="${PART:-a}"
. scripts/build_filtered.sh
device_log "s63$PART.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
g=sm90_wgmma_moe_a-bf16_w-u4g128-sbf16_c-bf16
d=sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16
case "$PART" in
a)
  HUMMING_PROFILE=dev+experimental build_filtered \
    "^sm90_wgmma_(moe_a-bf16_w-u4g128-sbf16_c-bf16_t(128x128x128|144x128x128|128x256x128|144x256x64|256x128x64)_w1x2x1_s[3-6]_lone|dense_a-bf16_w-u4g128-sbf16_c-bf16_t(128x128x128|256x128x64)_)"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests moe test_moe.py "sm90_kernels_matches"
  tiles="${g}_t128x128x128_w1x2x1_s4_lone,${g}_t128x256x128_w1x2x1_s3_lone,${g}_t144x128x128_w1x2x1_s4_lone,${g}_t144x256x64_w1x2x1_s6_lone,${g}_t256x128x64_w1x2x1_s5_lone"
  reversed=$(echo "$tiles" | tr ',' '\n' | tac | paste -sd,)
  points=deepseek-v3:2048,deepseek-v3:4096,deepseek-v3:16384,qwen3-30b-a3b:4096,qwen3-30b-a3b:16384,mixtral-8x7b:4096,gpt-oss-120b:4096
  for order in "$tiles" "$reversed"; do
    python3 scripts/moe_spill.py "$points" --w4a16 --kinds random --instances "$order" 2>&1 | log
  done
  ;;
b)
  python3 scripts/time_shapes.py 28672x8192,8192x28672,8192x8192,28672x4096,4096x14336,5120x13824 1024,2048,4096,8192 \
    --instances "${d}_t128x128x128_w1x2x1_s4,${d}_t256x128x64_w1x2x1_s5" 2>&1 | log
  # compute-sanitizer memcheck and racecheck over the grouped tests of call a's build (the two-block
  # lone tile has not been under the sanitizer yet).
  SANITIZE_TOOLS="" SANITIZE_FUZZ=0 SANITIZE_TIMEOUT_S=200 bash scripts/gpu_sanitize.sh 2>&1 | log
  ;;
c)
  # (Prepared in session 63, whose device was paused before it could run: the next session's first
  # call.) The two-block tiles with one K step per group (Mainloops::kStepwise, session 63): t128x256 of
  # 64 and 128 inputs a stage, t144x256x64 and t176x256x64 (the peer's W4A16 tile of large-M MoE
  # layers), grouped (lone walk) and dense, against the one-block tiles of 128, 144 and 256 tokens;
  # the GPU tests of all of them, sym and -zi; a few dense points (about 350 s).
  HUMMING_PROFILE=dev+experimental build_filtered \
    "^sm90_wgmma_(moe_a-bf16_w-u4g128-sbf16(-zi)?_c-bf16_t(128x128x128_w1x2x1_s4|144x128x128_w1x2x1_s4|256x128x64_w1x2x1_s5|128x256x128_w1x2x1_s3|128x256x64_w1x2x1_s6|144x256x64_w1x2x1_s5|176x256x64_w1x2x1_s4|80x128x128_w1x2x1_s5|80x192x128_w1x3x1_s5|80x256x64_w1x2x1_s6)_lone|dense_a-bf16_w-u4g128-sbf16(-zi)?_c-bf16_t(128x128x128|256x128x64|128x256x64|128x256x128|176x256x64)_w1x2x1_s[3-6]$)"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests dense test_gpu.py "t128x256 or t176x256"
  gpu_tests moe test_moe.py "sm90_kernels_matches or activation_on_the_sm90"
  tiles=""
  for t in t128x128x128_w1x2x1_s4 t128x256x128_w1x2x1_s3 t128x256x64_w1x2x1_s6 t144x128x128_w1x2x1_s4 \
    t144x256x64_w1x2x1_s5 t176x256x64_w1x2x1_s4 t256x128x64_w1x2x1_s5; do tiles="$tiles${tiles:+,}${g}_${t}_lone"; done
  reversed=$(echo "$tiles" | tr ',' '\n' | tac | paste -sd,)
  points=deepseek-v3:4096,qwen3-30b-a3b:4096,qwen3-30b-a3b:16384,mixtral-8x7b:1024,mixtral-8x7b:4096
  for order in "$tiles" "$reversed"; do
    python3 scripts/moe_spill.py "$points" --w4a16 --kinds random --instances "$order" 2>&1 | log
  done
  dense=""
  for t in t128x128x128_w1x2x1_s4 t128x256x128_w1x2x1_s3 t176x256x64_w1x2x1_s4 t256x128x64_w1x2x1_s5; do
    dense="$dense${dense:+,}${d}_$t"
  done
  python3 scripts/time_shapes.py 28672x8192,4096x14336 2048,8192 --instances "$dense" 2>&1 | log
  # (Session 64) The peer's tile at 64 rows per expert is 80 x 256 x 64 (its selection run on the
  # CPU): the two-block t80x256x64 against t80 and its mid twin t80x192, last (the call may end first).
  t80="${g}_t80x128x128_w1x2x1_s5_lone,${g}_t80x192x128_w1x3x1_s5_lone,${g}_t80x256x64_w1x2x1_s6_lone"
  for order in "$t80" "$(echo "$t80" | tr ',' '\n' | tac | paste -sd,)"; do
    python3 scripts/moe_spill.py qwen3-30b-a3b:1024,mixtral-8x7b:256 --w4a16 --kinds random --instances "$order" 2>&1 | log
  done
  ;;
*)
  echo "PART must be a, b or c" >&2
  exit 2
  ;;
esac
echo "all done at $(($(date +%s) - start)) s" | log
# The device tool returns only the first files under $OUT (by name): the log and reports in one archive, named first.
tar czf /tmp/0-s63.tgz -C "$OUT" --exclude=build.log . && mv /tmp/0-s63.tgz "$OUT/0-s63$PART.tgz"
