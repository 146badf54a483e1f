#!/usr/bin/env bash
# On the lent GPU machine, the closing run of a session: the dev build with the C++ and GPU tests
# (scripts/gpu_check.sh), then the benchmark with every peer (scripts/gpu_bench.sh; carry .peer).
# The device tool returns few files, so the logs come back as one tarball (logs.tgz) and the
# benchmark's md with its json / png / log in bench-files.tgz next to it, then isolated decode timings and the host cost
# per call in parts (isolated.txt, host_parts.txt). Usage: HUMMING_GIT_SHA=... NAME=... bash scripts/gpu_final.sh
set -uo pipefail
cd "$(dirname "$0")/.."
FINAL="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$FINAL"
export OUT=/tmp/humming-final
rm -rf "$OUT" && mkdir -p "$OUT"
bash scripts/gpu_check.sh > "$OUT/check.out" 2>&1
echo "gpu_check rc=$?"
tail -6 "$OUT/check.out"
OUT="$OUT/bench" bash scripts/gpu_bench.sh --time-budget-s "${BENCH_BUDGET_S:-240}" --iters 10 --name "${NAME:-h200-final}" \
  > "$OUT/bench.out" 2>&1
echo "gpu_bench rc=$?"
grep -E "^\| (N x K|[0-9]|  )" "$OUT/bench/${NAME:-h200-final}.md" | head -30
# Afterwards, isolated timings of the decode targets and the host cost per call, split into parts.
python3 scripts/time_shapes.py 28672x8192,8192x8192,8192x28672 1,16 --graph > "$FINAL/isolated.txt" 2>&1
python3 scripts/host_parts.py 8192 8192 1 > "$FINAL/host_parts.txt" 2>&1
cat "$FINAL/isolated.txt" "$FINAL/host_parts.txt"
cp "$OUT"/bench/*.md "$OUT"/bench/bench-files.tgz "$FINAL"/ 2>/dev/null
tar czf "$FINAL/logs.tgz" -C "$OUT" .
