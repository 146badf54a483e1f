#!/usr/bin/env bash
# On the lent GPU machine, session 49's calls; logs to $OUT/s49.txt, everything in $OUT/0-PART.tgz.
# PART=ab (the default): the stream-K fix-up of the persistent sm90 kernels (epilogue/streamk_fixup.h:
#   the tile's first contributor finishes it, waiting for the others' count, instead of the last to
#   count reading every partial back), A/B: A without FIXUP_PATCH (default fixup.patch, untracked:
#   `git diff -- include` of the change), B with it. On each: the W4A8 e2m1 per-channel GEMM alone
#   (--prequant, dispatcher's choice, graph, read flush) on five corpus shapes at m = 1 and 16 with
#   the default plan (HUMMING_STREAM_K=1) and with whole tiles only (0), the same forced to t8x128
#   at m = 1; the W4A16 u4g128 GEMM on three shapes at m = 1 and 16 (1 and 0). Then B's GPU tests
#   (as PART=check's).
# PART=check (after ab, on the same machine: SKIP_BUILD reuses B's build): B's GPU tests
#   (tests/test_gpu.py per-instance, split-K determinism, graph, pack and dispatch; tests/test_moe.py
#   QuantMoE, permute-quantize and 8-bit activations), then the timeline probe of B (a diagnosis
#   build) at m = 1 on 28672x8192 and 8192x8192.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s49.txt
S5=28672x8192,8192x8192,8192x28672,5120x13824,4096x14336
A8="--format e2m1gc-sbf16 --act e4m3-pt --layout sm90a8 --prequant --graph --flush read --iters 30"
W16="--format u4g128-sbf16 --layout sm90 --graph --flush read --iters 30"
# Every layout-4 instance, the u4g128 W4A16 dense and grouped sm90 tiles, and the generic fallback.
ALL="^(sm90_wgmma_(dense|moe)_.*_l4(_lone)?$|sm90_wgmma_(dense|moe)_a-bf16_w-u4g128-sbf16_c-bf16_|generic_dense_a-bf16_w-u4-s)"
# The tiles PART=ab times: the W4A8 e2m1 and W4A16 u4g128 dense decode tiles.
FEW="^(sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t(8|16)x.*_l4$|sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t(8|16)x|generic_dense_a-bf16_w-u4-s)"
# fixup_points V: PART=ab's timings of variant V.
fixup_points() {
  local mode
  for mode in 1 0; do
    HUMMING_STREAM_K=$mode python3 scripts/time_shapes.py $S5 1,16 $A8 2>&1 | sed "s/^/$1 sk$mode a8 /" | log
    HUMMING_STREAM_K=$mode python3 scripts/time_shapes.py 28672x8192,8192x8192,5120x13824 1,16 $W16 2>&1 \
      | sed "s/^/$1 sk$mode w16 /" | log
  done
  python3 scripts/time_shapes.py $S5 1 $A8 --match '_t8x128x128_w1x2x1_s8_l4$' 2>&1 | sed "s/^/$1 sk1 a8 t8x128 /" | log
}
if [ "${PART:-ab}" = ab ]; then
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
  FP=${FIXUP_PATCH:-fixup.patch}
  for v in A B; do
    # A builds only the tiles its points time; B every one PART=check's tests need.
    if [ $v = A ]; then patch -s -R -p1 < "$FP" || exit 1; else patch -s -p1 < "$FP" || exit 1; fi
    HUMMING_PROFILE=dev build_filtered "$([ $v = A ] && echo "$FEW" || echo "$ALL")"
    echo "$v build done at $(($(date +%s) - start)) s" | log
    fixup_points $v
    echo "$v points done at $(($(date +%s) - start)) s" | log
  done
  gpu_tests "B test_gpu" test_gpu.py "instance_against or split_k or graph or pack or dispatch"
  gpu_tests "B test_moe" test_moe.py "quant_moe or permute or 8bit_activations"
  (cd "$OUT" && tar czf 0-ab.tgz s49.txt)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
