#!/usr/bin/env bash
# On the lent GPU machine: is preloading (QuantLinear's automatic LayerPlan.preload, which since
# session 9 also allocates the current stream's stream-K scratch) what makes
# tests/test_gpu_compile.py::test_reduce_overhead_cuda_graphs fail (session 10: "Detected 1
# tensor(s) in the cudagraph pool not tracked as outputs")? A build of the few instances the test
# and the MoE GPU test use (about a minute), then the test with HUMMING_PRELOAD=0 and =1.
# Usage: bash scripts/gpu_reduce_overhead_probe.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$OUT"
HUMMING_PROFILE=dev CMAKE_BUILD_PARALLEL_LEVEL=16 \
  HUMMING_FILTER='^(sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t(8|16|32|64|128)x128x128_w1x2x1_s[0-9]+|generic_dense_a-bf16_w-u4-sbf16(-zi)?_c-bf16)$' \
  python3 -m pip install --no-build-isolation --no-deps . > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
for p in 0 1; do
  echo "HUMMING_PRELOAD=$p:"
  HUMMING_PRELOAD=$p timeout 60 python3 -m pytest -q tests/test_gpu_compile.py -k reduce_overhead -p no:cacheprovider \
    > "$OUT/reduce_overhead_preload$p.log" 2>&1
  tail -1 "$OUT/reduce_overhead_preload$p.log"
done
timeout 60 python3 -m pytest -q tests/test_moe.py -k gpu -p no:cacheprovider 2>&1 | tail -1
