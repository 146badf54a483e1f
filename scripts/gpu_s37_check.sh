#!/usr/bin/env bash
# On the lent GPU machine, one call for session 37's experimental kernel work, written when no GPU
# was lent: the experts' gated activation in the grouped GEMMs' epilogue (GemmArgs::glu, moe_gemm's
# `activation`) and the e2m1 (FP4) codes of the sm90 weight-only kernels. Both stay experimental
# (+experimental builds only) until this passes:
# 1. a dev+experimental build of the grouped bf16 instances, the e2m1 and u4g128 dense ones, and the
#    few others the tests need;
# 2. tests/test_gpu.py on the e2m1 instances, and tests/test_moe.py (the epilogue's activation on
#    every grouped tile, bit for bit the plain GEMM then the activation kernel; the grouped test
#    covers e2m1g32-sbf16);
# 3. compute-sanitizer racecheck and memcheck over the epilogue's activation test (the gate and up
#    warpgroups meet through shared memory after the ring);
# 4. graph us after a read flush: e2m1g32-sbf16 against u4g128-sbf16 on a few dense layers (SHAPES,
#    MS), and scripts/bench_moe.py in both formats (the gate-up GEMM with the activation fused
#    against apart, and the whole layer both ways, in the same run; MODELS, TOKENS).
# 5. (PART=bench or all) the grouped K-split rule's default choice at decode against the forced split
#    tiles (bench_moe, Mixtral and Qwen3 at 1 and 2 tokens), and the activation quantizer against a
#    plain copy (bench_quantize_act).
# PART=tests runs 1-3, PART=bench 4-5 (SKIP_BUILD=1 on a warm machine keeps the build), all (the
# default) every step. Logs to $OUT/s37.txt, the benchmarks to $OUT/moe-*.{json,md}, $OUT/q.json.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$OUT"
. scripts/build_filtered.sh
start=$(date +%s)
HUMMING_PROFILE="${HUMMING_PROFILE:-dev+experimental}" build_filtered "${HUMMING_FILTER:-^(sm90_wgmma_moe_a-bf16|sm90_wgmma_dense_a-bf16_w-(e2m1g(16|32)|u4g128)-sbf16_c-bf16|generic_dense_a-bf16_w-(u4|e2m1)-s|sm80_mma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t16x128)}"
log() { tee -a "$OUT/s37.txt"; }
echo "build took $(($(date +%s) - start)) s" | log
PART="${PART:-all}"
if [ "$PART" != bench ]; then
python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -rfs -k e2m1 2>&1 | tail -12 | log
python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs 2>&1 | tail -12 | log
for tool in racecheck memcheck; do
  timeout "${SANITIZE_TIMEOUT_S:-240}" compute-sanitizer --tool "$tool" --error-exitcode 9 python3 -m pytest -q \
    tests/test_moe.py -p no:cacheprovider -k activation_on_the_sm90_kernels > "$OUT/s37-$tool.txt" 2>&1
  echo "compute-sanitizer $tool: rc=$?, $(grep -E 'passed|failed' "$OUT/s37-$tool.txt" | tail -1); $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/s37-$tool.txt" | tail -1)" | log
done
fi
[ "$PART" = tests ] && { echo "tests done at $(($(date +%s) - start)) s" | log; exit 0; }
for f in e2m1g32-sbf16 u4g128-sbf16; do
  python3 scripts/time_shapes.py "${SHAPES:-28672x8192,8192x8192,5760x2880,2880x4096}" "${MS:-1,16,64,256,1024}" \
    --format "$f" --graph --flush read --iters 10 2>&1 | sed "s/^/$f /" | log
  python3 scripts/bench_moe.py "$OUT/moe-$f.json" --format "$f" \
    --models "${MODELS:-qwen3-30b-a3b,gpt-oss-120b,mixtral-8x7b,deepseek-v3}" --tokens "${TOKENS:-1,8,64,256}" \
    --impls humming-aot 2>&1 | grep -E "humming-aot:|rror" | sed "s/^/$f /" | log
done
python3 scripts/bench_moe.py "$OUT/moe-ksplit.json" --models mixtral-8x7b,qwen3-30b-a3b --tokens 1,2 \
  --impls humming-aot,humming-aot-split,humming-aot-wide-split 2>&1 | grep -E "humming-aot|rror" | sed "s/^/ksplit /" | log
python3 scripts/bench_quantize_act.py --out "$OUT/q.json" --impls humming-aot,torch-copy 2>&1 | tail -40 | sed "s/^/quant /" | log
echo "all done at $(($(date +%s) - start)) s" | log
