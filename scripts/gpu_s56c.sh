#!/usr/bin/env bash
# On the lent GPU machine, session 56's third call (about 420 s); logs to $OUT/s56c.txt, sweeps to
# $OUT/sweep-*.json. After the W8A8 kernels took MidSpread::kDeep (scheduler/streamk.h: mid tiles
# over any K spread only where at most half the multiprocessors would have one, the tail after
# whole waves too):
#   1. a dev build of the W8A8 tiles (e4m3 and i8 per channel, 128 x 128 blocks) and the W4A16
#      u4g128 ones (those the graph tests take);
#   2. their GPU tests;
#   3. sweeps of the e4m3 and i8 per-channel W8A8 tiles over the corpus at m = 48 to 256, for the
#      dispatcher's choices on the new plans (tools/table_regret.py).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s56c.txt
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
HUMMING_PROFILE=dev build_filtered \
  "^sm90_wgmma_dense_a-(e4m3-pt_w-e4m3gc-sf32|i8-pt_w-i8gc-sf32|e4m3-g128_w-e4m3g128n128-sf32|bf16_w-u4g128-sbf16)_c-bf16_"
echo "build done at $(($(date +%s) - start)) s" | log
gpu_tests test_gpu test_gpu.py "in_step or heavy or instance_against or dispatch or graph or split_k or stream or scratch"
echo "tests done at $(($(date +%s) - start)) s" | log
for fa in e4m3gc-sf32:e4m3-pt i8gc-sf32:i8-pt; do
  f=${fa%%:*} a=${fa#*:}
  python3 scripts/sweep_tiles.py "$OUT/sweep-w8a8-${f%%-*}-mid.json" --format $f --act $a --layout generic \
    --match "^sm90_wgmma_dense_a-${a}_w-${f}_c-bf16_" --ms 48,64,96,128,192,256 2>&1 | sed "s/^/sweep $f /" | log
  echo "sweep $f done at $(($(date +%s) - start)) s" | log
done
