#!/usr/bin/env bash
# On the lent GPU machine, session 43's calls; logs to $OUT/s43.txt.
# PART=desc (the default): an A/B of the sm90 kernels' per-stage WGMMA descriptors, one build
#   directory rebuilt per variant: "old", every stage's descriptors rebuilt from the ring's address
#   (-DHUMMING_SM90_REBUILD_DESCS, the code before session 43); "new", stage 0's descriptors plus
#   the stage's offset (backend/sm90/ptx.h desc_bytes); "opaque", new with the ring base kept in a
#   register (-DHUMMING_SM90_OPAQUE_RING); then "old" again (the card's drift). Each times the FP8
#   block tiles t192n128s4 / t128n128s5, the per-channel FP8 t128x192 s5 and the weight-only
#   u4g128 t128 / t64 (scripts/time_shapes.py, GEMM alone, graph us after a read flush) and counts
#   each kernel's SASS instructions and S2UR (cuobjdump). After the last "new" build:
#   tests/test_gpu.py's per-instance tests of those tiles. (The "old" variants need the tree of
#   commit 7feffe5, where the macro still selects the rebuild; it was taken out after this A/B.)
# PART=waves: HUMMING_PERSISTENT_MAX_WAVES (scheduler/streamk.h) 8 (the default), 64, 8, 64 on the
#   same tiles and shapes (one build), each variant timed as in PART=desc; launches of more than
#   8 waves (the FP8 tiles at m = 4096 / 8192, the weight-only ones at 4096) spread their last wave
#   by stream-K under 64.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s43.txt
AB='^(sm90_wgmma_dense_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16_t(192x128x128_w3x1x1_s4|128x128x128_w2x1x1_s5)|'
AB+='sm90_wgmma_dense_a-e4m3-pt_w-e4m3gc-sf32_c-bf16_t128x192x128_w1x3x1_s5|'
AB+='sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t(128x128x128_w1x2x1_s4|64x128x128_w1x2x1_s5)|generic_dense_a-bf16_w-u4-s)'
B=sm90_wgmma_dense_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16_t
W=sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t
sass_counts() { # $1: variant; per sm90 kernel of the installed package: SASS instructions, S2UR
  local dir
  dir=$(python3 -c "import humming_aot, os; print(os.path.dirname(humming_aot.__file__))")
  for so in $(find "$dir" -name '*.so'); do cuobjdump -sass "$so" 2>/dev/null; done | python3 -c '
import re, sys
name, counts = None, {}
for line in sys.stdin:
    m = re.match(r"\s*Function : (\S+)", line)
    if m:
        name = m.group(1); counts[name] = [0, 0]; continue
    if name and re.search(r"/\*[0-9a-f]{4,}\*/\s+\S", line):
        counts[name][0] += 1
        counts[name][1] += "S2UR" in line
for n, (c, s) in counts.items():
    if "Dense" in n: print(f"{n[-90:]}: {c} instructions, {s} S2UR")
' | sed "s/^/$1 sass /" | log
}
time_tiles() { # $1: the variant's name in the log
  python3 scripts/time_shapes.py 7168x16384,18432x7168 4096,8192 --format e4m3g128n128-sf32 --act e4m3-g128 --prequant \
    --graph --flush read --iters 20 --instances ${B}192x128x128_w3x1x1_s4,${B}128x128x128_w2x1x1_s5 2>&1 \
    | sed "s/^/$1 blk /" | log
  python3 scripts/time_shapes.py 7168x16384,18432x7168 4096,8192 --format e4m3gc-sf32 --act e4m3-pt --prequant \
    --graph --flush read --iters 20 --instances sm90_wgmma_dense_a-e4m3-pt_w-e4m3gc-sf32_c-bf16_t128x192x128_w1x3x1_s5 \
    2>&1 | sed "s/^/$1 pc /" | log
  python3 scripts/time_shapes.py 8192x8192,28672x8192 ${W4_M:-256,4096} --format u4g128-sbf16 --layout sm90 --graph \
    --flush read --iters 20 --instances ${W}128x128x128_w1x2x1_s4,${W}64x128x128_w1x2x1_s5 2>&1 | sed "s/^/$1 w4a16 /" | log
}
# PART=raster: the order of the tiles of dense launches (scheduler/raster.h): rows of tiles walked
#   together by the 8-bit kernel (-DHUMMING_RASTER_ROWS=N, default 8) and the weight-only kernel in
#   that grouped order instead of row-major (-DHUMMING_SM90_W16_RASTER); variants r8 (the code
#   before), r4w, r16w, r8w, each timed as in PART=waves. (The two macros existed only in the working tree of
#   that run, on 7feffe5's successor: HUMMING_RASTER_ROWS set raster.h's kRasterRows, and
#   HUMMING_SM90_W16_RASTER made sm90_dense.cuh's dense for_each_work call grouped_tile; the
#   weight-only kernel takes the grouped order since, so this part no longer builds variants.)
# PART=final: the GPU tests of this session's kernel changes (the stage descriptors' add, the
#   stream-K tail limit of 64 waves, the weight-only kernel's grouped tile order): a dev build of
#   the dense u4g128 bf16 sm90 tiles, three grouped ones and their lone twins, one dense and one
#   grouped FP8 block tile and the generic instances; tests/test_gpu.py's per-instance, wave,
#   ring, stream-K, split-K, graph and stream tests and tests/test_moe.py's grouped sm90 ones.
if [ "${PART:-desc}" = raster ]; then
  for v in r8 r4w r16w r8w; do
    case $v in
      r8) flags= ;;
      r4w) flags="-DHUMMING_RASTER_ROWS=4 -DHUMMING_SM90_W16_RASTER" ;;
      r16w) flags="-DHUMMING_RASTER_ROWS=16 -DHUMMING_SM90_W16_RASTER" ;;
      r8w) flags=-DHUMMING_SM90_W16_RASTER ;;
    esac
    CUDAFLAGS=$flags HUMMING_PROFILE=dev build_filtered "$AB"
    echo "$v build done at $(($(date +%s) - start)) s" | log
    W4_M=4096 time_tiles $v
  done
  echo "all done at $(($(date +%s) - start)) s" | log
