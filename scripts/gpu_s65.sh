#!/usr/bin/env bash
# On the lent GPU machine, session 65's calls; logs to $OUT/s65<PART>.txt. Session 65 ran a (H100;
# benchmarks/results/h100/tuning/h100-2026-12-08-s65-README.md); d (the activation kernel's patch)
# is the next session's first call, then c (its own build of the dense tiles) and b.
# PART picks the call:
#   a (about 400 s): one dev+experimental build (the dense u4g128 bf16 dev tiles, sym and -zi; the
#      grouped two-block t176x256x64, sym and -zi, warp and lone walks; the grouped t80x192 /
#      t128 / t144 / t256 lone tiles the rules take at 64-1024 rows per expert), then
#      - session 64's test_large_m_default_choices_match_reference (estimates past 16 rows of
#        tiles), not run there;
#      - the grouped tests, the epilogue's gated activation included: since session 65 a two-block
#        warpgroup of a grouped tile holds a gate block and its up block (column(cw, b)) and
#        pairs them in registers (GluExchange::pair), where the one-block tiles trade halves
#        through shared memory and the tiles over 128 tokens had no activation at all;
#      - the gate-up GEMM with the activation fused / the plain GEMM then the activation kernel
#        (scripts/moe_spill.py --glu silu), each tile forced, both instance orders, at Mixtral-8x7B
#        4096 (1024 rows per expert), Qwen3-30B-A3B 1024 / 4096 / 16384 (64 / 256 / 1024) and
#        DeepSeek-V3 4096 (128): the activation kernel's pass over the gate-up output is what a
#        two-block tile may save where it is no faster as a plain GEMM.
#   c (about 150 s, after a on the same machine, SKIP_BUILD=1): the rest of session 64's call b (the
#      other dense GPU tests, test_dispatch, the dense default against t128 / t256 forced).
#   d (about 150 s): the activation kernel's 16-byte path, tested and timed.
#   e (about 200 s): ncu of the t176 gate-up with and without the activation in its epilogue.
#   b (about 300 s, carry .peer; after a on the same machine, SKIP_BUILD=1): the W4A16 MoE layer
#      standing against humming-kernels 0.1.20 at 1024 / 4096 tokens (Qwen3-30B-A3B, Mixtral-8x7B),
#      and the dense W4A16 standing at m = 8192 against cuBLAS bf16 and humming-kernels.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/build/gpu-out}"
PART="${PART:-a}"
. scripts/build_filtered.sh
device_log "s65$PART.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | log
d=sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16
g=sm90_wgmma_moe_a-bf16_w-u4g128-sbf16_c-bf16
dense="dense_a-bf16_w-u4g128-sbf16(-zi)?_c-bf16_t(8x128x128|8x256x128|16x128x128|16x256x128|32x128x128|64x128x128|128x128x128|176x256x64|256x128x64)_w1x[24]x1_s[0-9]+"
case "$PART" in
a)
  two="moe_a-bf16_w-u4g128-sbf16(-zi)?_c-bf16_t176x256x64_w1x2x1_s4(_lone)?|moe_a-bf16_w-u4g128-sbf16_c-bf16_t(80x256x64_w1x2x1_s6|144x256x64_w1x2x1_s5)_lone"
  one="moe_a-bf16_w-u4g128-sbf16_c-bf16_t(80x192x128_w1x3x1_s5|128x128x128_w1x2x1_s4|144x128x128_w1x2x1_s4|256x128x64_w1x2x1_s5)_lone"
  HUMMING_PROFILE=dev+experimental build_filtered "^sm90_wgmma_(${dense}|${two}|${one})$"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests moe test_moe.py "activation_on_the_sm90 or sm90_kernels_matches"
  gpu_tests dense test_gpu.py "large_m"
  echo "tests done at $(($(date +%s) - start)) s" | log
  # Per point the tile the rules take now and the two-block tile of about its height; every
  # point in one instance order, then all again in the reverse order (so that a call cut short
  # still has each point once).
  spill() { # POINTS TILE,TILE,... REVERSE
    local order="$2"
    [ "$3" = 1 ] && order=$(echo "$2" | tr ',' '\n' | tac | paste -sd,)
    python3 scripts/moe_spill.py "$1" --w4a16 --kinds random --glu silu --iters 10 --instances "$order" 2>&1 | log
  }
  for reverse in 0 1; do
    spill mixtral-8x7b:4096,qwen3-30b-a3b:16384 \
      "${g}_t176x256x64_w1x2x1_s4_lone,${g}_t128x128x128_w1x2x1_s4_lone,${g}_t256x128x64_w1x2x1_s5_lone" $reverse
    spill qwen3-30b-a3b:4096,qwen3-30b-a3b:1024 \
      "${g}_t144x128x128_w1x2x1_s4_lone,${g}_t144x256x64_w1x2x1_s5_lone,${g}_t80x192x128_w1x3x1_s5_lone,${g}_t80x256x64_w1x2x1_s6_lone" $reverse
    spill deepseek-v3:4096 "${g}_t144x128x128_w1x2x1_s4_lone,${g}_t144x256x64_w1x2x1_s5_lone" $reverse
  done
  ;;
