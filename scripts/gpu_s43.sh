#!/usr/bin/env bash
# On the lent GPU machine, session 43's calls; logs to $OUT/s43.txt.
# PART=o2 (the default): one build (dev+experimental) of every grouped u4g128 bf16 instance (W4A16
#   MoE, the new two-blocks-per-multiprocessor tiles _o2 among them: kernel/sm90_dense.cuh Blocks),
#   one grouped and one dense FP8 block tile and one dense weight-only tile (the sm90 kernels' launch
#   path after session 42's review refactor and this session's launch-bounds change), and the
#   generic instances the tests fall back to; then
#   1. tests/test_moe.py (every built grouped tile, the _o2 ones included, against the reference)
#      and tests/test_gpu.py's per-instance tests of the dense tiles;
#   2. scripts/bench_moe.py: the default choice against the same choice on the _o2 tile of its
#      height (its walk, or the lone or warp walk forced), gate-up + down, Qwen3-30B-A3B and
#      Mixtral-8x7B at 1 to 1024 tokens ($OUT/moe-o2.json / .md).
# PART=jit (carry .peer; SKIP_BUILD=1 on a warm machine after PART=o2): the default choice, the
#   _o2 twins and humming-kernels 0.1.20 in one run ($OUT/moe-o2-jit.json / .md).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s43.txt
F='^(sm90_wgmma_moe_a-bf16_w-u4g128-sbf16_c-bf16_|sm90_wgmma_moe_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16_t128x128x128_w2x1x1_s5|'
F+='sm90_wgmma_dense_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16_t192x128x128_w3x1x1_s4|'
F+='sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t64x128x128_w1x2x1_s5|generic_dense_a-bf16_w-u4-s)'
MODELS="${MODELS:-qwen3-30b-a3b,mixtral-8x7b}"
TOKENS="${TOKENS:-1,8,64,256,1024}"
IMPLS="${IMPLS:-humming-aot,humming-aot-o2,humming-aot-o2-lone,humming-aot-o2-warp}"
if [ "${PART:-o2}" = o2 ]; then
  HUMMING_PROFILE=dev+experimental build_filtered "$F"
  echo "build took $(($(date +%s) - start)) s" | log
  python3 -c "from humming_aot import registry; print(len(registry.instances()), 'instances')" 2>&1 | log
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rf 2>&1 | tail -8 | sed "s/^/test_moe /" | log
  python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -rf -k "instance_against or output_rows or block_scaled" \
    2>&1 | tail -6 | sed "s/^/test_gpu /" | log
  echo "tests done at $(($(date +%s) - start)) s" | log
  python3 scripts/bench_moe.py "$OUT/moe-o2.json" --models "$MODELS" --tokens "$TOKENS" --impls "$IMPLS" \
    2>&1 | grep -E "humming|rror" | sed "s/^/o2 /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
if [ "${PART:-o2}" = jit ]; then
  HUMMING_PROFILE=dev+experimental build_filtered "$F"
  peer=/tmp/peer
  # pip keeps the wheel's launcher executable (zipfile -e does not: PermissionError on nvrtc_compile).
  python3 -m pip install -q --no-deps --no-index --upgrade --target "$peer" .peer/humming_kernels-0.1.20-*.whl
  PYTHONPATH="$peer" python3 scripts/bench_moe.py "$OUT/moe-o2-jit.json" --models "$MODELS" --tokens "$TOKENS" \
    --impls "$IMPLS,humming-jit" --jit-budget-s 360 2>&1 | grep -E "humming|rror" | sed "s/^/jit /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
