// How the consumer warpgroups of the sm90 8-bit activation kernel (kernel/sm90_a8_dense.cuh) add
// a retired stage's fp32 sums into the tile's (two-level accumulation): with the stage's scales
// where its sums need them (128 x 128 weight blocks x per-token activation groups, or per-channel
// weight groups of 128 inputs), or as they are (per-channel scales, applied in the epilogue).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "humming/epilogue/store.h"

namespace humming {
namespace sm90 {

// K: the kernel (sm90::DenseA8): its sums per thread (kAcc), its tile (kTileM tokens, BN
//    channels), which scales its stages hold (kBlocks: kActScaleSlots fp32 activation scales in
//    token order, then the weight blocks'; kGroups: the BN channels' scales of type kScaleId), its
//    orientation (kTokensM: the tokens are the WGMMA's M side) and kSumScale (the factor that
//    turns the tensor cores' sums back into the codes' values, 1 but for shifted e2m1).
template <class K> struct A8Promote {
  static constexpr int kAcc = K::kAcc, BN = K::BN, kActScaleSlots = K::kActScaleSlots;

  // acc += part times the scales of the stage at `scales` (its scale area). `col`: the thread's
  // first channel in the tile (with kTokensM: the slot of its first token's scale, which in
  // grouped tiles is not its token: K::kScaleLead); `wblock`: its warpgroup's weight block among
  // the stage's scales (channel-M tiles with blocks).
  static __device__ __forceinline__ void add(const char *scales, int wblock, int col, int lane,
                                             const float (&part)[kAcc], float (&acc)[kAcc]) {
    if constexpr (K::kBlocks && K::kTokensM) {
      // acc[4jj + e] is token col + 8 (e / 2) of the tile and channel 8jj + 2 (lane % 4) + e % 2 (a
      // tile starts at a multiple of 128 channels, so channels 128 b .. 128 b + 127 are weight
      // block b of the stage).
      const float *sc = reinterpret_cast<const float *>(scales);
      const float a0 = sc[col], a1 = sc[col + 8];
#pragma unroll
      for (int b = 0; b < BN / 128; ++b) {
        const float w = sc[kActScaleSlots + b], s0 = w * a0, s1 = w * a1;
#pragma unroll
        for (int i = b * 64; i < b * 64 + 64; ++i) acc[i] = fmaf(part[i], (i % 4) / 2 ? s1 : s0, acc[i]);
      }
    } else if constexpr (K::kBlocks) {
      const float *sc = reinterpret_cast<const float *>(scales);
      const float w = sc[kActScaleSlots + wblock];
#pragma unroll
      for (int jj = 0; jj < kAcc / 4; ++jj) {
        // acc[4jj + e] is token 8jj + 2 (lane % 4) + e % 2 of the tile (epilogue/wgmma_store.h).
        // The two tokens' scales in one 8-byte load: measured on the H200 (session 24, GEMM alone,
        // t128x192 s4, 7168x16384 / 36864x7168 / 7168x18432 at m = 4096 and 8192), 4-11 % faster
        // than two 4-byte loads. (Runs of each lane's tokens in 16-byte loads were 55 % slower.)
        const float2 sa = *reinterpret_cast<const float2 *>(sc + 8 * jj + 2 * (lane % 4));
        const float s0 = w * sa.x, s1 = w * sa.y;
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[4 * jj + e] = fmaf(part[4 * jj + e], e % 2 ? s1 : s0, acc[4 * jj + e]);
      }
    } else if constexpr (K::kGroups) {
      // acc[i] is channel col + 8 ((i % 4) / 2) of the tile.
      const float w[2] = {K::kSumScale * epilogue::load_out<K::kScaleId>(scales, col),
                          K::kSumScale * epilogue::load_out<K::kScaleId>(scales, col + 8)};
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[i] = fmaf(part[i], w[(i % 4) / 2], acc[i]);
    } else if constexpr (K::kSumScale != 1.0f) {
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[i] = fmaf(part[i], K::kSumScale, acc[i]);
    } else {
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[i] += part[i];
    }
  }
};

} // namespace sm90
} // namespace humming
