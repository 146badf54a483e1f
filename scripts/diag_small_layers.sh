#!/usr/bin/env bash
# On the lent GPU machine: where the time of small layers at mid M goes (issue 10: 2880x4096 at
# m = 256 took 22.3 us against cuBLAS's 14.3 on the H200, session 27). One call:
# 1. a dev build of the u4g128 bf16 sm90 tiles of 32 to 256 tokens (HUMMING_FILTER overrides);
# 2. graph time (read flush) of each tile on the small corpus layers at m = 64, 100, 256 with the
#    stream-K settings as built, HUMMING_MIN_SLICE_K=256 / 1024 / 2048 and HUMMING_STREAM_K=0, and
#    cuBLAS bf16 (F.linear) on the same shapes in the same process kind;
# 3. unless PROBE=0, the same tiles rebuilt with the timeline probe and probed on two shapes.
# Logs to $OUT. SHAPES, MS, MATCH override the points; HUMMING_PROFILE=dev+experimental builds the
# experimental tiles too; TESTS runs those pytest paths on the build.
# Session 37 ran it with PROBE=0 SETTINGS='-' on the three-consumer tiles (since taken out):
# benchmarks/results/h100/tuning/h100-2026-12-05-s37-README.md.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/diag-small-out}"
mkdir -p "$OUT"
. scripts/build_filtered.sh
FILTER="${HUMMING_FILTER:-^sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t(32|64|128|256)x}"
SHAPES="${SHAPES:-2880x4096,4608x3584,3584x3584,576x7168,1536x7168,5120x2880}"
MS="${MS:-64,100,256}"
MATCH="${MATCH:-t(32|64|128)x}"
start=$(date +%s)
build_filtered "$FILTER"
echo "build took $(($(date +%s) - start)) s"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | tee "$OUT/gpu.txt"
python3 - "$SHAPES" "$MS" <<'EOF' 2>&1 | tee "$OUT/cublas.txt"
import statistics, sys, torch
from humming_aot.bench import Timer
timer = Timer(flush_mib=256)
for s in sys.argv[1].split(","):
    n, k = (int(v) for v in s.split("x"))
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    for m in (int(v) for v in sys.argv[2].split(",")):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        us = statistics.median(timer.graph(lambda: torch.nn.functional.linear(x, w), 10))
        print(f"{n}x{k} m={m}: graph {us:8.1f} us  cublas-bf16", flush=True)
EOF
# SETTINGS: the stream-K settings to time, ';'-separated ("-" = as built).
IFS=';' read -r -a settings <<<"${SETTINGS:--;HUMMING_MIN_SLICE_K=256;HUMMING_MIN_SLICE_K=1024;HUMMING_MIN_SLICE_K=2048;HUMMING_STREAM_K=0}"
for env in "${settings[@]}"; do
  [ "$env" = "-" ] && env=""
  echo "== ${env:-as built}" | tee -a "$OUT/tiles.txt"
  env $env python3 scripts/time_shapes.py "$SHAPES" "$MS" --match "$MATCH" --graph --flush read --iters 10 2>&1 |
    tee -a "$OUT/tiles.txt"
done
echo "timing done at $(($(date +%s) - start)) s"
# TESTS: pytest paths run on this build (e.g. tests/test_gpu.py for experimental tiles).
if [ -n "${TESTS:-}" ]; then
  python3 -m pytest -q $TESTS -p no:cacheprovider -rf 2>&1 | tail -15 | tee "$OUT/tests.txt"
fi
[ "${PROBE:-1}" = "0" ] && exit 0
OUT="$OUT/probe" HUMMING_FILTER="$FILTER" bash scripts/probe_sm90.sh "${PROBE_SHAPES:-2880x4096,4608x3584}" 100,256 \
  --match "${PROBE_MATCH:-t(64|128)x}"
echo "all done at $(($(date +%s) - start)) s"
