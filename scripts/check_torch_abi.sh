#!/usr/bin/env bash
# The proof that one build serves every torch from the one it was built against on: builds a wheel
# against torch OLD in a fresh venv, then installs that wheel, unchanged, into a venv with OLD and
# one with NEW and runs the CPU test suite in each (the README's test command). No GPU needed.
#
# Usage: bash scripts/check_torch_abi.sh [OLD] [NEW]     (defaults 2.11.0 and 2.14.1)
#   HUMMING_PROFILE (default ci) and HUMMING_CUDA_ARCHS (default 80;90a) choose the build;
#   WORK (default build/torch-abi) holds the venvs, the wheel and the logs.
set -euo pipefail
cd "$(dirname "$0")/.."
old="${1:-2.11.0}"
new="${2:-2.14.1}"
work="${WORK:-$PWD/build/torch-abi}"
export HUMMING_PROFILE="${HUMMING_PROFILE:-ci}" HUMMING_CUDA_ARCHS="${HUMMING_CUDA_ARCHS:-80;90a}"
rm -rf "$work" && mkdir -p "$work/wheel"
start=$(date +%s)
# The test dependencies (.ci/run's): cmake and ninja too, which tests/test_cmake_options.py runs.
deps=(numpy pytest safetensors tqdm 'compressed-tensors>=0.20' 'cmake>=3.26' ninja)
venv() { # venv DIR TORCH: a fresh venv with that torch and the test dependencies
  python3 -m venv "$1"
  "$1/bin/python" -m pip install -q --upgrade pip
  "$1/bin/python" -m pip install -q "torch==$2" "${deps[@]}"
  "$1/bin/python" -c "import torch; assert torch.__version__.split('+')[0] == '$2', torch.__version__"
}
venv "$work/old" "$old"
"$work/old/bin/python" -m pip install -q 'scikit-build-core>=0.10'
echo "check_torch_abi: torch $old venv ready after $(( $(date +%s) - start )) s"
PATH="$work/old/bin:$PATH" "$work/old/bin/python" -m pip wheel . --no-deps --no-build-isolation -w "$work/wheel" \
  -C build-dir="$work/cmake" > "$work/build.log" 2>&1 || { tail -40 "$work/build.log"; exit 1; }
wheel=$(ls "$work"/wheel/humming_aot-*.whl)
echo "check_torch_abi: $(basename "$wheel") built against torch $old after $(( $(date +%s) - start )) s"
venv "$work/new" "$new"
status=0
for side in old new; do
  py="$work/$side/bin/python"
  "$py" -m pip install -q --no-deps "$wheel"
  # From outside the checkout, so that the installed package (not python/) is the one tested.
  (cd "$work" && PATH="$work/$side/bin:$PATH" "$py" -m pytest -q "$OLDPWD/tests" -p no:cacheprovider \
    > "$work/tests-$side.log" 2>&1) || status=1
  echo "check_torch_abi: torch $("$py" -c 'import torch; print(torch.__version__)'): $(tail -1 "$work/tests-$side.log")"
  "$py" -m humming_aot.cli info | grep -E "torch" || true
done
echo "check_torch_abi: done after $(( $(date +%s) - start )) s"
exit $status
