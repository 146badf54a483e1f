// Output stores of the sm90 kernels, which put the weights on the WGMMA's M side (64 channels per
// consumer warpgroup) and the tokens on its N side. A consumer thread's sums acc[4j + e] are
// channel n (e < 2) or n + 8 and token m0 + 8j + 2 (lane % 4) + e % 2, where n is the thread's
// first channel (warp * 16 + lane / 4 inside its warpgroup's 64). Lanes 4 apart hold channels c and
// c + 1 of the same tokens: they swap halves so that each stores two adjacent channels of one token
// at once (epilogue/store.h: bias, rounding, one access).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "humming/epilogue/store.h"
#include "humming/humming.h"

namespace humming {
namespace epilogue {

// OutId:        DType id of the output.
// Acc:          sums per thread (BM / 2 for a tile of BM tokens).
// TokenScales:  multiply each token's sums by its fp32 activation scale, a_scales[token * cols]
//               (per-token scales of quantized activations; cols is a.a_scale_cols).
// `f[h]` multiplies the sums of channel n + 8h (per-channel and global scales, already combined).
template <uint32_t OutId, int Acc, bool TokenScales>
__device__ __forceinline__ void store_wgmma_sums(const GemmArgs &a, int64_t m0, int64_t n, int lane,
                                                 const float (&acc)[Acc], const float (&f)[2]) {
  const bool odd = (lane / 4) % 2 != 0;
#pragma unroll
  for (int j = 0; j < Acc / 4; ++j) {
    const int64_t t0 = m0 + 8 * j + 2 * (lane % 4); // the tokens of acc[4j + {0, 2}] and, + 1, acc[4j + {1, 3}]
    float ts[2] = {1.0f, 1.0f};
    if constexpr (TokenScales)
#pragma unroll
      for (int e = 0; e < 2; ++e) ts[e] = t0 + e < a.m ? a.a_scales[(t0 + e) * a.a_scale_cols] : 0.0f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float own0 = acc[4 * j + 2 * h] * f[h] * ts[0], own1 = acc[4 * j + 2 * h + 1] * f[h] * ts[1];
      // Even lanes keep token 2q and take their partner's; odd lanes keep token 2q + 1.
      const float other = __shfl_xor_sync(0xFFFFFFFFu, odd ? own0 : own1, 4);
      const int64_t m = t0 + (odd ? 1 : 0);
      const int64_t c = n + 8 * h - (odd ? 1 : 0);
      const float2 v = odd ? make_float2(other, own1) : make_float2(own0, other);
      if (m < a.m && c < a.dims.n) write_pair<OutId>(a, m, c, v);
    }
  }
}

} // namespace epilogue
} // namespace humming
