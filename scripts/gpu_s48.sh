#!/usr/bin/env bash
# On the lent GPU machine, session 48's calls; logs to $OUT/s48.txt, everything in $OUT/PART.tgz.
# PART=stream (the default): where the W4A8 decode pace stands against the weight stream's own
#   floor. scripts/mbench_rows.cu first (no build: the stage boxes of 4-bit codes read by TMA, in
#   the generic row order of layout 4 and in two block orders), then a dev build of the dense e2m1
#   per-channel layout-4 tiles, dense and grouped, A/B: A without KMAJOR_PATCH (default kmajor.patch,
#   untracked: `git diff -- include src` of layout 4's K-tile-major chunk order, layout/sm90_a8.h),
#   B with it (built with every layout-4 instance, $L4); kmajor_points on each, then B's GPU tests
#   (tests/test_gpu.py per-instance, graph, pack and dispatch; tests/test_moe.py QuantMoE,
#   permute-quantize and 8-bit activations).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s48.txt
# Every layout-4 instance (dense and grouped; e2m1, u4, i4; e4m3 and i8 activations), the u4g128 W4A16
# grouped tiles the QuantMoE tests need and the generic fallback.
L4="^(sm90_wgmma_(dense|moe)_.*_l4(_lone)?$|sm90_wgmma_moe_a-bf16_w-u4g128-sbf16_c-bf16|generic_dense_a-bf16_w-u4-s)"
# kmajor_points V: the A/B points of PART=stream for variant V: the GEMM alone (--prequant; the
#   dispatcher's choice) on three shapes at m = 1 and 64 and on 8192x8192 at 8192; the layer
#   (quantization + GEMM) at m = 1; the grouped GEMMs of Qwen3-30B-A3B at 64 and 1024 tokens and
#   of Mixtral-8x7B at 1024.
kmajor_points() {
  python3 scripts/time_shapes.py 28672x8192,8192x8192,8192x28672 1,64 --format e2m1gc-sbf16 --act e4m3-pt \
    --layout sm90a8 --prequant --graph --flush read --iters 20 2>&1 | sed "s/^/$1 gemm /" | log
  python3 scripts/time_shapes.py 8192x8192 8192 --format e2m1gc-sbf16 --act e4m3-pt \
    --layout sm90a8 --prequant --graph --flush read --iters 10 2>&1 | sed "s/^/$1 gemm /" | log
  python3 scripts/time_shapes.py 28672x8192,8192x8192 1 --format e2m1gc-sbf16 --act e4m3-pt \
    --layout sm90a8 --graph --flush read --iters 20 2>&1 | sed "s/^/$1 layer /" | log
  local mt
  for mt in qwen3-30b-a3b:64,1024 mixtral-8x7b:1024; do
    python3 scripts/bench_moe.py "$OUT/moe-$1-${mt%%:*}.json" --models "${mt%%:*}" --tokens "${mt#*:}" \
      --format e2m1gc-sbf16 --act e4m3-pt --impls humming-aot 2>&1 | grep -E "humming|rror" | sed "s/^/$1 moe /" | log
  done
}
if [ "${PART:-stream}" = stream ]; then
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
  nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 -I include scripts/mbench_rows.cu -o /tmp/mr && /tmp/mr 2>&1 \
    | sed "s/^/stream /" | log
  echo "stream done at $(($(date +%s) - start)) s" | log
  KP=${KMAJOR_PATCH:-kmajor.patch}
  F8="^(sm90_wgmma_(dense|moe)_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_.*_l4(_lone)?$|generic_dense_a-bf16_w-u4-s)"
  for v in A B; do
    # B builds every layout-4 instance and the u4g128 W4A16 grouped tiles the QuantMoE tests need.
    if [ $v = A ]; then patch -s -R -p1 < "$KP" || exit 1; else patch -s -p1 < "$KP" && F8="$L4" || exit 1; fi
    HUMMING_PROFILE=dev build_filtered "$F8"
    echo "$v build done at $(($(date +%s) - start)) s" | log
    kmajor_points $v
    echo "$v points done at $(($(date +%s) - start)) s" | log
  done
  gpu_tests "B test_gpu" test_gpu.py "instance_against or graph or pack or dispatch"
  gpu_tests "B test_moe" test_moe.py "quant_moe or permute or 8bit_activations"
  (cd "$OUT" && tar czf stream.tgz s48.txt moe-*.json)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=final (carry .peer): layout 4's K-tile-major order on every path that reads it: a dev build of
