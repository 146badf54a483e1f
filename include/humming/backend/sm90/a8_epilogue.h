// The end of a tile of the sm90 8-bit activation kernel (kernel/sm90_a8_dense.cuh): a consumer
// warpgroup's fp32 sums scaled, rounded and stored, through the warpgroup's output box where the
// kernel has boxes (epilogue/staged_store.h) or directly (epilogue/wgmma_store.h), with the tokens
// (kTokensM) or the channels on the WGMMA's M side.
#pragma once

#include <cstdint>

#include "humming/epilogue/staged_store.h"
#include "humming/epilogue/store.h"
#include "humming/epilogue/wgmma_store.h"
#include "humming/humming.h"

namespace humming {
namespace sm90 {

// K: the kernel (sm90::DenseA8): its sums (kAcc per thread), output type (kOutId), scales (kScaleId,
//    kGroupK; kBlocks: the sums carry the block scales and the tokens' already), orientation
//    (kTokensM), boxes (kStagedStore; Params `out` and `staged`), and whether it is grouped
//    (Grouped: a tile ends at its expert's last row, m_end).
template <class K> struct A8Epilogue {
  static constexpr int kAcc = K::kAcc;
  static constexpr uint32_t OutId = K::kOutId, ScaleId = K::kScaleId;
  static constexpr bool kBlocks = K::kBlocks, kTokensM = K::kTokensM, kStagedStore = K::kStagedStore;

  // The sums `acc` of thread t (lane `lane`, its first channel, or with kTokensM its first token,
  // `col` inside the tile) of consumer warpgroup cw, whose output box is at shared address `box`,
  // for the tile of rows [m0, m_end) (-1: up to m) and channels from n0; `scales`: the weight's
  // per-channel scales (the tile's expert's in grouped GEMMs).
  static __device__ __forceinline__ void store(const typename K::Params &p, uint32_t box, int cw, int t, int lane,
                                               int col, int64_t m0, int64_t m_end, int64_t n0, const void *scales,
                                               const float (&acc)[kAcc]) {
    const GemmArgs &a = p.args;
    if constexpr (kTokensM) {
      const float global = a.global_scale != nullptr ? *a.global_scale : 1.0f;
      constexpr uint32_t kChannelScales = K::kGroupK == 0 ? ScaleId : 0u;
      // Grouped: a warpgroup whose 64 rows are not all its expert's stores directly.
      const bool boxed = epilogue::boxed_rows<K::Grouped>(m0 + cw * 64, 64, m_end, a.m);
      if (kStagedStore && boxed)
        epilogue::stage_token_rows<OutId, kAcc, !kBlocks, kChannelScales>(a, p.staged != 0, &p.out, box, 2 + cw,
                                                                          m0 + cw * 64, n0, t, acc, global, scales);
      else
        epilogue::store_token_rows<OutId, kAcc, !kBlocks, kChannelScales>(a, m0 + col, n0, lane, acc, global, scales,
                                                                          m_end);
      return;
    }
    float f[2];
    // The stores multiply each token's scale in (with blocks, the sums carry those too).
    epilogue::channel_row_factors<ScaleId, K::kGroupK == 0>(a, scales, n0 + col, f);
    // Grouped: a tile whose BM rows are not all its expert's stores directly.
    if constexpr (kStagedStore)
      if (epilogue::boxed_rows<K::Grouped>(m0, K::kTileM, m_end, a.m))
        return epilogue::stage_wgmma_sums<OutId, kAcc, !kBlocks>(a, p.staged != 0, &p.out, box, 2 + cw, m0,
                                                                 n0 + cw * 64, t, acc, f);
    epilogue::store_wgmma_sums<OutId, kAcc, !kBlocks>(a, m0, n0 + col, lane, acc, f, m_end);
  }
};

} // namespace sm90
} // namespace humming
