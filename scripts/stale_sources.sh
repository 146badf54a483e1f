# Sourced by the device scripts that build the package (scripts/gpu_ab.sh, build_filtered.sh,
# gpu_check.sh). A warm device machine keeps the build directory between calls, but each call
# copies the working tree afresh, with the files' old times: where an earlier call patched a file
# (gpu_ab.sh's B variant) and built it, the objects are newer than the copied original, and make
# skipped it, so the build silently kept the patched code (session 36: a 14 s "build" that ran
# the B variant's combine). gpu_ab.sh notes each file it patches in build/.patched-files;
# touch_patched_sources touches those before a build and forgets them, after touch_changed_sources.
touch_patched_sources() {
  local list=build/.patched-files
  touch_changed_sources
  [ -f "$list" ] || return 0
  sort -u "$list" | while read -r f; do [ -f "$f" ] && touch "$f"; done
  rm -f "$list"
}
# touch_changed_sources: the copied tree's own changes. Each build records the sums of the sources
# it was given (build/.source-sums); a file whose sum differs from that record (or that it lacks)
# is touched first, so that a copy older than the objects of an earlier call's newer copy still
# rebuilds (session 60's call d: a "build" that did nothing and kept the call before's moe.h).
touch_changed_sources() {
  local sums=build/.source-sums now
  mkdir -p build
  now=$(find include src tools CMakeLists.txt -type f -print0 | sort -z | xargs -0 sha1sum)
  [ -f "$sums" ] && diff <(echo "$now") "$sums" | sed -n 's/^< [0-9a-f]*  //p' | while read -r f; do touch "$f"; done
  echo "$now" > "$sums"
}
# note_patched_sources PATCH: records the files PATCH changes (its "+++ b/..." lines).
note_patched_sources() {
  mkdir -p build
  sed -n 's|^+++ [ab]/\([^[:space:]]*\).*|\1|p' "$1" >> build/.patched-files
}