fi
if [ "${PART:-desc}" = waves ]; then
  HUMMING_PROFILE=dev build_filtered "$AB"
  echo "build done at $(($(date +%s) - start)) s" | log
  for w in 8 64 8 64; do
    HUMMING_PERSISTENT_MAX_WAVES=$w W4_M=4096 time_tiles "waves=$w"
  done
  echo "all done at $(($(date +%s) - start)) s" | log
fi
if [ "${PART:-desc}" = desc ]; then
  for v in old new opaque old2; do
    case $v in
      old | old2) flags=-DHUMMING_SM90_REBUILD_DESCS ;;
      new) flags= ;;
      opaque) flags=-DHUMMING_SM90_OPAQUE_RING ;;
    esac
    CUDAFLAGS=$flags HUMMING_PROFILE=dev build_filtered "$AB"
    echo "$v build done at $(($(date +%s) - start)) s" | log
    [ $v = old2 ] || sass_counts $v
    time_tiles $v
    if [ $v = new ]; then
      python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -rf -k "instance_against or output_rows or block_scaled or split_k" \
        2>&1 | tail -4 | sed "s/^/test_gpu /" | log
    fi
  done
  echo "all done at $(($(date +%s) - start)) s" | log
fi
if [ "${PART:-desc}" = final ]; then
  FF='^(sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_|sm90_wgmma_moe_a-bf16_w-u4g128-sbf16_c-bf16_t(8|16|24)x128x128_w1x2x1_s8(_lone)?$|'
  FF+='sm90_wgmma_dense_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16_t192x128x128_w3x1x1_s4$|'
  FF+='sm90_wgmma_moe_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16_t128x128x128_w2x1x1_s5$|generic_dense_a-bf16_w-u4-s)'
  HUMMING_PROFILE=dev build_filtered "$FF"
  echo "build took $(($(date +%s) - start)) s" | log
  python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -rf -k \
    "instance_against or output_rows or block_scaled or split_k or waves or rings or heavy or graph or dispatch_crosses" \
    2>&1 | tail -6 | sed "s/^/test_gpu /" | log
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rf -k "sm90_kernels or fp8_blocks" 2>&1 | tail -4 \
    | sed "s/^/test_moe /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=standing: issue 11's FP8 points on the landed code against cuBLASLt's FP8 GEMM in the same run
#   (GEMM alone, the dispatcher's choice, --prequant): 128 x 128 blocks on 7168 x 16384 at m = 4096,
#   per channel on 8192 x 8192, 28672 x 8192 and 8192 x 28672 at m = 8192.
if [ "${PART:-desc}" = standing ]; then
  HUMMING_PROFILE=dev build_filtered '^(sm90_wgmma_dense_a-e4m3-(g128_w-e4m3g128n128-sf32|pt_w-e4m3gc-sf32)_c-bf16_|generic_dense_a-bf16_w-u4-s)'
  echo "build took $(($(date +%s) - start)) s" | log
  python3 scripts/time_shapes.py 7168x16384 4096 --format e4m3g128n128-sf32 --act e4m3-g128 --prequant --graph \
    --flush read --iters 20 --cublaslt 2>&1 | sed "s/^/standing blk /" | log
  python3 scripts/time_shapes.py 8192x8192,28672x8192,8192x28672 8192 --format e4m3gc-sf32 --act e4m3-pt --prequant \
    --graph --flush read --iters 20 --cublaslt 2>&1 | sed "s/^/standing pc /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
# PART=w4a8jit (carry .peer; run in session 43 on Qwen3-30B-A3B at 64 / 256 tokens): W4A8 MoE
#   against humming-kernels' W4A8 (issue 14): a dev build of the grouped W4A8 e2m1-per-channel tiles
#   (layout 4), then scripts/bench_moe.py with humming-aot quantizing the rows inside each call
#   (--act e4m3-pt) and humming-kernels' w4a8 layer (e2m1 per channel x e4m3 per token, quantizing
#   inside too), gate-up + down, Qwen3-30B-A3B and Mixtral-8x7B at 1 to 1024 tokens
#   ($OUT/moe-w4a8-jit.json / .md).
if [ "${PART:-desc}" = w4a8jit ]; then
  HUMMING_PROFILE=dev build_filtered '^(sm90_wgmma_moe_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16|generic_dense_a-bf16_w-u4-s)'
  echo "build took $(($(date +%s) - start)) s" | log
  install_peer
  PYTHONPATH=/tmp/peer python3 scripts/bench_moe.py "$OUT/moe-w4a8-jit.json" --models "${MODELS:-qwen3-30b-a3b,mixtral-8x7b}" \
    --tokens "${TOKENS:-1,8,64,256,1024}" --format e2m1gc-sbf16 --act e4m3-pt --jit-config w4a8 \
    --impls humming-aot,humming-jit --jit-budget-s 360 2>&1 | grep -E "humming|rror" | sed "s/^/w4a8 /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
