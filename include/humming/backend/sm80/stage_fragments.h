// How the sm80 kernel (kernel/sm80_dense.cuh) reads one stage in shared memory back into mma
// fragments: the activations' swizzled layout (which the copies of backend/sm80/stage_copy.h write
// through the same a_offset), the A fragments by ldmatrix, this lane's packed weight words and
// their dequantization into B fragments (numeric/fast_dequant.h), and the scale rows and zero
// points of a scale segment. The stage math (backend/sm80/stage_mma.h) calls these per K step.
#pragma once

#include <cstdint>

#include "humming/backend/sm80/ptx.h"
#include "humming/layout/sm80.h"
#include "humming/numeric/fast_dequant.h"

namespace humming {
namespace sm80 {

// K: the kernel (sm80::Dense): its operand type (kBf16), its codes (kBits, kSigned, kFloatCode and
//    the layout's kWordsPerLane, kWordsPerBlock, kPairsPerWord), its zero points (kIntZero,
//    kFloatZero, kFold, kRowUnit), its stage layout (BK, BN, kABytes, kBBytes, kSBytes) and its
//    scale segments (kGroupK, kWarpK, kSegSteps).
template <class K> struct StageFragments {
  static constexpr bool kBf16 = K::kBf16, kSigned = K::kSigned, kFloatCode = K::kFloatCode, kFold = K::kFold,
                        kIntZero = K::kIntZero, kFloatZero = K::kFloatZero;
  static constexpr int kBits = K::kBits, kWordsPerLane = K::kWordsPerLane, kWordsPerBlock = K::kWordsPerBlock,
                       kPairsPerWord = K::kPairsPerWord;
  static constexpr int BK = K::BK, BN = K::BN, kABytes = K::kABytes, kBBytes = K::kBBytes, kSBytes = K::kSBytes;
  static constexpr int GroupK = K::kGroupK, WarpK = K::kWarpK, kSegSteps = K::kSegSteps;
  static constexpr float kRowUnit = K::kRowUnit;
  using Op = numeric::Operand<kBf16>;

  // Bias pair subtracting (magic + zero) from a register pair of codes.
  static __device__ __forceinline__ uint32_t bias_for(float z) { return numeric::zero_bias<kBf16>(z); }

  // Signed codes read as offset binary: flipping the sign bit of each code adds 2^(bits-1).
  static __device__ __forceinline__ uint32_t to_offset_binary(uint32_t w) {
    if constexpr (kSigned) return w ^ (kBits == 4 ? 0x88888888u : 0x80808080u);
    return w;
  }

  // Byte offset of 16-byte chunk `chunk` of activation row `row` in a stage: rows of BK inputs,
  // chunks XOR-swizzled with the row's low three bits, so that ldmatrix's eight rows of one chunk
  // fall in eight different banks (cp.async writes and ldmatrix reads go through this alike).
  static __device__ __forceinline__ int a_offset(int row, int chunk) {
    return row * BK * 2 + ((chunk ^ (row & 7)) * 16);
  }

  // This lane's packed words of the 16 x 64 block at stage input kk, warp column wn.
  static __device__ __forceinline__ void load_words(const char *sb, int wn, int kk, int lane,
                                                    uint32_t (&words)[kWordsPerLane]) {
    layout_sm80::load_lane_words<kWordsPerLane>(sb, (wn * (BK / 16) + kk / 16) * kWordsPerBlock + lane * kWordsPerLane,
                                                words);
  }

  // B fragments of one K step: bf[j] for channels j * 8 + lane / 4. With kFold the operands keep
  // the offset R; otherwise they are (code - zero) exactly, zero and bias per fragment column j
  // (float zero points: the codes themselves, exactly; the zero is applied later).
  static __device__ __forceinline__ void dequant(const uint32_t (&words)[kWordsPerLane], const uint32_t (&bias)[8],
                                                 const float (&zero)[8], uint32_t (&bf)[8][2]) {
#pragma unroll
    for (int pr = 0; pr < 16; ++pr) {
      const int j = pr / 2;
      const uint32_t w = to_offset_binary(words[pr / kPairsPerWord]);
      constexpr int kP = kPairsPerWord;
      uint32_t v;
      if constexpr (kBits == 4) {
        const uint32_t b = numeric::u4_pair_biased_at<kBf16>(w, pr % kP);
        v = kFold ? b : Op::sub(b, kFloatZero ? Op::kMagic : bias[j]);
      } else if constexpr (kFloatCode) {
        v = pr % kP == 0 ? numeric::e4m3_pair<kBf16, 0>(w) : numeric::e4m3_pair<kBf16, 1>(w);
      } else if constexpr (kFold) {
        v = pr % kP == 0 ? numeric::u8_pair_biased_f16<0>(w) : numeric::u8_pair_biased_f16<1>(w);
      } else {
        const uint32_t bj = kFloatZero ? Op::kMagic : bias[j];
        const float zj = kFloatZero ? 0.0f : zero[j];
        v = pr % kP == 0 ? numeric::u8_pair<kBf16, 0>(w, bj, zj) : numeric::u8_pair<kBf16, 1>(w, bj, zj);
      }
      bf[j][pr % 2] = v;
    }
  }

  // A fragment (ldmatrix.x4) of the 16-row tile starting at row `row0`, stage input kk.
  static __device__ __forceinline__ void load_a(const char *sa, int row0, int kk, int lane, uint32_t (&af)[4]) {
    const int row = row0 + (lane % 8) + ((lane / 8) % 2) * 8;
    const int chunk = kk / 8 + lane / 16;
    ldmatrix_x4(af, sa + a_offset(row, chunk));
  }

  // Group zero points of this lane's 8 fragment columns from scale row `row` of the stage.
  static __device__ __forceinline__ void group_zeros(const char *stage, int row, int wn, int lane, uint32_t (&bias)[8],
                                                     float (&zero)[8]) {
    const auto *zrow = reinterpret_cast<const uint8_t *>(stage + kABytes + kBBytes + kSBytes) + row * BN;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      zero[j] = static_cast<float>(zrow[wn * 64 + j * 8 + lane / 4]);
      bias[j] = bias_for(zero[j]);
    }
  }

