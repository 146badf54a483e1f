#!/usr/bin/env bash
# On the lent GPU machine, after scripts/gpu_check.sh has built and installed the package in the same
# session: install the carried humming-kernels wheel (if any) where only this run sees it, then run
# the GEMM benchmark with the given arguments, writing its files (json, md, png, log) to $OUT.
# Usage: bash scripts/gpu_bench.sh [benchmark options, e.g. --quick or --shapes 8192x8192]
# The lent machine returns at most 8 files from $OUT: the run's JSON, log and plot (and the peer's
# install log) are packed into $OUT/bench-files.tgz beside the Markdown table (BENCH_BUNDLE=0 keeps
# them apart).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
shopt -s nullglob
marker="$OUT/.bench-start" # what this run writes is newer (the bundle below takes only that)
touch "$marker"
sleep 1
wheels=(.peer/*.whl)
if [ ${#wheels[@]} -gt 0 ]; then
  # --no-deps --no-index: the machine has no internet; humming-kernels' own dependencies (triton,
  # numpy, jinja2, cuda-bindings, ...) must already be there, and the benchmark records it as
  # skipped, with the import error, when one is missing. --target keeps it out of site-packages.
  python3 -m pip install --no-deps --no-index --upgrade --target /tmp/peer "${wheels[@]}" > "$OUT/peer-install.log" 2>&1 \
    && export PYTHONPATH="/tmp/peer${PYTHONPATH:+:$PYTHONPATH}" \
    || echo "installing ${wheels[*]} failed (see peer-install.log); humming-jit will be listed as skipped"
else
  echo "no .peer/*.whl carried; humming-jit will be listed as skipped"
fi
# The checkout copy on the GPU machine may have no .git: pass HUMMING_GIT_SHA=... to record the sha.
# Results go to benchmarks/results/<device>/ and, because OUT is set, are copied to $OUT.
export OUT
python3 benchmarks/bench_gemm.py "$@"
rc=$?
if [ "${BENCH_BUNDLE:-1}" != "0" ]; then
  files=()
  while IFS= read -r f; do files+=("$f"); done < <(cd "$OUT" && find . -maxdepth 1 -type f -newer .bench-start     \( -name '*.json' -o -name '*.log' -o -name '*.png' \) -printf '%f\n')
  if [ ${#files[@]} -gt 0 ]; then
    tar czf "$OUT/bench-files.tgz" -C "$OUT" "${files[@]}" && (cd "$OUT" && rm -f "${files[@]}")
  fi
fi
rm -f "$marker"
exit $rc
