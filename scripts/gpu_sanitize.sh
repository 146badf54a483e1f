#!/usr/bin/env bash
# On the lent GPU machine, after a build is installed (scripts/gpu_check.sh or gpu_final.sh):
# compute-sanitizer memcheck and racecheck over one GEMM per sm90 tile and M
# (scripts/sanitize_sm90.py, which also checks each result against the reference). Every kernel is
# instrumented (SANITIZE_TOOLS picks the tools). Logs to $OUT/sanitize_{memcheck,racecheck}.txt, a summary to stdout.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$OUT"
rc=0
for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
  timeout "${SANITIZE_TIMEOUT_S:-240}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
    python3 scripts/sanitize_sm90.py > "$OUT/sanitize_$tool.txt" 2>&1
  r=$?
  echo "compute-sanitizer $tool: rc=$r, $(grep -c ' ok$' "$OUT/sanitize_$tool.txt") GEMMs ok, $(grep -c WRONG "$OUT/sanitize_$tool.txt") wrong; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$tool.txt" | tail -1)"
  [ $r -eq 0 ] || rc=$r
done
exit $rc