  // First input (inside the stage) of scale segment sg of K-slice warp wk, and the stage's scale
  // row of input kk.
  static __device__ __forceinline__ int segment_input(int wk, int sg) { return wk * WarpK + sg * kSegSteps * 16; }
  static __device__ __forceinline__ int scale_row(int kk) {
    return (GroupK == 0 || GroupK >= BK) ? 0 : kk / (GroupK == 0 ? 1 : GroupK);
  }

  // The zero points of a scale segment: per group from scale row `row` of the stage (integer
  // zero points with K groups), else the fixed ones of the whole K.
  static __device__ __forceinline__ void segment_zeros(const char *stage, int row, int wn, int lane,
                                                       const uint32_t (&fixed_bias)[8], const float (&fixed_zero)[8],
                                                       uint32_t (&bias)[8], float (&zero)[8]) {
#pragma unroll
    for (int j = 0; j < 8; ++j) bias[j] = fixed_bias[j], zero[j] = fixed_zero[j];
    if constexpr (GroupK != 0 && kIntZero) group_zeros(stage, row, wn, lane, bias, zero);
  }

  // Float zero points of channels 2 * col and 2 * col + 1 (tile columns) from zero-point row `row`
  // of the stage, divided by P (exact: a power of two) for the segment's -P x row sums.
  static __device__ __forceinline__ float2 group_zero_pair(const char *stage, int row, int col) {
    const auto *zrow = reinterpret_cast<const uint32_t *>(stage + kABytes + kBBytes + kSBytes) + row * (BN / 2);
    const float2 z = Op::to_float2(zrow[col]);
    return make_float2(z.x * (1.0f / kRowUnit), z.y * (1.0f / kRowUnit));
  }
  static __device__ __forceinline__ float group_zero(const char *stage, int row, int ch) {
    const auto *zrow = reinterpret_cast<const uint16_t *>(stage + kABytes + kBBytes + kSBytes) + row * BN;
    return Op::to_float(zrow[ch]) * (1.0f / kRowUnit);
  }
};

} // namespace sm80
} // namespace humming
