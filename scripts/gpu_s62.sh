#!/usr/bin/env bash
# On the lent GPU machine, session 62's calls (prepared in session 61, whose device time ran out
# before its W4A16 standing); logs to $OUT/s62<PART>.txt. PART picks the call:
#   a (about 300 s, carry .peer): after session 61's mid tiles (t80x192, humming.h
#      grouped_tiles_mid), a dev build of the grouped W4A8 e2m1gc and W4A16 u4g128 tiles (every
#      height), test_moe.py's grouped-kernel tests, then the standings against humming-kernels
#      0.1.20: W4A16 at 1024 / 4096 tokens (not yet run with the mid tiles), W4A8 at 256 / 4096.
#   b (about 120 s, carry .peer; after a on the same machine, SKIP_BUILD=1): ncu of the W4A8 gate-up
#      GEMM of Qwen3-30B-A3B at 1024 tokens with the mid tile (t80x192, 0.96x the peer's layer) against
#      humming-kernels' 80 x 256 tile (session 61: 34.1 against 27.9 M instructions with t80x128).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
PART="${PART:-a}"
. scripts/build_filtered.sh
device_log "s62$PART.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
case "$PART" in
a)
  build_filtered "^sm90_wgmma_moe_a-(e4m3-pt_w-e2m1gc|bf16_w-u4g128)-sbf16_c-bf16_"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests test_moe test_moe.py "sm90_kernels"
  install_peer
  w4a16_moe_standing 1024,4096
  w4a8_moe_standing 256,4096
  ;;
b)
  SKIP_BUILD=1 MODEL=qwen3-30b-a3b TOKENS=1024 PART=gate-up MOE_ACT=e4m3-pt MOE_FORMAT=e2m1gc-sbf16 IMPLS="aot jit" \
    bash scripts/ncu_moe_peer.sh 2>&1 | log
  ;;
*)
  echo "PART must be a or b" >&2
  exit 2
  ;;
esac
echo "all done at $(($(date +%s) - start)) s" | log
# The device tool returns only the first files under $OUT (by name): the log and reports in one archive, named first.
tar czf /tmp/0-s62.tgz -C "$OUT" --exclude=build.log . && mv /tmp/0-s62.tgz "$OUT/0-s62$PART.tgz"
