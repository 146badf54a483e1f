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
//
// Warps whose channels all lie inside the output, with pair-aligned rows (the usual case), take a
// path with no per-pair column checks, and read their four bias elements once: the general one,
// fully unrolled for 64 sums a thread, was about 1500 instructions of cold code, and on small
// layers its instruction-cache misses took a quarter of a t128 launch (ncu, 3584 x 3584 at
// m = 256). That path checks only each token against the tile's last row, one comparison per
// eight sums: a grouped tile ends at its expert's last row, so at about a tile of rows per expert
// nearly every tile ends early, and when a short tile took the general path its epilogue was
// about 2000 instructions a warp, more than its main loop (ncu, grouped W4A8 t80, Qwen3-30B-A3B at
// 1024 tokens, session 45). Both paths add, round and store the same values.
// Rows from m_end on are not stored (-1: from a.m on; a grouped GEMM's tile ends at its expert's
// last row), nor channels from n_cols on (kCols: from a.dims.n on; the gated activation's output
// has n / 2).
constexpr int64_t kCols = -1;
template <uint32_t OutId, int Acc, bool TokenScales>
__device__ __forceinline__ void store_wgmma_sums(const GemmArgs &a, int64_t m0, int64_t n, int lane,
                                                 const float (&acc)[Acc], const float (&f)[2], int64_t m_end = -1,
                                                 int64_t n_cols = kCols) {
  constexpr int kOutBytes = static_cast<int>(DType::from_id(OutId).bits) / 8;
  const int64_t rows = m_end < 0 ? a.m : m_end;
  const int64_t cols = n_cols == kCols ? a.dims.n : n_cols;
  const bool odd = (lane / 4) % 2 != 0;
  // This thread's channels are n - odd .. n + 9 - odd and its tokens m0 .. m0 + 2 Acc - 1 at most.
  const bool inside = n + 10 <= cols && a.ldo % 2 == 0 && reinterpret_cast<uintptr_t>(a.out) % (2 * kOutBytes) == 0;
  const bool fast = __all_sync(0xFFFFFFFFu, inside);
  // The tile's tokens from m0 that are stored (at most 2 Acc; 0 or less: none), as a 32-bit count
  // for the fast path's per-token comparisons.
  const int left = rows - m0 >= 2 * Acc ? 2 * Acc : static_cast<int>(rows - m0 > 0 ? rows - m0 : 0);
  // The bias of this thread's two channel pairs (c, c + 1 with c = n + 8h - odd), for the fast path;
  // -0 without one (x + -0 is x, zeros' signs too).
  float2 bias[2] = {make_float2(-0.0f, -0.0f), make_float2(-0.0f, -0.0f)};
  if (fast && a.bias != nullptr)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t c = n + 8 * h - (odd ? 1 : 0);
      bias[h] = make_float2(load_out<OutId>(a.bias, c), load_out<OutId>(a.bias, c + 1));
    }
  // The token scales, all loaded before the first store: each lane loads the scale of one token of
  // every 32 of the tile, and the lanes that need it take it by a shuffle. Loaded inside the loop
  // (a scale pair per 8 tokens), each load waited behind the stores before it (they may alias, for
  // all ptxas knows): ten round trips to memory in a row per tile of 80 tokens, a tenth of the
  // grouped W4A8 t80 launch's stall samples (ncu, Qwen3-30B-A3B gate-up at 1024 tokens, session 45).
  constexpr int kBlocks32 = (2 * Acc + 31) / 32;
  float tok[kBlocks32];
#pragma unroll
  for (int i = 0; i < kBlocks32; ++i) {
    const int64_t m = m0 + 32 * i + lane;
    tok[i] = !TokenScales ? 1.0f : m < a.m ? a.a_scales[m * a.a_scale_cols] : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < Acc / 4; ++j) {
    const int64_t t0 = m0 + 8 * j + 2 * (lane % 4); // the tokens of acc[4j + {0, 2}] and, + 1, acc[4j + {1, 3}]
    float ts[2] = {1.0f, 1.0f};
    if constexpr (TokenScales)
#pragma unroll
      for (int e = 0; e < 2; ++e) ts[e] = __shfl_sync(0xFFFFFFFFu, tok[j / 4], 8 * (j % 4) + 2 * (lane % 4) + e);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float own0 = acc[4 * j + 2 * h] * f[h] * ts[0], own1 = acc[4 * j + 2 * h + 1] * f[h] * ts[1];
      // Even lanes keep token 2q and take their partner's; odd lanes keep token 2q + 1.
      const float other = __shfl_xor_sync(0xFFFFFFFFu, odd ? own0 : own1, 4);
      const int64_t m = t0 + (odd ? 1 : 0);
      const int64_t c = n + 8 * h - (odd ? 1 : 0);
      const float2 v = odd ? make_float2(other, own1) : make_float2(own0, other);
      if (fast) {
        if (8 * j + 2 * (lane % 4) + (odd ? 1 : 0) < left)
          store_out_pair_aligned<OutId>(a.out, m * a.ldo + c, make_float2(v.x + bias[h].x, v.y + bias[h].y));
      } else if (m < rows && c < cols)
        write_pair<OutId>(a, m, c, v, cols);
    }
  }
}

