# Sourced by the device scripts that profile a few instances (scripts/ncu_*.sh).
# build_filtered REGEX: unless SKIP_BUILD=1, builds and installs the package (HUMMING_PROFILE, dev
# unless set; dev+experimental adds the experimental tiles) with only
# the instances whose names match REGEX, log in $OUT/build.log, and stops the script with the log's
# tail if the build fails. CUDAFLAGS goes in as the CMAKE_CUDA_FLAGS cache variable: the build
# directory persists between calls, and CMake reads that environment variable only on a first
# configure (session 32), so a build without it could keep an earlier build's flags.
build_filtered() {
  [ "${SKIP_BUILD:-0}" = "1" ] && return 0
  . scripts/stale_sources.sh
  touch_patched_sources
  HUMMING_PROFILE="${HUMMING_PROFILE:-dev}" HUMMING_FILTER="$1" CMAKE_BUILD_PARALLEL_LEVEL=16 \
    python3 -m pip install --no-build-isolation --no-deps -v -C "cmake.define.CMAKE_CUDA_FLAGS=${CUDAFLAGS:-}" . \
    > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
}

# device_log NAME: what a device script sets up after build_filtered.sh: $OUT made, log() appending
# what it is given to $OUT/NAME (and echoing it), unbuffered Python, and `start` for elapsed times.
device_log() {
  mkdir -p "$OUT"
  export PYTHONUNBUFFERED=1
  eval "log() { tee -a \"\$OUT/$1\"; }"
  start=$(date +%s)
}

# install_peer: humming-kernels 0.1.20 from the wheel carried in .peer/ (run with `carry: [".peer"]`)
# into /tmp/peer, for PYTHONPATH=/tmp/peer. pip keeps the wheel's launcher and compiler executable
# (zipfile -e does not: PermissionError on nvrtc_compile, session 42).
install_peer() {
  python3 -m pip install -q --no-deps --no-index --upgrade --target /tmp/peer .peer/humming_kernels-0.1.20-*.whl
}

# w4a8_heights TAG MODEL:TOKENS ...: scripts/bench_moe.py on the grouped e2m1 per-channel W4A8 MoE (e4m3
# per-token rows quantized in each call), its default choice and every tile height near the mean
# rows per expert (--impls humming-aot,humming-aot-heights), to $OUT/moe-TAG-MODEL.json, lines through
# log (device_log). Sessions 44 and 45.
w4a8_heights() {
  local tag=$1 mt
  shift
  for mt in "$@"; do
    python3 scripts/bench_moe.py "$OUT/moe-$tag-${mt%%:*}.json" --models "${mt%%:*}" --tokens "${mt#*:}" \
      --format e2m1gc-sbf16 --act e4m3-pt --impls humming-aot,humming-aot-heights 2>&1 | grep -E "humming|rror" \
      | sed "s/^/$tag /" | log
  done
}

# gpu_tests TAG FILE K: pytest's summary and failures of tests/FILE -k K, through log (device_log)
# with TAG. Sessions 47 and 48.
gpu_tests() {
  python3 -m pytest -q "tests/$2" -p no:cacheprovider -rf -k "$3" 2>&1 | grep -E "^FAILED|passed|failed" | cut -c1-300 \
    | sed "s/^/$1 /" | log
}

# w4a8_standing: the W4A8 e2m1 per-channel standing in one run with the peers (install_peer first):
# the harness (python -m humming_aot.bench, format w4a8) against cuBLASLt FP8 and humming-kernels
# 0.1.20 W4A8 on the three headline shapes at m = 1, 64, 256 and 8192 ($OUT/dense-w4a8.*), and
# scripts/bench_moe.py against humming-kernels' W4A8 MoE on Qwen3-30B-A3B and Mixtral-8x7B at 64, 256
# and 1024 tokens ($OUT/moe-standing-w4a8.*); lines through log (device_log). Sessions 47 and 48.
w4a8_standing() {
  PYTHONPATH=/tmp/peer python3 -m humming_aot.bench --shapes 28672x8192,8192x8192,8192x28672 --ms 1,64,256,8192 \
    --formats w4a8 --impls humming-aot,cublaslt-fp8,humming-jit --jit-formats w4a8 --out-dir "$OUT" \
    --name dense-w4a8 --no-plot --time-budget-s 240 2>&1 | tail -40 | sed "s/^/dense /" | log
  w4a8_moe_standing 64,256,1024
}

