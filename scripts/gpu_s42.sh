#!/usr/bin/env bash
# On the lent GPU machine, session 42's calls; logs to $OUT/s42.txt.
# PART=a (the default): one build (dev+experimental) of every grouped sm90 instance with 8-bit
#   activations (tools/matrix/sm90_a8_moe.json: FP8 blocks, per-channel FP8, the experimental _lone
#   FP8 twins and the experimental grouped W4A8 tiles), the dense ones of the same formats (the
#   per-expert loops they are timed against, and session 41's dense kernel edits), one i8 tile and
#   the generic instances the tests fall back to; then
#   1. tests/test_moe.py's 8-bit tests (every built grouped 8-bit tile, W4A8 included) and
#      tests/test_gpu.py's per-instance tests of the dense 8-bit tiles;
#   2. scripts/bench_moe_a8.py: the lone walk against the warp's ($OUT/moe-a8-lone.json), grouped
#      W4A8 (e2m1 and u4 g128 experts in layout 4) against its per-expert loop and cuBLASLt FP8's
#      ($OUT/moe-w4a8-*.json), per-channel FP8 ($OUT/moe-a8-channels.json) and whole FP8 QuantMoE
#      layers ($OUT/moe-a8-layers.json).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s42.txt
F='^(sm90_wgmma_moe_a-e4m3|sm90_wgmma_dense_a-e4m3-(g128_w-e4m3g128n128-sf32|pt_w-e4m3gc-sf32)_c-bf16|'
F+='sm90_wgmma_dense_a-e4m3-pt_w-(e2m1gc|u4g128)-sbf16_c-bf16_.*_l4|'
F+='sm90_wgmma_dense_a-i8-pt_w-i8gc-sbf16_c-bf16_t16x|generic_dense_a-bf16_w-u4-s)'
if [ "${PART:-a}" = a ]; then
  HUMMING_PROFILE=dev+experimental build_filtered "$F"
  echo "build took $(($(date +%s) - start)) s" | log
  python3 -c "from humming_aot import registry; print(len(registry.instances()), 'instances')" 2>&1 | log
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rf -k "8bit or fp8" 2>&1 | tail -12 | sed "s/^/test_moe /" | log
  python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -rf -k \
    "instance_against or output_rows or block_scaled or split_k or subnormal or waves or rings or heavy or w8a8" \
    2>&1 | tail -12 | sed "s/^/test_gpu /" | log
  echo "tests done at $(($(date +%s) - start)) s" | log
  python3 scripts/bench_moe_a8.py "$OUT/moe-a8-lone.json" --iters 20 \
    --impls humming-aot,humming-aot=_t64x128x128_w1x2x1_s8,humming-aot=_t64x128x128_w1x2x1_s8_lone,humming-aot=_t192x128x128_w3x1x1_s4,humming-aot=_t192x128x128_w3x1x1_s4_lone,humming-aot=_t128x128x128_w2x1x1_s5,humming-aot=_t128x128x128_w2x1x1_s5_lone \
    --cases "deepseek-v3:gate_up:256,1024,4096;4x8192" 2>&1 | tail -30 | sed "s/^/a8 lone /" | log
fi
# PART=w: the same build, then only the grouped W4A8 bench of PART=a.
if [ "${PART:-a}" = w ]; then
  HUMMING_PROFILE=dev+experimental build_filtered "$F"
  echo "build took $(($(date +%s) - start)) s" | log
fi
if [ "${PART:-a}" = a ] || [ "${PART:-a}" = w ]; then
  for w in e2m1gc u4g128; do
    python3 scripts/bench_moe_a8.py "$OUT/moe-w4a8-$w.json" --format "$w-sbf16:e4m3-pt" --layout sm90a8 \
      --impls humming-aot,humming-aot=_t8x,humming-aot=_t16x,humming-aot=_t32x,humming-aot=_t64x,humming-aot=_t128x,humming-aot-loop,cublaslt-fp8-loop \
      --cases "qwen3-30b-a3b:gate_up:1,64,1024;gpt-oss-120b:gate_up:1,64,1024;deepseek-v3:gate_up:64,4096" \
      2>&1 | tail -70 | sed "s/^/w4a8 $w /" | log
  done
