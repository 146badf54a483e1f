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
# The grouped e2m1 per-channel W4A8 tiles and the dense layout-4 ones (PART=inflight, prefetch).
A8D='^(sm90_wgmma_moe_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16|sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t.*_l4$|generic_dense_a-bf16_w-u4-s)'
# ab_builds FLAG FILTER FUNC: a dev build of FILTER with CUDAFLAGS=FLAG ("A"), FUNC A, then one
# without ("B"), FUNC B.
ab_builds() {
  local v
  for v in A B; do
    CUDAFLAGS=$([ $v = A ] && echo "$1") HUMMING_PROFILE=dev build_filtered "$2"
    echo "$v build done at $(($(date +%s) - start)) s" | log
    "$3" $v
  done
}
# w4a8_tests K: tests/test_moe.py's 8-bit activation grouped tests and tests/test_gpu.py's tests
# selected by K, on the build.
w4a8_tests() {
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs -k "8bit_activations" 2>&1 | tail -2 \
    | sed "s/^/test_moe /" | log
  python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -rfs -k "$1" 2>&1 | tail -2 | sed "s/^/test_gpu /" | log
}
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
# PART=inflight: an A/B of the W4A8 consumers' main loop with a group kept in flight
#   (a8_mainloops.h mainloop_inflight, DenseA8::kInflight, tiles of HUMMING_SM90_A8_INFLIGHT tokens
#   and more): A built with -DHUMMING_SM90_A8_INFLIGHT=100000 (never: the loops before), B with
#   the default (48). Each a dev build of the grouped e2m1 per-channel W4A8 tiles and the dense
#   e2m1 per-channel layout-4 ones; scripts/bench_moe.py's default choice on Qwen3-30B-A3B and
#   Mixtral-8x7B at 256 and 1024 tokens and DeepSeek-V3 at 1024 ($OUT/moe-inflight-{A,B}.json),
#   and the dense tiles of 64 and 128 tokens (scripts/time_shapes.py, GEMM alone, graph us after a
#   read flush) on 8192x8192 and 28672x8192 at m = 64, 256, 2048 and 8192; then on B
#   tests/test_moe.py's 8-bit activation grouped tests and tests/test_gpu.py's per-instance tests
#   of the W4A8 dense tiles. (Run at a3409da; the macro existed up to 69bb62a, which took it out
#   with mainloop_prefetched.)
inflight_points() { # $1: the variant
  local mt
  for mt in qwen3-30b-a3b:256,1024 mixtral-8x7b:256,1024 deepseek-v3:1024; do
    python3 scripts/bench_moe.py "$OUT/moe-inflight-$1-${mt%%:*}.json" --models "${mt%%:*}" --tokens "${mt#*:}" \
      --format e2m1gc-sbf16 --act e4m3-pt --impls humming-aot 2>&1 | grep -E "humming|rror" | sed "s/^/$1 moe /" | log
  done
  python3 scripts/time_shapes.py 8192x8192,28672x8192 64,256,2048,8192 --format e2m1gc-sbf16 --act e4m3-pt \
    --layout sm90a8 --prequant --graph --flush read --iters 20 \
    --match 'sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t(64|128)x.*_l4$' 2>&1 | sed "s/^/$1 dense /" | log
}
if [ "${PART:-ncu}" = inflight ]; then
  ab_builds -DHUMMING_SM90_A8_INFLIGHT=100000 "$A8D" inflight_points
  w4a8_tests "instance_against or graph"
  (cd "$OUT" && tar czf inflight.tgz moe-inflight-* s45.txt && rm -f moe-inflight-*)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=quant: activation quantization through the scale's reciprocal and a warp per short row