# w4a8_moe_standing TOKENS: scripts/bench_moe.py's W4A8 e2m1 per-channel MoE layers of Qwen3-30B-A3B
# and Mixtral-8x7B at these token counts against humming-kernels 0.1.20's W4A8 MoE (install_peer
# first; $OUT/moe-standing-w4a8.*); lines through log (device_log).
w4a8_moe_standing() {
  PYTHONPATH=/tmp/peer python3 scripts/bench_moe.py "$OUT/moe-standing-w4a8.json" --models qwen3-30b-a3b,mixtral-8x7b \
    --tokens "$1" --format e2m1gc-sbf16 --act e4m3-pt --jit-config w4a8 --impls humming-aot,humming-jit \
    --jit-budget-s 200 2>&1 | grep -E "humming|rror" | grep -v "\[jit\]" | sed "s/^/moe /" | log
}

# w4a16_moe_standing TOKENS: the same for the W4A16 u4g128 MoE layers against humming-kernels' W4A16
# MoE ($OUT/moe-standing-w4a16.*; lines tagged moe16). Sessions 58 and 59.
w4a16_moe_standing() {
  PYTHONPATH=/tmp/peer python3 scripts/bench_moe.py "$OUT/moe-standing-w4a16.json" --models qwen3-30b-a3b,mixtral-8x7b \
    --tokens "$1" --impls humming-aot,humming-jit --jit-budget-s 200 2>&1 | grep -E "humming|rror" | grep -v "\[jit\]" \
    | sed "s/^/moe16 /" | log
}

# w4a16_dense_standing_m8192: the dense W4A16 u4g128 standing at m = 8192 on the three headline shapes
# against cuBLAS bf16 and humming-kernels 0.1.20 (install_peer first; $OUT/dense-w4a16-m8192.*);
# lines through log (device_log). Sessions 64 and 65.
w4a16_dense_standing_m8192() {
  PYTHONPATH=/tmp/peer python3 -m humming_aot.bench --shapes 28672x8192,8192x8192,8192x28672 --ms 8192 \
    --formats w4a16 --impls humming-aot,cublas-bf16,humming-jit --jit-formats w4a16 --out-dir "$OUT" \
    --name dense-w4a16-m8192 --no-plot --time-budget-s 150 2>&1 | tail -20 | log
}

# w4a16_decode_probe: W4A16 u4g128 at m = 1 on 28672 x 8192, 8192 x 28672 and 8192 x 8192 with the
# decode tiles t8x256 and t16x256 forced, the weight from nn.Linear's uniform initialization and from
# randn, then the benchmark's humming-aot rows (which quantize randn): session 52 timed 28672 x 8192
# at 58 us graph in the benchmark and 50 in time_shapes.py on the same instance. Needs the dense
# u4g128 W4A16 tiles; lines through log (device_log). Sessions 52 and 53.
w4a16_decode_probe() {
  local w16=sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16 w
  for w in linear randn; do
    python3 scripts/time_shapes.py 28672x8192,8192x28672,8192x8192 1 --graph --flush read --iters 30 --weights $w \
      --instances ${w16}_t8x256x128_w1x4x1_s8,${w16}_t16x256x128_w1x4x1_s7 2>&1 | sed "s/^/w4a16 $w /" | log
  done
  python3 -m humming_aot.bench --shapes 28672x8192,8192x28672,8192x8192 --ms 1 --formats w4a16 --impls humming-aot \
    --out-dir "$OUT" --name w4a16-m1 --no-plot 2>&1 | grep "m=1:" | sed "s/^/w4a16 bench /" | log
}

# ncu_one TAG N K M FORMAT LAYOUT INSTANCE: ncu of one forced dense instance with e4m3 per-token
# activations (scripts/profile_one.py; its third launch): the details page to $OUT/ncu_TAG.txt, the
# SASS page with stall samples per instruction gzipped beside it (ncu_TAG_sass.csv.gz) and summed by
# scripts/ncu_sass_summary.py (ncu_TAG_sass.txt), the headline lines through log (device_log).
# Sessions 57 and 58.
ncu_one() {
  timeout 150 ncu --kernel-name regex:dense_kernel --launch-skip 2 --launch-count 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats \
    --section SchedulerStats --section WarpStateStats --section SourceCounters -f -o "/tmp/ncu_$1" \
    python3 scripts/profile_one.py $2 $3 $4 $5 $6 e4m3-pt $7 > /dev/null 2>&1
  ncu --import "/tmp/ncu_$1.ncu-rep" --page details > "$OUT/ncu_$1.txt" 2>&1
  ncu --import "/tmp/ncu_$1.ncu-rep" --page source --print-source sass --csv 2>/dev/null > "/tmp/ncu_$1.csv"
  gzip -c "/tmp/ncu_$1.csv" > "$OUT/ncu_$1_sass.csv.gz"
  python3 scripts/ncu_sass_summary.py "/tmp/ncu_$1.csv" > "$OUT/ncu_$1_sass.txt" 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Ipc A" \
    "$OUT/ncu_$1.txt" | sed "s/^/ncu $1 /" | log
}