fi
if [ "${PART:-a}" = a ]; then
  python3 scripts/bench_moe_a8.py "$OUT/moe-a8-channels.json" --format e4m3gc-sf32:e4m3-pt \
    --cases "deepseek-v3:gate_up:1,64,1024,4096;4x8192" 2>&1 | tail -25 | sed "s/^/a8 pc /" | log
  python3 scripts/bench_moe_a8.py "$OUT/moe-a8-layers.json" --impls humming-aot,cublaslt-fp8-loop \
    --cases "qwen3-30b-a3b:gate_up:1,64,1024;qwen3-30b-a3b:down:1,64,1024;qwen3-30b-a3b:layer:1,64,1024;deepseek-v3:down:1,1024;deepseek-v3:layer:1,64,1024" \
    2>&1 | tail -30 | sed "s/^/a8 layer /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=waves: the stream-K tail of persistent launches of more than 8 waves
# (HUMMING_PERSISTENT_MAX_WAVES=64 against the default 8) on the FP8 block kernel's dense tiles
# t192n128s4 and t128n128s5 and the per-channel t128x192 s5, with cuBLASLt's FP8 GEMM in the same
# run (scripts/time_shapes.py, GEMM alone, graph us after a read flush), and bench_moe_a8 on 4 x 8192
# and 8 x 4096 rows (grouped: no stream-K). Session 42 ran this as PART=ab, twice on one build
# directory: with the tokens-M block tiles reading a stage's scales before its group retired, then
# without (7-12 % slower with it on the H100: reverted; benchmarks/results/h100/tuning/h100-2026-12-06-s42-README.md).
if [ "${PART:-a}" = waves ]; then
  AB='^(sm90_wgmma_dense_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16_t(192x128x128_w3x1x1_s4|128x128x128_w2x1x1_s5)|'
  AB+='sm90_wgmma_dense_a-e4m3-pt_w-e4m3gc-sf32_c-bf16_t128x192x128_w1x3x1_s5|'
  AB+='sm90_wgmma_moe_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16_t192x128x128_w3x1x1_s4|generic_dense_a-bf16_w-u4-s)'
  B=sm90_wgmma_dense_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16_t
  SHAPES="${SHAPES:-7168x16384,4096x7168,18432x7168,7168x18432}"
  HUMMING_PROFILE=dev build_filtered "$AB"
  echo "build took $(($(date +%s) - start)) s" | log
  python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -rf -k "instance_against or block_scaled or output_rows or split_k or waves" \
    2>&1 | tail -4 | sed "s/^/test_gpu /" | log
  for waves in 8 64; do
    HUMMING_PERSISTENT_MAX_WAVES=$waves python3 scripts/time_shapes.py "$SHAPES" 4096,8192 --format e4m3g128n128-sf32 \
      --act e4m3-g128 --prequant --graph --flush read --iters 20 $([ $waves = 8 ] && echo --cublaslt) \
      --instances ${B}192x128x128_w3x1x1_s4,${B}128x128x128_w2x1x1_s5 2>&1 | sed "s/^/waves=$waves blk /" | log
    HUMMING_PERSISTENT_MAX_WAVES=$waves python3 scripts/time_shapes.py "$SHAPES" 4096,8192 --format e4m3gc-sf32 \
      --act e4m3-pt --prequant --graph --flush read --iters 20 \
      --instances sm90_wgmma_dense_a-e4m3-pt_w-e4m3gc-sf32_c-bf16_t128x192x128_w1x3x1_s5 2>&1 | sed "s/^/waves=$waves pc /" | log
  done
  python3 scripts/bench_moe_a8.py "$OUT/moe-a8-4x8192.json" --iters 20 --cases "4x8192;8x4096" \
    --impls humming-aot,cublaslt-fp8-loop 2>&1 | tail -4 | sed "s/^/moe /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=v: the grouped 8-bit tiles promoted to dev this session (the W4A8 tiles, the FP8 block _lone