if [ "${PART:-ab}" = check ]; then
  HUMMING_PROFILE=dev build_filtered "$ALL"
  gpu_tests "test_gpu" test_gpu.py "instance_against or split_k or graph or pack or dispatch"
  gpu_tests "test_moe" test_moe.py "quant_moe or permute or 8bit_activations"
  echo "tests done at $(($(date +%s) - start)) s" | log
  HUMMING_FILTER='^sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t8x(128|256)x128_w1x[24]x1_s[68]_l4$|^generic_dense_a-bf16_w-u4-s' \
    bash scripts/probe_sm90.sh 28672x8192,8192x8192 1 --format e2m1gc-sbf16 --act e4m3-pt --reps 5 --match "_t8x" 2>&1 | log
  (cd "$OUT" && tar czf 0-check.tgz probe.txt probe.json s49.txt)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=final (carry .peer): the fix-up and the decode plan's rule for busy last waves
#   (scheduler/streamk.h, kPersistentDecodeBusyNum / Den): a dev build of every tile PART=ab's B
#   built, the GPU tests, the decode points of the dispatcher's choice on the five shapes (W4A8 and
#   W4A16, m = 1 and 16; t8x128 forced on 28672 x 8192, 224 tiles whose second wave of 92 now stays
#   whole), then the dense W4A8 e2m1 decode standing in one run with the peers (m = 1 to 256).
if [ "${PART:-ab}" = final ]; then
  HUMMING_PROFILE=dev build_filtered "$ALL"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests "test_gpu" test_gpu.py "instance_against or split_k or graph or pack or dispatch"
  gpu_tests "test_moe" test_moe.py "quant_moe or permute or 8bit_activations"
  echo "tests done at $(($(date +%s) - start)) s" | log
  # HUMMING_STREAM_K=2 plans decode launches as before the rule (every launch of a partial wave
  # spread); 1 is the rule. 16384 x 2048 and 16384 x 3072 at m = 4 are where the dispatcher's
  # estimates now take t16x128 whole (128 tiles) against session 16's H200 sweep, which timed it
  # spread.
  local_mode() {
    HUMMING_STREAM_K=$1 python3 scripts/time_shapes.py $S5 1,16 $A8 2>&1 | sed "s/^/final sk$1 a8 /" | log
    HUMMING_STREAM_K=$1 python3 scripts/time_shapes.py 28672x8192,8192x8192,5120x13824,16384x2048,16384x3072 1,4,16 $W16 \
      2>&1 | sed "s/^/final sk$1 w16 /" | log
  }
  local_mode 1
  local_mode 2
  python3 scripts/time_shapes.py 28672x8192 1 $A8 --match '^sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t8x128x128_w1x2x1_s8_l4$' 2>&1 \
    | sed "s/^/final a8 t8x128 /" | log
  python3 scripts/time_shapes.py 28672x8192 1 $W16 --match '^sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t8x128x128_w1x2x1_s8$' 2>&1 \
    | sed "s/^/final w16 t8x128 /" | log
  echo "points done at $(($(date +%s) - start)) s" | log
  install_peer
  # The dense half of w4a8_standing: the grouped (MoE) kernels have no stream-K fix-up and no
  # persistent dense plan, so this session changed nothing they run.
  PYTHONPATH=/tmp/peer python3 -m humming_aot.bench --shapes 28672x8192,8192x8192,8192x28672 --ms 1,16,64,256 \
    --formats w4a8 --impls humming-aot,cublaslt-fp8,humming-jit --jit-formats w4a8 --out-dir "$OUT" \
    --name dense-w4a8 --no-plot --time-budget-s 150 2>&1 | tail -40 | sed "s/^/dense /" | log
  HUMMING_STREAM_K=2 python3 scripts/time_shapes.py 16384x2048,16384x3072 4 $W16 --match '^sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t' \
    2>&1 | sed "s/^/final sk2 w16 every /" | log
  python3 scripts/time_shapes.py 16384x2048,16384x3072 4 $W16 --match '^sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t' \
    2>&1 | sed "s/^/final sk1 w16 every /" | log
  (cd "$OUT" && tar czf 0-final.tgz dense-w4a8* s49.txt)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
