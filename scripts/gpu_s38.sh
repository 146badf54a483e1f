#!/usr/bin/env bash
# On the lent GPU machine, session 38's calls (PART=pdl, the default, PART=groups, or PART=check);
# logs to $OUT/s38.txt.
# PART=pdl: programmatic launches (backend/pdl.h: the MoE helper kernels launch programmatically
#   after the kernel before them and wait for it first; the sm90 GEMMs let the next launch be
#   scheduled from their start; HUMMING_PDL=0, read once per process, turns it off, so both sides
#   run on one build):
#   1. a build of every sm90 and generic instance of the profile (HUMMING_PROFILE, dev unless set)
#      and the one sm80 tile the MoE per-expert test needs;
#   2. tests/test_moe.py and tests/test_gpu.py with programmatic launches on (the default);
#   3. scripts/bench_moe.py (the whole layer as QuantMoE runs it: layer_us) with HUMMING_PDL=0,
#      then on, then off again (MODELS, TOKENS), to $OUT/pdl-{off,on,off2}.{json,md}.
#   SKIP_TESTS=1 skips 1-2 (SKIP_BUILD=1 alone keeps a warm machine's build).
# PART=groups: DeepSeek-V3's group-limited routing in the top-k kernel (src/moe_route.cu
#   group_limit): a build filtered to a few instances (the routing kernels are in every build),
#   tests/test_moe.py, compute-sanitizer memcheck over the group tests, then
#   scripts/bench_group_routing.py (the kernel against the same rule in torch ops) to
#   $OUT/group-routing.json.
# PART=check (written for the next session, not yet run): a build filtered to the grouped u4g128
#   tiles, then what session 38 could not run: tests/test_moe.py (with the bitwise test of a whole
#   layer with programmatic launches on and off), and scripts/bench_moe.py --model-routing on
#   DeepSeek-V3 (its layer routed as its checkpoint does) with HUMMING_PDL=0, then on, to
#   $OUT/deepseek-{off,on}.{json,md}.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
. scripts/build_filtered.sh
log() { tee -a "$OUT/s38.txt"; }
start=$(date +%s)
if [ "${PART:-pdl}" = check ]; then
  build_filtered "${HUMMING_FILTER:-^(sm90_wgmma_moe_a-bf16_w-u4g128|generic_dense_a-bf16_w-u4-s)}"
  echo "build took $(($(date +%s) - start)) s" | log
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs 2>&1 | tail -6 | log
  for v in off:0 on:1; do
    HUMMING_PDL=${v#*:} python3 scripts/bench_moe.py "$OUT/deepseek-${v%%:*}.json" --model-routing \
      --models deepseek-v3 --tokens "${TOKENS:-1,8,64}" --impls humming-aot 2>&1 | grep -E "humming-aot:|rror" \
      | sed "s/^/pdl ${v%%:*} /" | log
  done
  echo "all done at $(($(date +%s) - start)) s" | log
  exit 0
fi
if [ "${PART:-pdl}" = groups ]; then
  build_filtered "${HUMMING_FILTER:-^(sm90_wgmma_moe_a-bf16_w-u4g128|generic_dense_a-bf16_w-u4-s)}"
  echo "build took $(($(date +%s) - start)) s" | log
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs 2>&1 | tail -6 | log
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q tests/test_moe.py \
    -p no:cacheprovider -k "group_limited_routing" > "$OUT/s38-groups-memcheck.txt" 2>&1
  echo "memcheck rc=$?, $(grep -E 'passed|failed' "$OUT/s38-groups-memcheck.txt" | tail -1); $(grep 'ERROR SUMMARY' "$OUT/s38-groups-memcheck.txt" | tail -1)" | log
  python3 scripts/bench_group_routing.py --out "$OUT/group-routing.json" 2>&1 | log
  echo "all done at $(($(date +%s) - start)) s" | log
  exit 0
fi
if [ "${SKIP_TESTS:-0}" != 1 ]; then
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
