#!/usr/bin/env bash
# On the lent GPU machine, session 66's calls; logs to $OUT/s66<PART>.txt.
# PART picks the call. With one call only, take z; with more, a, d, b, c (the patches' own A/B).
#   z (about 550 s; carry .peer): both MoE patches of sessions 65 and 66 applied (the activation
#      kernel's 16-byte path and the one-pass activation and quantization), one dev build of every
#      grouped W4A16 u4g128 (sym) and W4A8 e2m1gc tile, the grouped GPU tests with both patches,
#      then the W4A16 and W4A8 MoE layer standings against humming-kernels 0.1.20 at 1024 / 4096
#      tokens (session 62: W4A16 0.93x / 0.96x Qwen3-30B-A3B, 1.03x / 0.85x Mixtral-8x7B; W4A8
#      4096 tokens 0.95x / 0.94x). Commit the patches if the tests pass.
#   a (about 400 s): session 65's activation kernel patch (16-byte loads and stores, 8 outputs a
#      thread; benchmarks/results/h100/tuning/h100-2026-12-08-s65-activation-vec.patch) applied
#      unless the tree has it, one dev build of the grouped u4g128 bf16 tiles (sym) and the dense
#      u4g128 bf16 dev tiles, then
#      - the grouped GPU tests (the activation kernel on F = 256 and on misaligned rows included);
#      - the gate-up GEMM of the default choice then the activation (scripts/moe_spill.py --glu:
#        its then-activate line), Mixtral-8x7B 4096 / Qwen3-30B-A3B 1024 / 4096 tokens;
#      - the same with the patch reverted and the library rebuilt (only src/moe_route.cu
#        recompiles), so that both kernels are timed on one machine.
#   b (about 350 s; carry .peer): the same build with the patch (a no-op build after a on a warm
#      machine), then the W4A16 MoE layer standing against humming-kernels 0.1.20 at 1024 / 4096
#      tokens (Qwen3-30B-A3B, Mixtral-8x7B) and the dense W4A16 standing at m = 8192.
#   c (about 250 s): the two-block grouped tiles' gated activation through the output boxes
#      (benchmarks/results/h100/tuning/h100-2026-12-08-s66-glu-staged.patch; session 65 measured
#      the activation in the epilogue, which stored directly, slower than the plain GEMM then the
#      activation kernel): dev+experimental build of t176x256x64 / t144x256x64 lone, Mixtral-8x7B
#      4096 and Qwen3-30B-A3B 4096 gate-up timed plain / fused / then-activate, then the patch
#      applied, rebuilt, the grouped activation GPU tests and the same timings.
#   d (about 350 s; carry .peer to also get the peer's rows): the one-pass activation and per-token
#      quantization (benchmarks/results/h100/tuning/h100-2026-12-08-s66-activation-quantize.patch:
#      moe_activation_quantize's kernel, which QuantMoE's layers with 8-bit down activations call
#      since session 66; main runs moe_activation then quantize_act there): dev build of the
#      grouped W4A8 e2m1gc tiles, the W4A8 layers of Qwen3-30B-A3B and Mixtral-8x7B at 1024 / 4096
#      tokens on main (the two kernels), then the patch applied and rebuilt, its GPU tests (bit for
#      bit the two kernels) and the same layers again; with .peer, the W4A8 layer standing against
#      humming-kernels 0.1.20 at 1024 / 4096 tokens (w4a8_moe_standing). Land the patch if the
#      tests pass.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
PART="${PART:-a}"
. scripts/build_filtered.sh
device_log "s66$PART.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
patch=benchmarks/results/h100/tuning/h100-2026-12-08-s65-activation-vec.patch
grouped="moe_a-bf16_w-u4g128-sbf16_c-bf16_t[0-9x]+_w[0-9x]+_s[0-9]+(_lone|_ks)?"
dense="dense_a-bf16_w-u4g128-sbf16_c-bf16_t(8x128x128|8x256x128|16x128x128|16x256x128|32x128x128|64x128x128|128x128x128|176x256x64|256x128x64)_w1x[24]x1_s[0-9]+"
filter="^sm90_wgmma_(${grouped}|${dense})$"
g=sm90_wgmma_moe_a-bf16_w-u4g128-sbf16_c-bf16
# The patch is applied where the tree does not hold it yet (git apply --check fails once it has).
apply_patch() { git apply --check "$patch" 2> /dev/null && git apply "$patch" && echo "patch applied" | log; }
then_activate() { # TAG
  python3 scripts/moe_spill.py mixtral-8x7b:4096,qwen3-30b-a3b:1024,qwen3-30b-a3b:4096 --w4a16 --kinds random \
    --parts gate-up --glu silu --iters 10 2>&1 | sed "s/^/$1 /" | log
}
case "$PART" in
a)
  apply_patch
  build_filtered "$filter"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests moe test_moe.py "activate or sm90_kernels_matches or on_the_grouped or masked_on_the_sm90 or offsets_past \
or choice or programmatic"
  echo "tests done at $(($(date +%s) - start)) s" | log
  then_activate vec
  git apply -R "$patch" && echo "patch reverted" | log
  build_filtered "$filter"
  echo "reference build done at $(($(date +%s) - start)) s" | log
  then_activate ref
  ;;