# twins t64l and t128n128s5l) and the new grouped per-channel FP8 tile t128c3 (128 tokens x 192
# channels, the dense per-channel table's choice from 4096 tokens): a dev build of the grouped 8-bit
# instances, tests/test_moe.py's 8-bit tests (every built grouped 8-bit tile), per-channel FP8 on
# DeepSeek-V3's gate-up and 4 x 8192 ($OUT/moe-a8-channels.json, the new tile forced too) and whole
# W4A8 QuantMoE layers (e2m1 per channel, layout 4; $OUT/moe-w4a8-layers.json).
if [ "${PART:-a}" = v ]; then
  HUMMING_PROFILE=dev build_filtered '^(sm90_wgmma_moe_a-e4m3|sm90_wgmma_dense_a-e4m3-pt_w-e4m3gc-sf32_c-bf16_t128x192x128_w1x3x1_s5|generic_dense_a-bf16_w-u4-s)'
  echo "build took $(($(date +%s) - start)) s" | log
  python3 -c "from humming_aot import registry; print(len(registry.instances()), 'instances')" 2>&1 | log
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rf -k "8bit or fp8" 2>&1 | tail -6 | sed "s/^/test_moe /" | log
  python3 scripts/bench_moe_a8.py "$OUT/moe-a8-channels.json" --format e4m3gc-sf32:e4m3-pt --iters 20 \
    --impls humming-aot,humming-aot=_t128x128x128_,humming-aot=_t128x192x128_,cublaslt-fp8-loop \
    --cases "deepseek-v3:gate_up:1024,4096;4x8192;8x4096" 2>&1 | tail -20 | sed "s/^/a8 pc /" | log
  python3 scripts/bench_moe_a8.py "$OUT/moe-w4a8-layers.json" --format e2m1gc-sbf16:e4m3-pt --layout sm90a8 \
    --impls humming-aot --cases "qwen3-30b-a3b:layer:1,64,1024;gpt-oss-120b:layer:1,64,1024" 2>&1 | tail -8 \
    | sed "s/^/w4a8 layer /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=jit (carry .peer): where MoE stands against humming-kernels 0.1.20 on this code: a dev build
# of the grouped u4g128 bf16 instances (W4A16) and the grouped W4A8 u4g128 ones (layout 4), then
# scripts/bench_moe.py (W4A16, gate-up + down, with humming-kernels' grouped GEMM in a child) on
# Qwen3-30B-A3B and Mixtral-8x7B at 1 to 1024 tokens ($OUT/moe-w4a16-jit.json / .md), and
# bench_moe_a8.py on the same models' GEMMs in W4A8 ($OUT/moe-w4a8-u4g128.json).
if [ "${PART:-a}" = jit ]; then
  HUMMING_PROFILE=dev build_filtered '^(sm90_wgmma_moe_a-bf16_w-u4g128-sbf16_c-bf16|sm90_wgmma_moe_a-e4m3-pt_w-u4g128-sbf16_c-bf16|generic_dense_a-bf16_w-u4-s)'
  echo "build took $(($(date +%s) - start)) s" | log
  peer=/tmp/peer
  # pip keeps the wheel's launcher executable (zipfile -e does not: PermissionError on nvrtc_compile).
  python3 -m pip install -q --no-deps --no-index --upgrade --target "$peer" .peer/humming_kernels-0.1.20-*.whl
  PYTHONPATH="$peer" python3 scripts/bench_moe.py "$OUT/moe-w4a16-jit.json" --models qwen3-30b-a3b,mixtral-8x7b \
    --tokens 1,8,64,256,1024 --impls humming-aot,humming-jit --jit-budget-s 360 2>&1 | grep -E "humming|rror" \
    | sed "s/^/w4a16 /" | log
  echo "w4a16 done at $(($(date +%s) - start)) s" | log
  [ "${A8:-1}" = 1 ] && python3 scripts/bench_moe_a8.py "$OUT/moe-w4a8-u4g128.json" --format u4g128-sbf16:e4m3-pt --layout sm90a8 \
    --impls humming-aot --cases "qwen3-30b-a3b:gate_up:1,8,64,256,1024;qwen3-30b-a3b:down:1,8,64,256,1024;mixtral-8x7b:gate_up:1,8,64,256,1024;mixtral-8x7b:down:1,8,64,256,1024" \
    2>&1 | tail -20 | sed "s/^/w4a8 /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=opaque: an A/B of the sm90 kernels' ring base kept in a register (HUMMING_SM90_OPAQUE_RING,