// One half of the experts' gated activation (GemmArgs::glu) in a grouped tile: v[i] = the sum
// acc[i] of the thread's weight channel w (i % 4 < 2) or w + 8 times its factor f, rounded to the
// output type as a store would round it, plus the channel's entry of a.glu_bias for `expert`
// (fp32 [experts][n]; none where there is no bias or the output channel c or c + 8 lies past
// F = n / 2): gate values in the gate half, up values in the up half, as moe_activation reads them
// from the plain GEMM's output and adds its bias.
// glu_biases: the bias b[h] of channels w + 8h (output channels c + 8h); glu_input: sum i's value.
__device__ __forceinline__ void glu_biases(const GemmArgs &a, int expert, int64_t w, int64_t c, float (&b)[2]) {
  b[0] = b[1] = 0.0f;
  if (a.glu_bias != nullptr)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (c + 8 * h < a.dims.n / 2) b[h] = a.glu_bias[static_cast<int64_t>(expert) * a.dims.n + w + 8 * h];
}

template <uint32_t OutId>
__device__ __forceinline__ float glu_input(const GemmArgs &a, int i, float acc, const float (&f)[2],
                                           const float (&b)[2]) {
  float v = round_out<OutId>(acc * f[(i % 4) / 2]);
  if (a.glu_bias != nullptr) v += b[(i % 4) / 2];
  return v;
}

template <uint32_t OutId, int Acc>
__device__ __forceinline__ void glu_inputs(const GemmArgs &a, int expert, int64_t w, int64_t c, const float (&acc)[Acc],
                                           const float (&f)[2], float (&v)[Acc]) {
  float b[2];
  glu_biases(a, expert, w, c, b);
#pragma unroll
  for (int i = 0; i < Acc; ++i) v[i] = glu_input<OutId>(a, i, acc[i], f, b);
}

// The same for the sm90 kernels that put the tokens on the WGMMA's M side and the channels on its
// N side (sm90::DenseA8 with ChannelsN): acc[4j + e] is token m + 8 (e / 2) and channel
// n0 + 8j + 2 (lane % 4) + e % 2, where m is the thread's first token (warp * 16 + lane / 4 inside
// its warpgroup's 64) and n0 the tile's first channel. Each thread holds adjacent channel pairs of
// its own two tokens, so each pair goes out as one access with no exchange.
// OutId, Acc, TokenScales: as store_wgmma_sums.
// ScaleId:  DType id of the weight's per-channel scales (`scales`, n_pad of them: a.scales, or a
//           grouped GEMM's expert's), which multiply each channel's sums; 0: none (block scales are
//           on the sums already).
// `global` multiplies every sum (the weight's global scale, 1 without one). Rows from m_end on are
// not stored (-1: from a.m on), as in store_wgmma_sums.
template <uint32_t OutId, int Acc, bool TokenScales, uint32_t ScaleId>
__device__ __forceinline__ void store_token_rows(const GemmArgs &a, int64_t m, int64_t n0, int lane,
                                                 const float (&acc)[Acc], float global, const void *scales,
                                                 int64_t m_end = -1) {
  constexpr int kOutBytes = static_cast<int>(DType::from_id(OutId).bits) / 8;
  const int64_t c0 = n0 + 2 * (lane % 4), rows = m_end < 0 ? a.m : m_end;
  const bool inside = m + 8 < rows && n0 + 2 * Acc <= a.dims.n && a.ldo % 2 == 0 &&
                      reinterpret_cast<uintptr_t>(a.out) % (2 * kOutBytes) == 0;
  float ts[2];
  token_row_factors<TokenScales>(a, m, global, ts);
#pragma unroll
  for (int j = 0; j < Acc / 4; ++j) {
    const int64_t c = c0 + 8 * j;
    float f[2];
    channel_pair_factors<ScaleId>(a, scales, c, f);
    float2 bias = make_float2(-0.0f, -0.0f); // x + -0 is x, zeros' signs too
    if (inside && a.bias != nullptr) bias = make_float2(load_out<OutId>(a.bias, c), load_out<OutId>(a.bias, c + 1));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float2 v = make_float2(acc[4 * j + 2 * h] * f[0] * ts[h], acc[4 * j + 2 * h + 1] * f[1] * ts[h]);
      const int64_t row = m + 8 * h;
      if (inside)
        store_out_pair_aligned<OutId>(a.out, row * a.ldo + c, make_float2(v.x + bias.x, v.y + bias.y));
      else if (row < rows && c < a.dims.n)
        write_pair<OutId>(a, row, c, v);
    }
  }
}

} // namespace epilogue
} // namespace humming