b)
  apply_patch
  build_filtered "$filter"
  echo "build done at $(($(date +%s) - start)) s" | log
  install_peer
  w4a16_moe_standing 1024,4096
  w4a16_dense_standing_m8192
  ;;
c)
  two="^${g}_t(176x256x64_w1x2x1_s4|144x256x64_w1x2x1_s5)_lone$"
  glu_times() { # TAG
    python3 scripts/moe_spill.py mixtral-8x7b:4096,qwen3-30b-a3b:4096 --w4a16 --kinds random --parts gate-up \
      --glu silu --iters 10 --instances "${g}_t176x256x64_w1x2x1_s4_lone,${g}_t144x256x64_w1x2x1_s5_lone" 2>&1 \
      | sed "s/^/$1 /" | log
  }
  HUMMING_PROFILE=dev+experimental build_filtered "$two"
  glu_times direct
  git apply benchmarks/results/h100/tuning/h100-2026-12-08-s66-glu-staged.patch && echo "glu patch applied" | log
  HUMMING_PROFILE=dev+experimental build_filtered "$two"
  gpu_tests glu test_moe.py "activation_on_the_sm90 or sm90_kernels_matches"
  glu_times staged
  ;;
d)
  w4a8="^sm90_wgmma_moe_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16_t[0-9x]+_w[0-9x]+_s[0-9]+_l4(_lone)?$"
  w4a8_layers() { # TAG
    python3 scripts/bench_moe.py "$OUT/moe-w4a8-$1.json" --models qwen3-30b-a3b,mixtral-8x7b --tokens 1024,4096 \
      --format e2m1gc-sbf16 --act e4m3-pt --impls humming-aot 2>&1 | grep -E "humming|rror" | sed "s/^/$1 /" | log
  }
  build_filtered "$w4a8"
  echo "build done at $(($(date +%s) - start)) s" | log
  w4a8_layers two-kernels
  git apply benchmarks/results/h100/tuning/h100-2026-12-08-s66-activation-quantize.patch \
    && echo "activation-quantize patch applied" | log
  build_filtered "$w4a8"
  gpu_tests aq test_moe.py "activate or 8bit_activations"
  w4a8_layers one-pass
  if ls .peer/humming_kernels-0.1.20-*.whl > /dev/null 2>&1; then
    install_peer
    w4a8_moe_standing 1024,4096
  fi
  ;;
z)
  apply_patch
  git apply benchmarks/results/h100/tuning/h100-2026-12-08-s66-activation-quantize.patch \
    && echo "activation-quantize patch applied" | log
  build_filtered "^sm90_wgmma_moe_a-(e4m3-pt_w-e2m1gc-sbf16_c-bf16_.*_l4|bf16_w-u4g128-sbf16_c-bf16_t[0-9x]+_w[0-9x]+_s[0-9]+)(_lone|_ks)?$"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests moe test_moe.py "activate or sm90_kernels or 8bit_activations or on_the_grouped or choice"
  echo "tests done at $(($(date +%s) - start)) s" | log
  install_peer
  w4a16_moe_standing 1024,4096
  w4a8_moe_standing 1024,4096
  ;;
*)
  echo "PART must be z, a, b, c or d" >&2
  exit 2
  ;;
esac
echo "all done at $(($(date +%s) - start)) s" | log
