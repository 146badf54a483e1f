// The stage math of the sm80 kernel (kernel/sm80_dense.cuh): one stage of K steps of a warp, its A
// fragments by ldmatrix, its B fragments dequantized from the packed words (numeric/fast_dequant.h
// through the kernel's dequant), mma.sync m16n8k16 into fp32 sums. Three forms: warps of one mma
// tile sum each scale segment apart and scale the sums (exact; acc_scale), warps of several scale
// the operands, reused by every mma tile (operand_scale), and the narrow launches of at most 8 rows
// swap the mma's roles (narrow_stage).
#pragma once

#include <cstdint>

#include "humming/backend/sm80/ptx.h"
#include "humming/backend/sm80/stage_fragments.h"
#include "humming/numeric/fast_dequant.h"

namespace humming {
namespace sm80 {

// K: the kernel (sm80::Dense): its operand type (kBf16), its warp tile (MT mma tiles of 16 rows, WM
//    rows, kWarpK inputs per stage in kSteps K steps), its stage layout (kABytes, kBBytes, kSBytes,
//    BN), its scale segments (kSegs, kSegSteps) and its zero-point handling (kRowSums, kFold,
//    kFloatZero); its fragments and segment rows come from StageFragments<K>
//    (backend/sm80/stage_fragments.h).
template <class K> struct StageMma {
  using Frags = StageFragments<K>;
  static constexpr bool kBf16 = K::kBf16, kRowSums = K::kRowSums, kFold = K::kFold, kFloatZero = K::kFloatZero;
  static constexpr int GroupK = K::kGroupK, kSegs = K::kSegs, kSegSteps = K::kSegSteps, kABytes = K::kABytes,
                       kBBytes = K::kBBytes, kSBytes = K::kSBytes, BN = K::BN, kWordsPerLane = K::kWordsPerLane,
                       MT = K::MT, WM = K::WM, WarpK = K::kWarpK, kSteps = K::kSteps;

  // One stage of a warp of one mma tile: segments of kSegSteps K steps, each summed on its own and
  // scaled into acc (see the top of kernel/sm80_dense.cuh). `offset_sums` gathers -R x row sums over all of K
  // for per-channel scales, which add it once at the end.
  static __device__ __forceinline__ void acc_scale(const char *stage, int wn, int wk, int lane, float (&acc)[8][4],
                                                   float (&offset_sums)[4], const uint32_t (&fixed_bias)[8],
                                                   const float (&fixed_zero)[8], uint32_t neg_offset) {
    using Op = numeric::Operand<kBf16>;
    const char *sb = stage + kABytes;
    // Not unrolled: small groups (several segments) would otherwise overlap two segments' sums
    // and pass the 128-register budget.
#pragma unroll 1
    for (int sg = 0; sg < kSegs; ++sg) {
      const int kk0 = Frags::segment_input(wk, sg);
      const int row = Frags::scale_row(kk0);
      uint32_t af[kSegSteps][4];
#pragma unroll
      for (int s = 0; s < kSegSteps; ++s) Frags::load_a(stage, 0, kk0 + s * 16, lane, af[s]);
      uint32_t bias[8];
      float zero[8];
      Frags::segment_zeros(stage, row, wn, lane, fixed_bias, fixed_zero, bias, zero);
      if constexpr (GroupK == 0) {
#pragma unroll
        for (int s = 0; s < kSegSteps; ++s) {
          if constexpr (kRowSums) mma_16816<kBf16>(offset_sums, af[s], neg_offset, neg_offset);
          uint32_t words[kWordsPerLane], bf[8][2];
          Frags::load_words(sb, wn, kk0 + s * 16, lane, words);
          Frags::dequant(words, bias, zero, bf);
#pragma unroll
          for (int j = 0; j < 8; ++j) mma_16816<kBf16>(acc[j], af[s], bf[j][0], bf[j][1]);
        }
      } else {
        // -P x (row sums of the segment's activations). The sums start there with kFold (P = R),
        // else at zero.
        float start[4] = {0.0f, 0.0f, 0.0f, 0.0f}, none[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if constexpr (kRowSums)
#pragma unroll
          for (int s = 0; s < kSegSteps; ++s) mma_16816<kBf16>(start, af[s], neg_offset, neg_offset);
        const float (&init)[4] = kFold ? start : none;
        float seg[8][4];
#pragma unroll
        for (int s = 0; s < kSegSteps; ++s) {
          uint32_t words[kWordsPerLane], bf[8][2];
          Frags::load_words(sb, wn, kk0 + s * 16, lane, words);
          Frags::dequant(words, bias, zero, bf);
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            if (s == 0)
              mma_16816<kBf16>(seg[j], af[s], bf[j][0], bf[j][1], init);
            else
              mma_16816<kBf16>(seg[j], af[s], bf[j][0], bf[j][1]);
          }
        }
        // Scales (and float zero points) of this lane's accumulator columns j * 8 + (lane % 4) * 2 + {0, 1}.
        const auto *srow = reinterpret_cast<const uint32_t *>(stage + kABytes + kBBytes) + row * (BN / 2);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int col = (wn * 64 + j * 8 + (lane % 4) * 2) / 2;
          const float2 sc = Op::to_float2(srow[col]);
          if constexpr (kFloatZero) {
            // sums - z x row sums = sums + (z / P) x start.
            const float2 z = Frags::group_zero_pair(stage, row, col);
            seg[j][0] = fmaf(z.x, start[0], seg[j][0]);
            seg[j][1] = fmaf(z.y, start[1], seg[j][1]);
            seg[j][2] = fmaf(z.x, start[2], seg[j][2]);
            seg[j][3] = fmaf(z.y, start[3], seg[j][3]);
          }
          acc[j][0] = fmaf(sc.x, seg[j][0], acc[j][0]);
          acc[j][1] = fmaf(sc.y, seg[j][1], acc[j][1]);
          acc[j][2] = fmaf(sc.x, seg[j][2], acc[j][2]);
          acc[j][3] = fmaf(sc.y, seg[j][3], acc[j][3]);
        }
      }
    }
  }

