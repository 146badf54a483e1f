#!/usr/bin/env bash
# On the lent GPU machine, session 45's calls; logs to $OUT/s45.txt.
# PART=ncu (the default): why the grouped W4A8 MoE GEMMs at 64 rows per expert run at 0.67x of
#   humming-kernels (session 44, Qwen3-30B-A3B at 1024 tokens): a dev build of the grouped e2m1
#   per-channel W4A8 tiles, then scripts/ncu_moe_peer.sh with MOE_ACT=e4m3-pt (the rows quantized
#   per token inside the profiled range on both sides) on Qwen3-30B-A3B at 1024 tokens: gate-up by
#   humming-aot's default choice (t80 lone), by its t64x256 twin and by humming-kernels, each with
#   the SASS page summed (NCU_SOURCE=1); then down by both without it. Carry .peer.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s45.txt
A8='^(sm90_wgmma_moe_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16|generic_dense_a-bf16_w-u4-s)'
if [ "${PART:-ncu}" = ncu ]; then
  HUMMING_PROFILE=dev build_filtered "$A8"
  echo "build took $(($(date +%s) - start)) s" | log
  export MOE_ACT=e4m3-pt MOE_FORMAT=e2m1gc-sbf16 MODEL=qwen3-30b-a3b TOKENS=${TOKENS:-1024} SKIP_BUILD=1
  NCU_SOURCE=1 PART=gate-up IMPLS="aot jit" bash scripts/ncu_moe_peer.sh 2>&1 | log
  NCU_SOURCE=1 PART=gate-up IMPLS=aot MOE_INSTANCE=sm90_wgmma_moe_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t64x256x128_w1x4x1_s6_l4 \
    bash scripts/ncu_moe_peer.sh 2>&1 | log
  PART=down IMPLS="aot jit" bash scripts/ncu_moe_peer.sh 2>&1 | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=epi: an A/B of the grouped tiles' direct stores (epilogue/wgmma_store.h: every token scale
#   loaded before the first store; short tiles, whose rows end at their expert's last, on the path
#   without per-pair checks). EPI_PATCH (default epi.patch, untracked: `git diff include/`) is
#   taken out for A and put back for B, each a dev build of the grouped e2m1 per-channel W4A8 and
#   u4g128 W4A16 tiles; scripts/bench_moe.py's default choice on Qwen3-30B-A3B and Mixtral-8x7B at
#   64, 256 and 1024 tokens, W4A8 (e4m3 per-token rows quantized in each call) and W4A16
#   ($OUT/moe-epi-{A,B}-{w4a8,w4a16}.json); then tests/test_moe.py's grouped sm90 tests on B.
moe_points() { # $1: variant letter
  python3 scripts/bench_moe.py "$OUT/moe-epi-$1-w4a8.json" --models qwen3-30b-a3b,mixtral-8x7b --tokens 64,256,1024 \
    --format e2m1gc-sbf16 --act e4m3-pt --impls humming-aot 2>&1 | grep -E "humming|rror" | sed "s/^/$1 w4a8 /" | log
  python3 scripts/bench_moe.py "$OUT/moe-epi-$1-w4a16.json" --models qwen3-30b-a3b,mixtral-8x7b --tokens 64,256,1024 \
    --impls humming-aot 2>&1 | grep -E "humming|rror" | sed "s/^/$1 w4a16 /" | log
}
if [ "${PART:-ncu}" = epi ]; then
  EP=${EPI_PATCH:-epi.patch}
  F='^(sm90_wgmma_moe_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16|sm90_wgmma_moe_a-bf16_w-u4g128-sbf16_c-bf16_t|generic_dense_a-bf16_w-u4-s)'
  patch -s -R -p1 < "$EP" || exit 1
  HUMMING_PROFILE=dev build_filtered "$F"
  echo "A build done at $(($(date +%s) - start)) s" | log
  moe_points A
  patch -s -p1 < "$EP" || exit 1
  HUMMING_PROFILE=dev build_filtered "$F"
  echo "B build done at $(($(date +%s) - start)) s" | log
  moe_points B
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs -k "sm90" 2>&1 | tail -6 | sed "s/^/test_moe /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=ncu2: PART=ncu again after the stores change (humming-aot's default choice on gate-up and
#   down with the SASS page summed, humming-kernels' gate-up), everything in $OUT/ncu2.tgz (a call
#   brings back only a few files).
if [ "${PART:-ncu}" = ncu2 ]; then
  HUMMING_PROFILE=dev build_filtered "$A8"
  echo "build took $(($(date +%s) - start)) s" | log
  export MOE_ACT=e4m3-pt MOE_FORMAT=e2m1gc-sbf16 MODEL=qwen3-30b-a3b TOKENS=${TOKENS:-1024} SKIP_BUILD=1
  NCU_SOURCE=1 PART=gate-up IMPLS="aot jit" bash scripts/ncu_moe_peer.sh 2>&1 | log
  NCU_SOURCE=1 PART=down IMPLS=aot bash scripts/ncu_moe_peer.sh 2>&1 | log
  (cd "$OUT" && tar czf ncu2.tgz ncu_moe_* s45.txt && rm -f ncu_moe_*)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
