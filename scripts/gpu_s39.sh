#!/usr/bin/env bash
# On the lent GPU machine, session 39's calls; logs to $OUT/s39.txt.
# PART=new (the default): layout 3's spread e2m1 bit order (layout/sm90.h fp4_bit; the kernels turn
#   a word's four pairs into bf16 operands with three rotations, four PRMTs and four ANDs):
#   1. a build (profile full: its bf16 sm90 tiles of these formats are dev's) of the e2m1 and u4g128
#      bf16 sm90 instances (dense and grouped), three f16 e2m1 tiles (the f16 operand path), the
#      generic ones the tests fall back to, and the sm80 tile the MoE per-expert test needs;
#   2. tests/test_gpu.py -k "e2m1 or pack" and all of tests/test_moe.py (it holds the grouped e2m1
#      tests and session 38's never-run bitwise test of a layer with programmatic launches off / on);
#   3. graph us after a read flush, e2m1g32-sbf16 and u4g128-sbf16 in the same run (SHAPES, MS).
# PART=moe (next, on the warm machine, no build): bench_moe's layer in both formats (MODELS, TOKENS) to
#   $OUT/moe-{e2m1,u4}-new.json, then session 38's unrun check: DeepSeek-V3's layer routed as its
#   checkpoint does (bench_moe --model-routing), HUMMING_PDL off then on, to $OUT/deepseek-{off,on}.json.
# PART=old (right after, on the warm machine): applies AB_PATCH (the reverse of this session's
#   layout and kernel diff, an untracked file), rebuilds the e2m1 instances alone and times them the
#   same way: the A/B of the bit order on one machine.
# PART=fix: a dev+experimental build of the grouped u4g128 and e2m1g32 tiles alone, then tests/test_moe.py (the
#   correction-bias fix under session 38's PDL test; e2m1's new K-split twin t8ws), and bench_moe of
#   e2m1g32 at 1 and 2 tokens (Mixtral-8x7B, gpt-oss-120b: where the split twin is taken), a short call.
# PART=ncu: PART=new's build, tests/test_moe.py, then ncu of one grouped GEMM (Qwen3-30B-A3B's
#   gate-up at TOKENS, 64 unless set) in e2m1g32-sbf16 and in u4g128-sbf16 (scripts/ncu_moe_peer.sh
#   with MOE_FORMAT): why the grouped e2m1 GEMM did not get faster with the cheaper conversion.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
. scripts/build_filtered.sh
device_log s39.txt
SHAPES="${SHAPES:-28672x8192,8192x8192,5760x2880,2880x4096}"
MS="${MS:-1,16,64,256,1024}"
time_formats() { # $1: label; the rest: formats
  local label=$1
  shift
  for f in "$@"; do
    python3 scripts/time_shapes.py "$SHAPES" "$MS" --format "$f" --graph --flush read --iters 10 2>&1 \
      | sed "s/^/$label $f /" | log
  done
}
moe_formats() { # $1: label; the rest: formats
  local label=$1
  shift
  for f in "$@"; do
    python3 scripts/bench_moe.py "$OUT/moe-${f%%g*}-$label.json" --format "$f" \
      --models "${MODELS:-qwen3-30b-a3b,gpt-oss-120b,mixtral-8x7b}" --tokens "${TOKENS:-1,8,64,256}" \
      --impls humming-aot 2>&1 | grep -E "humming-aot:|rror" | sed "s/^/$label $f /" | log
  done
}
moe_tests() { # tests/test_moe.py, its summary into the log
  python3 -m pytest -q tests/test_moe.py -p no:cacheprovider -rfs 2>&1 | tail -8 | sed "s/^/test_moe /" | log
}
built() { # $1: profile, $2: filter; builds them (build_filtered) and logs the time it took
  HUMMING_PROFILE="$1" build_filtered "$2"
  echo "build took $(($(date +%s) - start)) s" | log
}
sass_mix() { # $1: label; SASS opcodes of the dense t64 tiles (e2m1g32; u4g128 too for "new"), the whole
  # SASS to $OUT/sass-LABEL-NAME.txt for reading here (cuobjdump is on the GPU machine only)
  local g=/tmp/s39-gen
  rm -rf "$g" && python3 tools/gen_instances.py --arch 90a --profile dev --out "$g" \
    --filter "sm90_wgmma_dense_a-bf16_w-(e2m1g32$([ "$1" = new ] && echo '|u4g128'))-sbf16_c-bf16_t64x128" > /dev/null
  for f in "$g"/instances/*.cu; do
    nvcc -cubin -DHUMMING_VERSION=\"0.1.0\" -O3 -DNDEBUG -std=c++17 --expt-relaxed-constexpr -arch=sm_90a -I include \
      "$f" -o "$g/k.cubin" && cuobjdump -sass "$g/k.cubin" > "$OUT/sass-$1-$(basename "$f" .cu | cut -c1-60).txt"
    grep -oE '^\s+/\*[0-9a-f]+\*/\s+[A-Z0-9_.]+' "$OUT/sass-$1-$(basename "$f" .cu | cut -c1-60).txt" \
      | awk '{print $2}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -14 | tr '\n' ' ' | sed "s/^/$1 sass $(basename "$f" .cu): /" | log
    echo | log
  done
}
if [ "${PART:-new}" = old ]; then
  command -v patch > /dev/null && patch -p1 --forward -i "$AB_PATCH" > "$OUT/patch.log" 2>&1 \
    || git apply "$AB_PATCH" >> "$OUT/patch.log" 2>&1 || { echo "the patch does not apply" | log; exit 1; }
  build_filtered '^(sm90_wgmma_(dense|moe)_a-bf16_w-e2m1g32-sbf16_c-bf16)'
  echo "old build took $(($(date +%s) - start)) s" | log
  sass_mix old
  time_formats old e2m1g32-sbf16
  moe_formats old e2m1g32-sbf16
  echo "all done at $(($(date +%s) - start)) s" | log
  exit 0