# backend/sm90/pipeline.h run_block) against ptxas rematerializing it at every stage from the
# shared window (S2UR SR_CgaCtaId and a dependent chain before each stage's first WGMMA, ncu of
# session 42): one build directory built without, timed, rebuilt with, timed (FP8 block t192n128s4 /
# t128n128s5, per-channel t128x192 s5, weight-only u4g128 t128 and t64; GEMM alone, graph us after a
# read flush). (Session 42's run also counted S2UR in each build's SASS, but its filter found no
# kernel; taken out.)
if [ "${PART:-a}" = opaque ]; then
  OP='^(sm90_wgmma_dense_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16_t(192x128x128_w3x1x1_s4|128x128x128_w2x1x1_s5)|'
  OP+='sm90_wgmma_dense_a-e4m3-pt_w-e4m3gc-sf32_c-bf16_t128x192x128_w1x3x1_s5|'
  OP+='sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t(128x128x128_w1x2x1_s4|64x128x128_w1x2x1_s5)|generic_dense_a-bf16_w-u4-s)'
  B=sm90_wgmma_dense_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16_t
  for v in 0 1; do
    CUDAFLAGS=$([ $v = 1 ] && echo -DHUMMING_SM90_OPAQUE_RING) HUMMING_PROFILE=dev build_filtered "$OP"
    echo "opaque=$v build done at $(($(date +%s) - start)) s" | log
    python3 scripts/time_shapes.py 7168x16384,18432x7168 4096,8192 --format e4m3g128n128-sf32 --act e4m3-g128 --prequant \
      --graph --flush read --iters 20 --instances ${B}192x128x128_w3x1x1_s4,${B}128x128x128_w2x1x1_s5 2>&1 \
      | sed "s/^/opaque=$v blk /" | log
    python3 scripts/time_shapes.py 7168x16384,18432x7168 4096,8192 --format e4m3gc-sf32 --act e4m3-pt --prequant \
      --graph --flush read --iters 20 --instances sm90_wgmma_dense_a-e4m3-pt_w-e4m3gc-sf32_c-bf16_t128x192x128_w1x3x1_s5 \
      2>&1 | sed "s/^/opaque=$v pc /" | log
    python3 scripts/time_shapes.py 8192x8192,28672x8192 256,4096 --format u4g128-sbf16 --layout sm90 --graph --flush read \
      --iters 20 --instances sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t128x128x128_w1x2x1_s4,sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t64x128x128_w1x2x1_s5 \
      2>&1 | sed "s/^/opaque=$v w4a16 /" | log
  done
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=final: after the review's host-side refactor (backend/sm90/pipeline.h
# prepare_activation_rows, shared by both sm90 kernels' launches): a dev build of the grouped 8-bit
# instances and one dense tile of each sm90 kernel, tests/test_moe.py's 8-bit tests and
# tests/test_gpu.py's per-instance tests on them.
if [ "${PART:-a}" = final ]; then
  HUMMING_PROFILE=dev build_filtered '^(sm90_wgmma_moe_a-e4m3|sm90_wgmma_dense_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16_t192x128x128_w3x1x1_s4|sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t64x128x128_w1x2x1_s5|generic_dense_a-bf16_w-u4-s)'
  echo "build took $(($(date +%s) - start)) s" | log
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rf -k "8bit or fp8" 2>&1 | tail -4 | sed "s/^/test_moe /" | log
  python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -rf -k "instance_against or output_rows or block_scaled" 2>&1 \
    | tail -4 | sed "s/^/test_gpu /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
