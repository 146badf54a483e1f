#!/usr/bin/env bash
# On the lent GPU machine, one call for session 38's group-limited routing in the top-k kernel
# (DeepSeek-V3's noaux_tc; src/moe_route.cu group_limit): a build filtered to a few instances
# (the routing kernels are in every build), tests/test_moe.py (the group tests against the CPU
# reference, eager and in a CUDA graph, and the rest of the file), compute-sanitizer memcheck over
# the group tests, then scripts/bench_group_routing.py (the kernel against the same rule in torch
# ops, graph us). Logs to $OUT/s38-groups.txt, the timings to $OUT/group-routing.json.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
. scripts/build_filtered.sh
log() { tee -a "$OUT/s38-groups.txt"; }
start=$(date +%s)
build_filtered "${HUMMING_FILTER:-^(sm90_wgmma_moe_a-bf16_w-u4g128|generic_dense_a-bf16_w-u4-s)}"
echo "build took $(($(date +%s) - start)) s" | log
python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs 2>&1 | tail -6 | log
timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q tests/test_moe.py \
  -p no:cacheprovider -k "group_limited_routing" > "$OUT/s38-groups-memcheck.txt" 2>&1
echo "memcheck rc=$?, $(grep -E 'passed|failed' "$OUT/s38-groups-memcheck.txt" | tail -1); $(grep 'ERROR SUMMARY' "$OUT/s38-groups-memcheck.txt" | tail -1)" | log
python3 scripts/bench_group_routing.py --out "$OUT/group-routing.json" 2>&1 | log
echo "all done at $(($(date +%s) - start)) s" | log
