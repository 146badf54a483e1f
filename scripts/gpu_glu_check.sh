#!/usr/bin/env bash
# On the lent GPU machine, one call for the experts' gated activation in the grouped GEMMs' epilogue
# (GemmArgs::glu, moe_gemm's `activation`; written in session 37 when no GPU was lent):
# 1. a dev+experimental build (only +experimental builds take the epilogue's activation until
#    this check passes) of the grouped bf16 instances and the few others tests/test_moe.py needs;
# 2. tests/test_moe.py (its GPU tests: every grouped tile fused against the same tile's plain GEMM
#    and the activation kernel, bit for bit);
# 3. compute-sanitizer racecheck and memcheck over that test (the gate and up warpgroups meet
#    through shared memory after the ring);
# 4. scripts/bench_moe.py: the gate-up GEMM with the activation fused against apart, and the whole
#    layer both ways, in the same run (MODELS, TOKENS override the points).
# Logs to $OUT/glu.txt, the benchmark to $OUT/moe-glu.{json,md}.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$OUT"
. scripts/build_filtered.sh
start=$(date +%s)
HUMMING_PROFILE="${HUMMING_PROFILE:-dev+experimental}" build_filtered "${HUMMING_FILTER:-^(sm90_wgmma_moe_a-bf16|generic_dense_a-bf16|sm80_mma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t16x128)}"
echo "build took $(($(date +%s) - start)) s" | tee "$OUT/glu.txt"
python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs 2>&1 | tail -15 | tee -a "$OUT/glu.txt"
for tool in racecheck memcheck; do
  timeout "${SANITIZE_TIMEOUT_S:-240}" compute-sanitizer --tool "$tool" --error-exitcode 9 python3 -m pytest -q \
    tests/test_moe.py -p no:cacheprovider -k activation_on_the_sm90_kernels > "$OUT/glu-$tool.txt" 2>&1
  echo "compute-sanitizer $tool: rc=$?, $(grep -E 'passed|failed' "$OUT/glu-$tool.txt" | tail -1); $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/glu-$tool.txt" | tail -1)" |
    tee -a "$OUT/glu.txt"
done
python3 scripts/bench_moe.py "$OUT/moe-glu.json" --models "${MODELS:-qwen3-30b-a3b,deepseek-v3,mixtral-8x7b,gpt-oss-120b}" \
  --tokens "${TOKENS:-1,8,64,256}" --impls humming-aot 2>&1 | grep -E "humming-aot:|rror" | tee -a "$OUT/glu.txt"
echo "all done at $(($(date +%s) - start)) s" | tee -a "$OUT/glu.txt"
