#!/usr/bin/env bash
# On the lent GPU machine, one call for session 38's programmatic launches (backend/pdl.h): the
# MoE helper kernels (top-k, align, permute, activation, combine) launch programmatically after
# the kernel before them and wait for it first, and the sm90 GEMMs let the next launch be
# scheduled from their start, so that each launch's latency and prologue overlap the kernel
# before. HUMMING_PDL=0 turns it off (read once per process), so both sides run on one build:
# 1. a build of every sm90 and generic instance of the profile (HUMMING_PROFILE, dev unless set),
#    and the one sm80 tile the MoE per-expert test needs;
# 2. tests/test_moe.py and tests/test_gpu.py with programmatic launches on (the default);
# 3. scripts/bench_moe.py (the whole layer as QuantMoE runs it: layer_us) with HUMMING_PDL=0, then
#    on, then off again (MODELS, TOKENS), graph us after a read flush.
# Logs to $OUT/s38.txt, the benchmarks to $OUT/pdl-{off,on,off2}.{json,md}. PART=bench skips 1-2
# (SKIP_BUILD=1 keeps a warm machine's build).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
. scripts/build_filtered.sh
log() { tee -a "$OUT/s38.txt"; }
start=$(date +%s)
PART="${PART:-all}"
if [ "$PART" != bench ]; then
  build_filtered "${HUMMING_FILTER:-^(sm90_|generic_|sm80_mma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t16x128)}"
  echo "build took $(($(date +%s) - start)) s" | log
  for t in tests/test_moe.py tests/test_gpu.py; do
    timeout "${TEST_TIMEOUT_S:-300}" python3 -m pytest -q "$t" -p no:cacheprovider -rfs -x 2>&1 | tail -8 | sed "s|^|$t |" | log
  done
  echo "tests done at $(($(date +%s) - start)) s" | log
fi
for v in off:0 on:1 off2:0; do
  HUMMING_PDL=${v#*:} python3 scripts/bench_moe.py "$OUT/pdl-${v%%:*}.json" \
    --models "${MODELS:-qwen3-30b-a3b,gpt-oss-120b,mixtral-8x7b,deepseek-v3}" --tokens "${TOKENS:-1,8,64}" \
    --impls humming-aot 2>&1 | grep -E "humming-aot:|rror" | sed "s/^/pdl ${v%%:*} /" | log
done
echo "all done at $(($(date +%s) - start)) s" | log