c)
  build_filtered "^sm90_wgmma_${dense}$"
  gpu_tests dense test_gpu.py "instance_against_reference or waves_of_tiles or rings_wrap or heavy_tiles or dispatch_crosses or graph"
  gpu_tests dispatch test_dispatch.py ""
  python3 scripts/time_shapes.py 28672x8192,8192x28672,4096x14336,5120x13824 2048,4096,8192,16384 --graph 2>&1 | log
  python3 scripts/time_shapes.py 28672x8192,8192x28672,4096x14336,5120x13824 2048,4096,8192,16384 --graph \
    --instances "${d}_t128x128x128_w1x2x1_s4,${d}_t256x128x64_w1x2x1_s5" 2>&1 | log
  ;;
d)
  # The activation kernel with 16-byte accesses (session 65; not on main until this call passes:
  # the patch applies to the tree first): its GPU tests, then the gate-up GEMM followed by it
  # (then-activate) at the points call a timed it on (Mixtral-8x7B 4096 in t176: 3298.8 us there,
  # 2580.2 for the GEMM alone; Qwen3-30B-A3B 1024 in t80x192 179.7 / 139.4, 4096 in t144 513.6 /
  # 358.7). Before timing, time the same points on main (REF=1: no patch) in the same call if
  # the machine differs from call a's.
  [ "${REF:-0}" = 1 ] || git apply benchmarks/results/h100/tuning/h100-2026-12-08-s65-activation-vec.patch \
    || { echo "the patch does not apply" | log; exit 1; }
  HUMMING_PROFILE=dev+experimental build_filtered \
    "^${g}_t(176x256x64_w1x2x1_s4|144x128x128_w1x2x1_s4|80x192x128_w1x3x1_s5)_lone$"
  echo "build done at $(($(date +%s) - start)) s" | log
  gpu_tests act test_moe.py "activate"
  python3 scripts/moe_spill.py mixtral-8x7b:4096,qwen3-30b-a3b:1024,qwen3-30b-a3b:4096 --w4a16 --kinds random \
    --parts gate-up --glu silu --iters 10 2>&1 | log
  ;;
e)
  # Why the gated activation in the epilogue costs 4-55 us more per tile than the plain tile (call
  # a): ncu (sections as scripts/ncu_moe_peer.sh, with the SASS stall summary) of Mixtral-8x7B's
  # gate-up at 4096 tokens in t176x256x64 lone, plain and with the activation (+experimental).
  HUMMING_PROFILE=dev+experimental build_filtered "^${g}_t176x256x64_w1x2x1_s4_lone$"
  for glu in "" silu; do
    SKIP_BUILD=1 IMPLS=aot NCU_SOURCE=1 MODEL=mixtral-8x7b TOKENS=4096 PART=gate-up MOE_GLU=$glu \
      MOE_INSTANCE=${g}_t176x256x64_w1x2x1_s4_lone bash scripts/ncu_moe_peer.sh 2>&1 | tail -5 | log
  done
  ;;
b)
  install_peer
  w4a16_moe_standing 1024,4096
  w4a16_dense_standing_m8192
  ;;
*)
  echo "PART must be a, b, c, d or e" >&2
  exit 2
  ;;
esac
echo "all done at $(($(date +%s) - start)) s" | log
