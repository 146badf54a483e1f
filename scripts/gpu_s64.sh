#!/usr/bin/env bash
# On the lent GPU machine, session 64's calls; logs to $OUT/s64<PART>.txt. Session 64 ran a twice
# (H100); b was prepared and not run (no device time left): the next session's first call (carry
# .peer), and a again on an H200 when one is lent, to fit t176x256x64's cost there (the table's is
# the H100 fit scaled by t128's H200 / H100 ratio).
# PART picks the call:
#   a (about 250 s): the dense two-block tile t176x256x64 (Mainloops::kStepwise, session 63) over the
#      shape corpus at large M, beside the dev tiles it would compete with (t128x128x128, t256x128x64)
#      and t128x256x128: session 64's call c (scripts/gpu_s63.sh PART=c, H100) timed it 12 % faster
#      than t128x128x128 on 28672 x 8192 at m = 8192 and 6-8 % on 4096 x 14336 at m = 2048 / 8192.
#      The sweep is what tools/fit_tile_costs.py fits its cost to.
#   b (about 220 s; carry .peer): the dev build's dense u4g128 bf16 instances (sym and -zi; t176x256x64
#      in dev and weighed by the H200 table since session 64), the GPU tests of the dense kernels and
#      of the dispatch (the default choices now take t176 and t128 past 16 rows of tiles), the
#      dispatcher's choice against t128x128x128 and t256x128x64 forced at large M, then the W4A16
#      standing at m = 8192 against cuBLAS bf16 and humming-kernels 0.1.20 (BENCH=0: not).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
PART="${PART:-a}"
. scripts/build_filtered.sh
device_log "s64$PART.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
d=sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16
case "$PART" in
a)
  HUMMING_PROFILE=dev+experimental build_filtered \
    "^${d}_t(128x128x128_w1x2x1_s4|256x128x64_w1x2x1_s5|176x256x64_w1x2x1_s4|128x256x128_w1x2x1_s3)$"
  echo "build done at $(($(date +%s) - start)) s" | log
  python3 scripts/sweep_tiles.py "$OUT/s64a-sweep-u4g128-large-m.json" --match "^${d}_t" \
    --ms 256,512,1024,2048,3072,4096,8192,16384 --max-tile-rows 160 --iters 7 2>&1 | log
  ;;
b)
  build_filtered "^${d/-sbf16_c/-sbf16(-zi)?_c}_"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests dense test_gpu.py "instance_against_reference or waves_of_tiles or rings_wrap or heavy_tiles or dispatch_crosses or large_m or graph"
  gpu_tests dispatch test_dispatch.py ""
  python3 scripts/time_shapes.py 28672x8192,8192x28672,4096x14336,5120x13824 2048,4096,8192,16384 --graph 2>&1 | log
  python3 scripts/time_shapes.py 28672x8192,8192x28672,4096x14336,5120x13824 2048,4096,8192,16384 --graph \
    --instances "${d}_t128x128x128_w1x2x1_s4,${d}_t256x128x64_w1x2x1_s5" 2>&1 | log
  [ "${BENCH:-1}" = "1" ] || { echo "all done at $(($(date +%s) - start)) s (no standing: BENCH=0)" | log; exit 0; }
  install_peer
  w4a16_dense_standing_m8192
  ;;
*)
  echo "PART must be a or b" >&2
  exit 2
  ;;
esac
echo "all done at $(($(date +%s) - start)) s" | log
