#!/usr/bin/env bash
# On the lent GPU machine, session 62's calls (prepared in session 61, whose device time ran out
# before its W4A16 standing); logs to $OUT/s62<PART>.txt. PART picks the call:
#   a (about 300 s, carry .peer): after session 61's mid tiles (t80x192, humming.h
#      grouped_tiles_mid), a dev build of the grouped W4A8 e2m1gc and W4A16 u4g128 tiles (every
#      height), test_moe.py's grouped-kernel tests, then the standings against humming-kernels
#      0.1.20: W4A16 at 1024 / 4096 tokens (not yet run with the mid tiles), W4A8 at 256 / 4096.
#   b (about 120 s, carry .peer; after a on the same machine, SKIP_BUILD=1): ncu of the W4A8 gate-up
#      GEMM of Qwen3-30B-A3B at 1024 tokens with the mid tile (t80x192, 0.96x the peer's layer) against
#      humming-kernels' 80 x 256 tile (session 61: 34.1 against 27.9 M instructions with t80x128);
#      then the W4A16 gate-up GEMM of Mixtral-8x7B at 4096 tokens (1024 rows per expert), ours and the peer's.
#   c (session 62, about 300 s): the two-block tile t128x256x64 (dense and grouped, experimental):
#      its GPU tests and its time against t128x128 / t256x128 (dense 5 layers at m = 1024-8192;
#      grouped at 128-1024 rows per expert).
#   d (about 200 s): t128x256x128 (two blocks, one fragment set; 3 or 4 stages) the same way, and
#      the grouped t128 / t256 heights at 128-1024 rows per expert.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
PART="${PART:-a}"
. scripts/build_filtered.sh
device_log "s62$PART.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
# tile_trial GROUPED DENSE TESTK DENSE_TIMED GROUPED_TIMED: a dev+experimental build of the W4A16
# u4g128 (sym and -zi) grouped lone tiles matching GROUPED and dense tiles matching DENSE (regular
# expressions of the names' tile part), the GPU tests of the dense tiles matching TESTK and of the
# grouped kernels, then the dense tiles DENSE_TIMED (comma-separated tile parts) timed over five
# layers at m = 1024-8192 and the grouped ones GROUPED_TIMED at 128-1024 rows per expert.
tile_trial() {
  local d=sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16 g=sm90_wgmma_moe_a-bf16_w-u4g128-sbf16_c-bf16
  HUMMING_PROFILE=dev+experimental build_filtered \
    "^sm90_wgmma_(moe_a-bf16_w-u4g128-sbf16(-zi)?_c-bf16_$1_lone|dense_a-bf16_w-u4g128-sbf16(-zi)?_c-bf16_$2)"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests dense test_gpu.py "$3"
  gpu_tests moe test_moe.py "sm90_kernels_matches"
  python3 scripts/time_shapes.py 28672x8192,8192x28672,8192x8192,28672x4096,4096x14336 1024,4096,8192 \
    --instances "$(echo "$4" | sed "s/[^,]*/${d}_&/g")" 2>&1 | log
  python3 scripts/moe_spill.py mixtral-8x7b:4096,mixtral-8x7b:1024,qwen3-30b-a3b:4096,deepseek-v3:4096 --w4a16 \
    --kinds random --instances "$(echo "$5" | sed "s/[^,]*/${g}_&/g")" 2>&1 | log
}

case "$PART" in
a)
  build_filtered "^sm90_wgmma_moe_a-(e4m3-pt_w-e2m1gc|bf16_w-u4g128)-sbf16_c-bf16_"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests test_moe test_moe.py "sm90_kernels"
  install_peer
  w4a16_moe_standing 1024,4096
  w4a8_moe_standing 256,4096
  ;;
b)
  SKIP_BUILD=1 MODEL=qwen3-30b-a3b TOKENS=1024 PART=gate-up MOE_ACT=e4m3-pt MOE_FORMAT=e2m1gc-sbf16 IMPLS="aot jit" \
    bash scripts/ncu_moe_peer.sh 2>&1 | log
  # W4A16 at 1024 rows per expert (0.83x the peer's layer at Mixtral-8x7B 4096 tokens): is our
  # t128x128 limited by L2 (the activation tile is read once per 128 channels) where the peer's tile is not?
  SKIP_BUILD=1 MODEL=mixtral-8x7b TOKENS=4096 PART=gate-up IMPLS="aot jit" bash scripts/ncu_moe_peer.sh 2>&1 | log
  ;;
c)
  # Two 64-channel blocks per consumer warpgroup (t128x256x64, Blocks = 2; experimental): the dense
  # and grouped W4A16 tiles against the reference, then timed against t128x128 / t256x128.
  tile_trial "t128x(128x128_w1x2x1_s4|256x64_w1x2x1_s6)" "t(128x128x128|128x256x64|256x128x64)_" t128x256 \
    t128x128x128_w1x2x1_s4,t128x256x64_w1x2x1_s6,t256x128x64_w1x2x1_s5 \
    t128x128x128_w1x2x1_s4_lone,t128x256x64_w1x2x1_s6_lone
  ;;
d)
  # Two-block tiles of 128 inputs a stage with one fragment set (t128x256x128 s3 / s4): GPU tests,
  # then timed as in c; and the grouped heights t128 / t256 at 256-1024 rows per expert (the
  # dispatcher takes t256x128x64 for Mixtral-8x7B's gate-up at 4096 tokens).
  tile_trial "t(128x128x128_w1x2x1_s4|128x256x128_w1x2x1_s3|256x128x64_w1x2x1_s5)" \
    "t(128x128x128|128x256x128|128x256x64)_" t128x256x128 \
    t128x128x128_w1x2x1_s4,t128x256x128_w1x2x1_s3,t128x256x128_w1x2x1_s4 \
    t128x128x128_w1x2x1_s4_lone,t128x256x128_w1x2x1_s3_lone,t256x128x64_w1x2x1_s5_lone
  ;;
*)
  echo "PART must be a, b, c or d" >&2
  exit 2
  ;;
esac
echo "all done at $(($(date +%s) - start)) s" | log
# The device tool returns only the first files under $OUT (by name): the log and reports in one archive, named first.
tar czf /tmp/0-s62.tgz -C "$OUT" --exclude=build.log . && mv /tmp/0-s62.tgz "$OUT/0-s62$PART.tgz"
