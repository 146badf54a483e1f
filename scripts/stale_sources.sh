# Sourced by the device scripts that build the package (scripts/gpu_ab.sh, build_filtered.sh,
# gpu_check.sh). A warm device machine keeps the build directory between calls, but each call
# copies the working tree afresh, with the files' old times: where an earlier call patched a file
# (gpu_ab.sh's B variant) and built it, the objects are newer than the copied original, and make
# skipped it, so the build silently kept the patched code (session 36: a 14 s "build" that ran
# the B variant's combine). gpu_ab.sh notes each file it patches in build/.patched-files;
# touch_patched_sources touches those before a build and forgets them.
touch_patched_sources() {
  local list=build/.patched-files
  [ -f "$list" ] || return 0
  sort -u "$list" | while read -r f; do [ -f "$f" ] && touch "$f"; done
  rm -f "$list"
}
# note_patched_sources PATCH: records the files PATCH changes (its "+++ b/..." lines).
note_patched_sources() {
  mkdir -p build
  sed -n 's|^+++ [ab]/\([^[:space:]]*\).*|\1|p' "$1" >> build/.patched-files
}
