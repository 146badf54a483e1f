#!/usr/bin/env bash
# On the lent GPU machine, one call for the sm90 weight-only kernels' e2m1 (FP4) codes (written in
# session 37 when no GPU was lent; experimental until this passes):
# 1. a dev+experimental build of the e2m1 sm90 instances (dense and grouped), the u4g128 bf16 ones to
#    time them against, and the few others tests/test_moe.py needs;
# 2. tests/test_gpu.py on the e2m1 instances (each against the reference at M values across the
#    tile heights) and tests/test_moe.py (its grouped test covers e2m1g32-sbf16);
# 3. graph us after a read flush of e2m1g32-sbf16 against u4g128-sbf16, the dispatcher's choice, on
#    decode-to-prefill M over a few layers (SHAPES, MS override), and the MoE layers of gpt-oss-120b
#    and Qwen3-30B-A3B in both formats (scripts/bench_moe.py --format).
# Logs to $OUT/fp4.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$OUT"
. scripts/build_filtered.sh
start=$(date +%s)
HUMMING_PROFILE=dev+experimental build_filtered "${HUMMING_FILTER:-^(sm90_wgmma_(dense|moe)_a-bf16_w-(e2m1g(16|32)|u4g128)-sbf16_c-bf16|sm90_wgmma_moe_a-bf16_w-(u4g128-sbf16-zi|u8gc)|generic_dense_a-bf16_w-(u4|e2m1)-s|sm80_mma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t16x128)}"
echo "build took $(($(date +%s) - start)) s" | tee "$OUT/fp4.txt"
python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -rfs -k e2m1 2>&1 | tail -12 | tee -a "$OUT/fp4.txt"
python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs 2>&1 | tail -12 | tee -a "$OUT/fp4.txt"
for f in e2m1g32-sbf16 u4g128-sbf16; do
  python3 scripts/time_shapes.py "${SHAPES:-28672x8192,8192x8192,5760x2880,2880x4096}" "${MS:-1,16,64,256,1024}" \
    --format "$f" --graph --flush read --iters 10 2>&1 | sed "s/^/$f /" | tee -a "$OUT/fp4.txt"
done
for f in e2m1g32-sbf16 u4g128-sbf16; do
  python3 scripts/bench_moe.py "$OUT/moe-$f.json" --format "$f" --models gpt-oss-120b,qwen3-30b-a3b --tokens 1,8,64,256 \
    --impls humming-aot 2>&1 | grep -E "humming-aot:|rror" | sed "s/^/$f /" | tee -a "$OUT/fp4.txt"
done
echo "all done at $(($(date +%s) - start)) s" | tee -a "$OUT/fp4.txt"
