#!/usr/bin/env bash
# On the lent GPU machine: a filtered build (HUMMING_FILTER, dev profile, no tests), then the shell
# commands given as arguments, one after another, for A/B experiments. Everything they print goes
# to $OUT/ab.txt (also echoed); files they write under $AB_OUT come back in $OUT/ab.tgz.
# Usage: HUMMING_FILTER=... bash scripts/gpu_ab.sh 'python3 scripts/time_shapes.py 8192x8192 1' ...
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
export AB_OUT=/tmp/humming-ab
rm -rf "$AB_OUT" && mkdir -p "$AB_OUT" "$OUT"
export PYTHONUNBUFFERED=1 HUMMING_PROFILE="${HUMMING_PROFILE:-dev}" HUMMING_PTXAS_VERBOSE=ON
start=$(date +%s)
CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps -v . > "$AB_OUT/build.log" 2>&1
rc=$?
echo "build rc=$rc after $(( $(date +%s) - start )) s" | tee "$OUT/ab.txt"
[ $rc -eq 0 ] || { tail -40 "$AB_OUT/build.log" | tee -a "$OUT/ab.txt"; exit $rc; }
grep -E "Compiling entry function|registers|spill" "$AB_OUT/build.log" | sed 's/^ *//' > "$AB_OUT/ptxas.txt"
for cmd in "$@"; do
  echo "### $cmd" | tee -a "$OUT/ab.txt"
  bash -c "$cmd" 2>&1 | tee -a "$OUT/ab.txt"
done
echo "total $(( $(date +%s) - start )) s" | tee -a "$OUT/ab.txt"
tar czf "$OUT/ab.tgz" -C "$AB_OUT" .
