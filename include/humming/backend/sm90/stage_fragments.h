// How the sm90 weight-only kernel (kernel/sm90_dense.cuh) turns one stage of its shared-memory
// ring into WGMMA register A fragments: each consumer thread's layout-3 words of the stage's
// 64 x 64 blocks (layout/sm90.h), the zero points and scales of the stage's scale rows, and the
// exact operand pairs (numeric/fast_dequant.h), scaled per operand where the kernel does not
// scale its sums per group.
#pragma once

#include <cstdint>

#include "humming/layout/sm90.h"
#include "humming/numeric/fast_dequant.h"

namespace humming {
namespace sm90 {

// K: the kernel (sm90::Dense): its operand type (kBf16) and codes (kCode, kWords per thread and
//    block, kBlockBytes, kIntZero), its stage (kKAtoms 64-input blocks of kColumns 64-channel
//    columns, BK, BN, kSteps K steps; kABytes of activations, then kWBytes of weights,
//    kSBytes of scale rows, the zero-point rows) and its scale groups (kGroupK, kSets rows a
//    stage, kSumScales: the sums are scaled per group, not the operands).
template <class K> struct StageFragments {
  static constexpr bool kBf16 = K::kBf16, kIntZero = K::kIntZero, kSumScales = K::kSumScales;
  static constexpr uint32_t kCodeId = K::kCode.id();
  static constexpr int KAtoms = K::kKAtoms, Columns = K::kColumns, GroupK = K::kGroupK, BK = K::BK, BN = K::BN;
  static constexpr int kSteps = K::kSteps, kSets = K::kSets, kWords = K::kWords, kBlockBytes = K::kBlockBytes;
  static constexpr int kABytes = K::kABytes, kWBytes = K::kWBytes, kSBytes = K::kSBytes;

  // Scale row of the stage that holds K step `step` (0 when one group spans the stage).
  static constexpr int scale_row(int step) {
    return GroupK == 0 || GroupK >= BK ? 0 : step * 16 / (GroupK == 0 ? 1 : GroupK);
  }

  // This thread's A fragments of one stage: af[step][r] is register r of K step `step`, channels
  // c0 (r even) and c0 + 8 (r odd) of the column's 64 (see layout/sm90.h). `cw` is the column
  // (the thread's consumer warpgroup's block: K::kColumns of them), `t` the thread in its
  // warpgroup, `col` its first channel of the column inside the tile;
  // `bias` / `zero` the per-channel zero points (used when the stage holds none). With kSumScales,
  // sc[g][h] is the scale of group g of the stage for channel c0 + 8h, and the operands stay
  // unscaled.
  static __device__ __forceinline__ void load(const char *stage, int cw, int t, int col, const uint32_t (&bias)[2],
                                              const float (&zero)[2], uint32_t (&af)[kSteps][4],
                                              float (&sc)[kSets][2]) {
    using Op = numeric::Operand<kBf16>;
    if constexpr (kSumScales) {
      const auto *srows = reinterpret_cast<const uint16_t *>(stage + kABytes + kWBytes);
#pragma unroll
      for (int g = 0; g < kSets; ++g)
#pragma unroll
        for (int h = 0; h < 2; ++h) sc[g][h] = Op::to_float(srows[g * BN + col + 8 * h]);
    }
#pragma unroll
    for (int at = 0; at < KAtoms; ++at) {
      uint32_t words[kWords];
      load_words(stage, at, cw, t, words);
#pragma unroll
      for (int sa = 0; sa < 4; ++sa) convert_step(stage, at * 4 + sa, col, bias, zero, words, af[at * 4 + sa]);
    }
  }

  // This thread's layout-3 words of 64-input block `at` of the stage, column `cw`.
  static __device__ __forceinline__ void load_words(const char *stage, int at, int cw, int t,
                                                    uint32_t (&words)[kWords]) {
    const uint32_t *blk = reinterpret_cast<const uint32_t *>(stage + kABytes + (at * Columns + cw) * kBlockBytes);
    layout_sm90::load_thread_words<kWords>(blk, t, words);
  }

  // K step `step`'s four A registers from the words of its 64-input block (load_words), with the
  // zero points and (unless kSumScales) the scales of its scale row.
  static __device__ __forceinline__ void convert_step(const char *stage, int step, int col, const uint32_t (&bias)[2],
                                                      const float (&zero)[2], const uint32_t (&words)[kWords],
                                                      uint32_t (&af)[4]) {
    using Op = numeric::Operand<kBf16>;
    const int sa = step % 4, row = scale_row(step);
    uint32_t b[2] = {bias[0], bias[1]}, sc2[2] = {0u, 0u};
    float z[2] = {zero[0], zero[1]};
    if constexpr (GroupK != 0) {
      const auto *srow = reinterpret_cast<const uint16_t *>(stage + kABytes + kWBytes) + row * BN;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if constexpr (!kSumScales) {
          const uint32_t sv = srow[col + 8 * h];
          sc2[h] = sv | (sv << 16);
        }
        if constexpr (kIntZero) {
          const auto *zrow = reinterpret_cast<const uint8_t *>(stage + kABytes + kWBytes + kSBytes) + row * BN;
          z[h] = static_cast<float>(zrow[col + 8 * h]);
          b[h] = numeric::zero_bias<kBf16>(z[h]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      // pair sa * 4 + r of the 64-input block (layout/sm90.h)
      uint32_t v = numeric::exact_pair_of<kBf16, kCodeId>(words, sa * 4 + r, b[r % 2], z[r % 2]);
      if constexpr (GroupK != 0 && !kSumScales) v = Op::mul(v, sc2[r % 2]);
      af[r] = v;
    }
  }
};

} // namespace sm90
} // namespace humming
