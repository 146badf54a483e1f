#!/usr/bin/env bash
# On the lent GPU machine: a filtered build (HUMMING_FILTER, dev profile, no tests), then the shell
# commands given as arguments, one after another, for A/B experiments. Everything they print goes
# to $OUT/ab.txt (also echoed); files they write under $AB_OUT come back in $OUT/ab.tgz.
# With AB_PATCH=FILE (a diff against this tree, e.g. `git diff main BRANCH > ab.patch` left
# untracked so that it travels), everything runs twice in one call: first on this tree ("A"), then
# with the patch applied and rebuilt ("B"; the tree stays patched); each command's lines are
# prefixed with the variant. AB_PATCH=F1,F2,... gives variants B, C, ...: each applies its patch on
# top of the previous variant's tree (make each patch a diff against the one before).
# Usage: HUMMING_FILTER=... [AB_PATCH=ab.patch] bash scripts/gpu_ab.sh 'python3 scripts/time_shapes.py 8192x8192 1' ...
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
export AB_OUT=/tmp/humming-ab
rm -rf "$AB_OUT" && mkdir -p "$AB_OUT" "$OUT"
export PYTHONUNBUFFERED=1 HUMMING_PROFILE="${HUMMING_PROFILE:-dev}" HUMMING_PTXAS_VERBOSE=ON
start=$(date +%s)
. scripts/stale_sources.sh
touch_patched_sources
: > "$OUT/ab.txt"
variants=(A)
patches=()
if [ -n "${AB_PATCH:-}" ]; then
  IFS=, read -r -a patches <<< "$AB_PATCH"
  letters=(B C D E F G)
  for i in "${!patches[@]}"; do variants+=("${letters[$i]}"); done
fi
for vi in "${!variants[@]}"; do
  v=${variants[$vi]}
  if [ "$vi" -gt 0 ]; then
    patch_file=${patches[$((vi - 1))]}
    # patch(1) where the machine has it, else git apply (which works outside a repository too)
    if command -v patch > /dev/null; then apply=(patch -p1 --forward -i "$patch_file"); else apply=(git apply "$patch_file"); fi
    note_patched_sources "$patch_file"
    "${apply[@]}" > "$AB_OUT/patch-$v.log" 2>&1 \
      || { echo "$v: the patch $patch_file does not apply" | tee -a "$OUT/ab.txt"; tee -a "$OUT/ab.txt" < "$AB_OUT/patch-$v.log"; break; }
  fi
  # CUDAFLAGS (e.g. a compile-time knob) passed as the cache variable itself: the package's build
  # directory persists (pyproject.toml build-dir), and CMake reads the CUDAFLAGS environment only
  # when it first configures one, so a second build with other flags would silently keep the first's.
  CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps -v \
    -C "cmake.define.CMAKE_CUDA_FLAGS=${CUDAFLAGS:-}" . > "$AB_OUT/build-$v.log" 2>&1
  rc=$?
  echo "$v: build rc=$rc after $(( $(date +%s) - start )) s" | tee -a "$OUT/ab.txt"
  [ $rc -eq 0 ] || { tail -40 "$AB_OUT/build-$v.log" | tee -a "$OUT/ab.txt"; break; }
  grep -E "Compiling entry function|registers|spill" "$AB_OUT/build-$v.log" | sed 's/^ *//' > "$AB_OUT/ptxas-$v.txt"
  for cmd in "$@"; do
    echo "### $v: $cmd" | tee -a "$OUT/ab.txt"
    bash -c "$cmd" 2>&1 | sed "s/^/$v: /" | tee -a "$OUT/ab.txt"
  done
done
echo "total $(( $(date +%s) - start )) s" | tee -a "$OUT/ab.txt"
tar czf "$OUT/ab.tgz" -C "$AB_OUT" .