#   (src/quantize_act.cu), then the standing against humming-kernels. QUANT_PATCH (default
#   q.patch, untracked: `git diff src/quantize_act.cu`) is taken out for A and put back for B
#   (only that file rebuilds): scripts/bench_quantize_act.py on bf16 rows of 768, 2048, 4096 and
#   8192 inputs at 1024 and 8192 rows and 8192 x 28672 (e4m3-pt, e4m3-g128, i8-pt;
#   $OUT/quant-{A,B}.json). On B: tests/test_gpu.py's quantize tests (bit for bit against the
#   CPU path), the per-instance and graph tests and tests/test_moe.py's grouped sm90 tests; then
#   scripts/bench_moe.py with humming-kernels (carry .peer) on Qwen3-30B-A3B and Mixtral-8x7B at
#   64, 256 and 1024 tokens, W4A8 e2m1 per channel x e4m3 per token ($OUT/moe-standing-w4a8.json).
#   Everything in $OUT/quant.tgz.
if [ "${PART:-ncu}" = quant ]; then
  QP=${QUANT_PATCH:-q.patch}
  F='^(sm90_wgmma_moe_a-(e4m3-pt_w-e2m1gc-sbf16|bf16_w-u4g128-sbf16)_c-bf16|sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t.*_l4$|generic_dense_a-bf16_w-u4-s)'
  QS=1024x768,1024x2048,8192x768,8192x2048,8192x4096,8192x8192,8192x28672
  for v in A B; do
    if [ $v = A ]; then patch -s -R -p1 < "$QP" || exit 1; else patch -s -p1 < "$QP" || exit 1; fi
    HUMMING_PROFILE=dev build_filtered "$F"
    echo "$v build done at $(($(date +%s) - start)) s" | log
    python3 scripts/bench_quantize_act.py --out "$OUT/quant-$v.json" --impls humming-aot --formats e4m3-pt,e4m3-g128,i8-pt \
      --shapes $QS 2>&1 | sed "s/^/$v quant /" | cut -c1-220 | log
  done
  python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -rfs -k "quantize or instance_against or graph" 2>&1 \
    | tail -3 | sed "s/^/test_gpu /" | log
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs -k "sm90" 2>&1 | tail -3 | sed "s/^/test_moe /" | log
  install_peer
  PYTHONPATH=/tmp/peer python3 scripts/bench_moe.py "$OUT/moe-standing-w4a8.json" --models qwen3-30b-a3b,mixtral-8x7b \
    --tokens 64,256,1024 --format e2m1gc-sbf16 --act e4m3-pt --jit-config w4a8 --impls humming-aot,humming-jit \
    --jit-budget-s 170 2>&1 | grep -E "humming|rror" | grep -v "\[jit\]" | sed "s/^/standing w4a8 /" | log
  (cd "$OUT" && tar czf quant.tgz quant-*.json moe-standing-* s45.txt && rm -f quant-*.json moe-standing-*)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=prefetch: an A/B of the epilogue's scale prefetch (a8_epilogue.h A8Epilogue::prefetch: the
#   token and channel scales the stores read, brought into L1 before the main loop): A built with
#   -DHUMMING_SM90_EPILOGUE_PREFETCH=0, B with the default (on). Each a dev build of the grouped
#   e2m1 per-channel W4A8 tiles and the dense e2m1 per-channel layout-4 ones; scripts/bench_moe.py's
#   default choice on Qwen3-30B-A3B and Mixtral-8x7B at 256 and 1024 tokens
#   ($OUT/moe-prefetch-{A,B}.json); on B also every tile height near the mean at Qwen3-30B-A3B 1024
#   tokens and Mixtral-8x7B 256 (w4a8_heights), tests/test_moe.py's 8-bit activation grouped tests
#   and tests/test_gpu.py's per-instance tests. Everything in $OUT/prefetch.tgz. (Run at 5dc4ff9; no
#   gain, reverted in the next commit: the macro and A8Epilogue::prefetch exist only in that tree.)
prefetch_points() { # $1: the variant
  python3 scripts/bench_moe.py "$OUT/moe-prefetch-$1.json" --models qwen3-30b-a3b,mixtral-8x7b --tokens 256,1024 \
    --format e2m1gc-sbf16 --act e4m3-pt --impls humming-aot 2>&1 | grep -E "humming|rror" | sed "s/^/$1 moe /" | log
}
if [ "${PART:-ncu}" = prefetch ]; then
  ab_builds -DHUMMING_SM90_EPILOGUE_PREFETCH=0 "$A8D" prefetch_points
  w4a8_heights heights-B qwen3-30b-a3b:1024 mixtral-8x7b:256
  w4a8_tests "instance_against or graph"
  (cd "$OUT" && tar czf prefetch.tgz moe-prefetch-* moe-heights-B-* s45.txt && rm -f moe-prefetch-* moe-heights-B-*)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=cover: the GPU tests of the other W4A8 tiles that take mainloop_inflight (two consumers, 48
#   tokens and more): a dev build of the grouped and dense u4 / i4 / e2m1 tiles per channel and per
#   128 inputs (but e2m1 per channel, tested in the calls before), tests/test_gpu.py's per-instance
#   tests and tests/test_moe.py's 8-bit activation grouped tests.
if [ "${PART:-ncu}" = cover ]; then
  HUMMING_PROFILE=dev build_filtered \
    '^(sm90_wgmma_(moe|dense)_a-e4m3-pt_w-(u4gc|u4g128|i4gc|e2m1g128)-sbf16_c-bf16_t(48|64|80|128)x128x128_w1x2x1|generic_dense_a-bf16_w-u4-s)'
  python3 -c "import humming_aot.registry as r; print(len(list(r.instances())), 'instances')" 2>&1 | log
  w4a8_tests instance_against
  echo "all done at $(($(date +%s) - start)) s" | log
fi