  // One stage of a warp of MT mma tiles: operands (code - zero) * group scale, reused MT times.
  // Float zero points: the codes are exact, then code - z and the product with the scale round
  // once each; per-channel float zero points come as operand pairs in fixed_bias.
  static __device__ __forceinline__ void operand_scale(const char *stage, int wm, int wn, int wk, int lane,
                                                       float (&acc)[MT][8][4], const uint32_t (&fixed_bias)[8],
                                                       const float (&fixed_zero)[8]) {
    using Op = numeric::Operand<kBf16>;
    const char *sb = stage + kABytes;
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      const int kk = wk * WarpK + ks * 16; // input offset inside the stage
      uint32_t af[MT][4];
#pragma unroll
      for (int i = 0; i < MT; ++i) Frags::load_a(stage, wm * WM + i * 16, kk, lane, af[i]);
      uint32_t words[kWordsPerLane];
      Frags::load_words(sb, wn, kk, lane, words);
      uint32_t bias[8], scale_pair[8], zero_pair[8];
      float zero[8];
      const int row = Frags::scale_row(kk);
      if constexpr (GroupK != 0) {
        const auto *srow = reinterpret_cast<const uint16_t *>(stage + kABytes + kBBytes) + row * BN;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const uint16_t s = srow[wn * 64 + j * 8 + lane / 4];
          scale_pair[j] = static_cast<uint32_t>(s) | (static_cast<uint32_t>(s) << 16);
          if constexpr (kFloatZero) {
            const uint16_t z = srow[kSBytes / 2 + wn * 64 + j * 8 + lane / 4];
            zero_pair[j] = static_cast<uint32_t>(z) | (static_cast<uint32_t>(z) << 16);
          }
        }
      } else if constexpr (kFloatZero) {
#pragma unroll
        for (int j = 0; j < 8; ++j) zero_pair[j] = fixed_bias[j];
      }
      Frags::segment_zeros(stage, row, wn, lane, fixed_bias, fixed_zero, bias, zero);
      uint32_t bf[8][2];
      Frags::dequant(words, bias, zero, bf);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if constexpr (kFloatZero)
          bf[j][0] = Op::sub(bf[j][0], zero_pair[j]), bf[j][1] = Op::sub(bf[j][1], zero_pair[j]);
        if constexpr (GroupK != 0)
          bf[j][0] = Op::mul(bf[j][0], scale_pair[j]), bf[j][1] = Op::mul(bf[j][1], scale_pair[j]);
#pragma unroll
        for (int i = 0; i < MT; ++i) mma_16816<kBf16>(acc[i][j], af[i], bf[j][0], bf[j][1]);
      }
    }
  }

  // ---- narrow launches -----------------------------------------------------------------------
  // Launches of at most 8 rows of instances whose warps hold one mma tile swap the mma's roles: the
  // weights are the 16-row A operand (16 channels) and the activations the 8-column B operand (8
  // tokens). A B fragment pair of channels j * 8 and j * 8 + 8 (the kernel's dequant) is exactly the
  // A fragment of those 16 channels, and an ldmatrix of the activation rows 0-7 is the B fragment,
  // so 64 channels per K step take 4 mma instead of 8, with half the sums and half the scale FMAs.
  // Sums: accn[J][2h + e] is channel J * 16 + h * 8 + lane / 4, token (lane % 4) * 2 + e.

  // B fragments of the activation rows 0-7 for K steps kk / 16 and kk / 16 + 1: (r[0], r[1]) and
  // (r[2], r[3]).
  static __device__ __forceinline__ void narrow_load_act(const char *sa, int kk, int lane, uint32_t (&r)[4]) {
    const int row = lane % 8;
    const int chunk = kk / 8 + lane / 8;
    ldmatrix_x4(r, sa + Frags::a_offset(row, chunk)); // (row < 8: its low bits are itself)
  }

  // mma of the 16 channels J * 16 ... J * 16 + 15 (two dequant fragments) against 8 tokens.
  static __device__ __forceinline__ void narrow_mma(float (&d)[4], const uint32_t (&bf)[8][2], int J, uint32_t b0,
                                                    uint32_t b1) {
    const uint32_t a[4] = {bf[2 * J][0], bf[2 * J + 1][0], bf[2 * J][1], bf[2 * J + 1][1]};
    mma_16816<kBf16>(d, a, b0, b1);
  }

  // One stage of a narrow launch (see StageMma::acc_scale, backend/sm80/stage_mma.h, for the segments and the kept
  // offset).
  static __device__ __forceinline__ void narrow_stage(const char *stage, int wn, int wk, int lane, float (&acc)[4][4],
                                                      float (&offset_sums)[4], const uint32_t (&fixed_bias)[8],
                                                      const float (&fixed_zero)[8], uint32_t neg_offset) {
    using Op = numeric::Operand<kBf16>;
    const char *sb = stage + kABytes;
    const uint32_t neg[4] = {neg_offset, neg_offset, neg_offset, neg_offset};
#pragma unroll 1
    for (int sg = 0; sg < kSegs; ++sg) {
      const int kk0 = Frags::segment_input(wk, sg);
      const int row = Frags::scale_row(kk0);
      uint32_t act[kSegSteps / 2][4];
#pragma unroll
      for (int q = 0; q < kSegSteps / 2; ++q) narrow_load_act(stage, kk0 + q * 32, lane, act[q]);
      uint32_t bias[8];
      float zero[8];
      Frags::segment_zeros(stage, row, wn, lane, fixed_bias, fixed_zero, bias, zero);
      if constexpr (GroupK == 0) {
#pragma unroll
        for (int s = 0; s < kSegSteps; ++s) {
          const uint32_t b0 = act[s / 2][2 * (s % 2)], b1 = act[s / 2][2 * (s % 2) + 1];
          if constexpr (kRowSums) mma_16816<kBf16>(offset_sums, neg, b0, b1);
          uint32_t words[kWordsPerLane], bf[8][2];
          Frags::load_words(sb, wn, kk0 + s * 16, lane, words);
          Frags::dequant(words, bias, zero, bf);
#pragma unroll
          for (int J = 0; J < 4; ++J) narrow_mma(acc[J], bf, J, b0, b1);
        }
      } else {
        float start[4] = {0.0f, 0.0f, 0.0f, 0.0f}, none[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if constexpr (kRowSums)
#pragma unroll
          for (int s = 0; s < kSegSteps; ++s)
            mma_16816<kBf16>(start, neg, act[s / 2][2 * (s % 2)], act[s / 2][2 * (s % 2) + 1]);
        const float (&init)[4] = kFold ? start : none;
        float seg[4][4];
#pragma unroll
        for (int s = 0; s < kSegSteps; ++s) {
          const uint32_t b0 = act[s / 2][2 * (s % 2)], b1 = act[s / 2][2 * (s % 2) + 1];
          uint32_t words[kWordsPerLane], bf[8][2];
          Frags::load_words(sb, wn, kk0 + s * 16, lane, words);
          Frags::dequant(words, bias, zero, bf);
#pragma unroll
          for (int J = 0; J < 4; ++J) {
            const uint32_t a[4] = {bf[2 * J][0], bf[2 * J + 1][0], bf[2 * J][1], bf[2 * J + 1][1]};
            if (s == 0)
              mma_16816<kBf16>(seg[J], a, b0, b1, init);
            else
              mma_16816<kBf16>(seg[J], a, b0, b1);
          }
        }
        // Scales (and float zero points) of this lane's channels J * 16 + h * 8 + lane / 4.
        const auto *srow =
            reinterpret_cast<const uint16_t *>(stage + kABytes + kBBytes) + row * BN + wn * 64 + lane / 4;
#pragma unroll
        for (int J = 0; J < 4; ++J)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            if constexpr (kFloatZero) {
              const float z = Frags::group_zero(stage, row, wn * 64 + lane / 4 + J * 16 + h * 8);
              seg[J][2 * h] = fmaf(z, start[2 * h], seg[J][2 * h]);
              seg[J][2 * h + 1] = fmaf(z, start[2 * h + 1], seg[J][2 * h + 1]);
            }
            const float sc = Op::to_float(srow[J * 16 + h * 8]);
            acc[J][2 * h] = fmaf(sc, seg[J][2 * h], acc[J][2 * h]);
            acc[J][2 * h + 1] = fmaf(sc, seg[J][2 * h + 1], acc[J][2 * h + 1]);
          }
      }
    }
  }
};

} // namespace sm80
} // namespace humming