fi
FILTER_NEW="${HUMMING_FILTER:-^(sm90_wgmma_(dense|moe)_a-bf16_w-(e2m1g(16|32)|u4g128)-sbf16_c-bf16|sm90_wgmma_dense_a-f16_w-e2m1g32-sf16_c-f16_t(8|64)x|generic_dense_a-bf16_w-(u4|e2m1)-s|sm80_mma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t16x128)}"
if [ "${PART:-new}" = new ]; then
built "${HUMMING_PROFILE:-full}" "$FILTER_NEW"
python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -rfs -k "e2m1 or pack" 2>&1 | tail -8 | sed "s/^/test_gpu /" | log
moe_tests
echo "tests done at $(($(date +%s) - start)) s" | log
sass_mix new
time_formats new e2m1g32-sbf16 u4g128-sbf16
echo "all done at $(($(date +%s) - start)) s" | log
fi
if [ "${PART:-new}" = moe ]; then
moe_formats new e2m1g32-sbf16 u4g128-sbf16
for v in off:0 on:1; do
  HUMMING_PDL=${v#*:} python3 scripts/bench_moe.py "$OUT/deepseek-${v%%:*}.json" --model-routing \
    --models deepseek-v3 --tokens 1,8,64 --impls humming-aot 2>&1 | grep -E "humming-aot:|rror" \
    | sed "s/^/pdl ${v%%:*} /" | log
done
echo "all done at $(($(date +%s) - start)) s" | log
fi
if [ "${PART:-new}" = ncu ]; then
  built "${HUMMING_PROFILE:-full}" "$FILTER_NEW"
  moe_tests
  for f in e2m1g32-sbf16 u4g128-sbf16; do
    SKIP_BUILD=1 IMPLS=aot MOE_FORMAT=$f TOKENS="${TOKENS:-64}" bash scripts/ncu_moe_peer.sh 2>&1 | tail -42 | sed "s/^/ncu $f /" | log
  done
  echo "all done at $(($(date +%s) - start)) s" | log
fi
if [ "${PART:-new}" = fix ]; then
  built "${HUMMING_PROFILE:-dev+experimental}" \
    '^(sm90_wgmma_moe_a-bf16_w-(u4g128|e2m1g32)-sbf16_c-bf16|generic_dense_a-bf16_w-u4-s|sm80_mma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t16x128)'
  moe_tests
  python3 scripts/bench_moe.py "$OUT/moe-e2m1-split.json" --format e2m1g32-sbf16 --models mixtral-8x7b,gpt-oss-120b \
    --tokens 1,2 --impls humming-aot 2>&1 | grep -E "humming-aot:|rror" | sed "s/^/e2m1 split /" | log
  echo "all done at $(($(date +%s) - start)) s" | log
fi