#   every layout-4 instance (dense and grouped; e2m1, u4, i4; e4m3 and i8 activations), the u4g128
#   W4A16 grouped tiles the QuantMoE tests need and the generic fallback; tests/test_gpu.py's
#   per-instance, graph, pack and dispatch tests, tests/test_moe.py's QuantMoE, permute-quantize and
#   8-bit activation tests; then the W4A8 e2m1 standing in one run with the peers (the harness against
#   cuBLASLt FP8 and humming-kernels 0.1.20 on the three headline shapes; scripts/bench_moe.py against
#   humming-kernels' W4A8 MoE). $OUT/final.tgz.
if [ "${PART:-stream}" = final ]; then
  HUMMING_PROFILE=dev build_filtered "$L4"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests "test_gpu" test_gpu.py "instance_against or graph or pack or dispatch"
  gpu_tests "test_moe" test_moe.py "quant_moe or permute or 8bit_activations"
  echo "tests done at $(($(date +%s) - start)) s" | log
  install_peer
  w4a8_standing
  (cd "$OUT" && tar czf final.tgz dense-w4a8* moe-standing-* s48.txt)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=ncu: the W4A8 decode GEMM under ncu, 28672x8192 at m = 1 (the dispatcher's t8x256 s6 tile of
#   layout 4), to tell what keeps it at 51.5 us where PART=stream's copy-only floor of the same
#   stage boxes took 42.4 (H100): scripts/ncu_a8.sh's sections with the SASS page (stall samples per
#   instruction), then, in a second run, ncu's PmSampling section (DRAM and SM throughput over the
#   kernel's time: start-up and tail) if this ncu has it. $OUT/0-ncu.tgz.
if [ "${PART:-stream}" = ncu ]; then
  I=sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t8x256x128_w1x4x1_s6_l4
  NCU_SOURCE=1 NCU_SPEC="28672 8192 1 e2m1gc-sbf16 $I w4a8_t8x256_m1 e4m3-pt sm90a8" bash scripts/ncu_a8.sh 2>&1 | log
  timeout 120 ncu --kernel-name regex:dense_kernel --launch-skip 2 --launch-count 1 --section PmSampling \
    --print-details all python3 scripts/profile_one.py 28672 8192 1 e2m1gc-sbf16 sm90a8 e4m3-pt "$I" \
    > "$OUT/ncu_pm_w4a8_t8x256_m1.txt" 2>&1
  echo "pm sampling rc=$? $(wc -l < "$OUT/ncu_pm_w4a8_t8x256_m1.txt") lines" | log
  (cd "$OUT" && tar czf 0-ncu.tgz --exclude=build.log --exclude=0-ncu.tgz .)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=decode: PART=plans, then PART=probe, in one call (one machine start): the plans' timings on a
#   normal build first, since the probe's diagnosis build must not be timed.
# PART=plans (not run in session 48): whether the decode plan's split of tiles over blocks, not the
#   loop, costs the W4A8 decode GEMM its time beyond PART=stream's floor (PART=ncu: SMs active 83 %
#   of the kernel). At m = 1, 112 tiles of t8x256 (28672 x 8192) spread over 132 blocks whose shares
#   cross tiles (two segments and a fix-up each); the comment on plan_persistent (scheduler/streamk.h)
#   records 8192 x 8192 at 23.4 us with 132 blocks over 32 tiles and 19.6 with 128 blocks, 4 a tile.
#   The GEMM alone (--prequant, dispatcher's choice) on five corpus shapes at m = 1 and 16 with the
#   default plan (HUMMING_STREAM_K=1), whole tiles only (0) and every launch spread (2), each in its
#   own process (the mode is read once per process); the same shapes forced to t8x128.
if [ "${PART:-stream}" = plans ] || [ "${PART:-stream}" = decode ]; then
  HUMMING_PROFILE=dev build_filtered "^(sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_.*_l4$|generic_dense_a-bf16_w-u4-s)"
  echo "build done at $(($(date +%s) - start)) s" | log
  S=28672x8192,8192x8192,8192x28672,5120x13824,4096x14336
  for mode in 1 0 2; do
    HUMMING_STREAM_K=$mode python3 scripts/time_shapes.py $S 1,16 --format e2m1gc-sbf16 --act e4m3-pt --layout sm90a8 \
      --prequant --graph --flush read --iters 30 2>&1 | sed "s/^/sk$mode /" | log
    HUMMING_STREAM_K=$mode python3 scripts/time_shapes.py $S 1 --format e2m1gc-sbf16 --act e4m3-pt --layout sm90a8 \
      --prequant --graph --flush read --iters 30 --match '_t8x128x128_w1x2x1_s8_l4$' 2>&1 | sed "s/^/sk$mode t8x128 /" | log
  done
  (cd "$OUT" && tar czf plans.tgz s48.txt)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=probe: where the W4A8 decode GEMM's time goes beyond its loop (PART=ncu: the SMs active
#   only 83 % of the kernel's cycles): the timeline probe (backend/sm90/probe.h; a diagnosis build
#   of the e2m1 per-channel layout-4 t8 tiles) at m = 1 on 28672x8192 and 8192x8192, the tile the
#   dispatcher takes and t8x128. $OUT/probe.tgz.
if [ "${PART:-stream}" = probe ] || [ "${PART:-stream}" = decode ]; then
  HUMMING_FILTER='^sm90_wgmma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t8x(128|256)x128_w1x[24]x1_s[68]_l4$|^generic_dense_a-bf16_w-u4-s' \
    bash scripts/probe_sm90.sh 28672x8192,8192x8192 1 --format e2m1gc-sbf16 --act e4m3-pt --reps 5 --match "_t8x" 2>&1 | log
  (cd "$OUT" && tar czf probe.tgz probe.txt probe.json s48.txt)
  echo "all done at $(($(date +%s) - start)) s" | log
fi
