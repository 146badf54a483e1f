// The stage math of the sm80 family's GEMM with 8-bit activations (kernel/sm80_a8_dense.cuh): one
// stage of a warp's K steps, mma.sync m16n8k32 on fragments read by backend/sm80/a8_stage.h. Two
// forms: wide (the activations as the 16-row A operand, 8-channel weight tiles as B) and narrow,
// for launches of at most 8 rows (the weights as A, 16 channels a tile, the 8 tokens as B: 4 mma
// per K step and 64 channels instead of 8, as the weight-only kernel's narrow launches).
// 4-bit codes become 8-bit operands in registers on the way (numeric/nibble_lut.h: e4m3 or s8 by
// table lookup, exact; e2m1 into e4m3 by bit moves, 2^-6 of their values, which the kernel scales
// back on the sums). A lane's code word holds inputs 8t .. 8t + 7 of a k32 step, not the 4t .. 4t + 3
// and 16 + 4t .. 16 + 4t + 3 the fragment layout names: the sum over a step does not depend on which
// input sits where, so its activation fragments are read with the same inputs in the same places.
#pragma once

#include <cstdint>
#include <type_traits>

#include "humming/backend/sm80/a8_stage.h"
#include "humming/backend/sm80/ptx.h"
#include "humming/numeric/nibble_lut.h"

namespace humming {
namespace sm80 {

// K: the kernel (sm80::DenseA8): its operands (kIntOps: s8 with s32 sums, else FP8 with fp32
//    sums; kActE5M2, kCodeE5M2; kCode and kCodeBits, kShiftedE2m1 for 4-bit codes), its warp tile
//    (MT mma tiles of WM rows, 64 channels, kWarpK inputs per stage in kSteps K steps of 32) and its
//    stage layout (kABytes).
template <class K> struct A8StageMma {
  using Stage = A8Stage<K>;
  static constexpr bool kIntOps = K::kIntOps, kActE5M2 = K::kActE5M2, kCodeE5M2 = K::kCodeE5M2;
  static constexpr bool kFour = K::kCodeBits == 4, kShiftedE2m1 = K::kShiftedE2m1;
  static constexpr int MT = K::MT, WM = K::WM, WarpK = K::kWarpK, kSteps = K::kSteps, kABytes = K::kABytes;
  // The type of the tensor cores' sums: exact s32 for integers, fp32 (held in fewer bits by the
  // tensor cores, see ptx.h) for FP8.
  using Sum = std::conditional_t<kIntOps, int, float>;

  // d += a x b, the A operand of type AE5M2 (FP8 only), the B operand BE5M2.
  template <bool AE5M2, bool BE5M2>
  static __device__ __forceinline__ void mma(Sum (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (kIntOps)
      mma_16832_s8(d, a, b0, b1);
    else
      mma_16832_f8<AE5M2, BE5M2>(d, a, b0, b1, d);
  }

  // The eight 4-bit codes of word w (code i at bits 4i .. 4i + 3) as operand bytes: codes 0..3 in
  // lo, 4..7 in hi (numeric/nibble_lut.h; the lookup's table as immediates).
  static __device__ __forceinline__ void convert(uint32_t w, uint32_t &lo, uint32_t &hi) {
    if constexpr (kShiftedE2m1) {
      numeric::e2m1_to_shifted_e4m3(w, lo, hi);
    } else {
      constexpr numeric::NibbleTable table = numeric::nibble_table(K::kCode, kIntOps);
      numeric::nibbles_to_bytes(w, table, lo, hi);
    }
  }

  // Warp (wm, wn, wk) of a wide launch: K step s (of kSteps) of its kWarpK inputs of the stage, its
  // WM rows x 64 channels, added into `sums` (sums[i][j]: mma tile i of rows, channels j * 8..).
  static __device__ __forceinline__ void wide_step(const char *stage, int wm, int wn, int wk, int lane, int s,
                                                   Sum (&sums)[MT][8][4]) {
    const char *sw = stage + kABytes;
    const int kk = wk * WarpK + s * 32;
    uint32_t af[MT][4];
    if constexpr (kFour) {
      const int g = lane / 4;
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const uint2 lo = Stage::act_bytes8(stage, wm * WM + i * 16 + g, kk, lane);
        const uint2 hi = Stage::act_bytes8(stage, wm * WM + i * 16 + g + 8, kk, lane);
        a8::wide4_a(lo.x, lo.y, hi.x, hi.y, af[i]);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        uint32_t b0, b1;
        convert(Stage::code_word(sw, wn * 64 + j * 8 + g, kk, lane), b0, b1);
#pragma unroll
        for (int i = 0; i < MT; ++i) mma<kActE5M2, false>(sums[i][j], af[i], b0, b1);
      }
    } else {
#pragma unroll
      for (int i = 0; i < MT; ++i) Stage::rows16(stage, wm * WM + i * 16, kk, lane, af[i]);
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        uint32_t bf[4];
        Stage::rows8_pair(sw, wn * 64 + jj * 16, kk, lane, bf);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          mma<kActE5M2, kCodeE5M2>(sums[i][2 * jj], af[i], bf[0], bf[1]);
          mma<kActE5M2, kCodeE5M2>(sums[i][2 * jj + 1], af[i], bf[2], bf[3]);
        }
      }
    }
  }

  // Warp (wn, wk) of a narrow launch (warps of one mma tile of rows): K step s of its slice, its 64
  // channels as four A tiles of 16 against activation rows 0-7, added into `sums` (sums[J][2h + e]:
  // channel J * 16 + h * 8 + lane / 4, token (lane % 4) * 2 + e).
  static __device__ __forceinline__ void narrow_step(const char *stage, int wn, int wk, int lane, int s,
                                                     Sum (&sums)[4][4]) {
    const char *sw = stage + kABytes;
    const int kk = wk * WarpK + s * 32;
    if constexpr (kFour) {
      const int g = lane / 4;
      const uint2 b = Stage::act_bytes8(stage, g, kk, lane);
#pragma unroll
      for (int J = 0; J < 4; ++J) {
        uint32_t lo0, hi0, lo1, hi1, af[4];
        convert(Stage::code_word(sw, wn * 64 + J * 16 + g, kk, lane), lo0, hi0);
        convert(Stage::code_word(sw, wn * 64 + J * 16 + g + 8, kk, lane), lo1, hi1);
        a8::narrow4_a(lo0, hi0, lo1, hi1, af);
        mma<false, kActE5M2>(sums[J], af, b.x, b.y);
      }
    } else {
      uint32_t bf[2];
      Stage::rows8(stage, 0, kk, lane, bf);
#pragma unroll
      for (int J = 0; J < 4; ++J) {
        uint32_t af[4];
        Stage::rows16(sw, wn * 64 + J * 16, kk, lane, af);
        mma<kCodeE5M2, kActE5M2>(sums[J], af, bf[0], bf[1]);
      }
    }
  }
};

} // namespace sm80
} // namespace humming
