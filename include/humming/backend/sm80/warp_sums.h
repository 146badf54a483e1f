// The sums of a warp of the sm80 family's kernels (kernel/sm80_dense.cuh, kernel/sm80_a8_dense.cuh)
// and how a segment's sums leave the block. A warp holds MT mma tiles of 16 rows x its 64 channels
// as acc[i][j][e]: row i * 16 + lane / 4 (+ 8 for e >= 2), channel j * 8 + (lane % 4) * 2 + e % 2,
// the m16n8 accumulator layout of mma.sync (the same for k16 and k32 shapes).
#pragma once

#include <cstdint>
#include <cstdlib>

#include "humming/epilogue/store.h"
#include "humming/epilogue/streamk_fixup.h"
#include "humming/humming.h"
#include "humming/scheduler/streamk.h"

namespace humming {
namespace sm80 {

// Whether launches of at most 8 rows may use the narrow kernels: HUMMING_NARROW=0 in the
// environment turns them off. Read once per process; for tuning and diagnosis.
inline bool narrow_enabled() {
  static const bool value = [] {
    const char *env = std::getenv("HUMMING_NARROW");
    return env == nullptr || std::atoi(env) != 0;
  }();
  return value;
}

// A narrow launch's sums (the mma's roles swapped: accn[J][e] of channel J * 16 + lane / 4 (+ 8
// for e >= 2) and token (lane % 4) * 2 + e % 2) in the layout of the others (acc[j][e]: token
// lane / 4, channel j * 8 + (lane % 4) * 2 + e; rows 8-15 zero), so that the end of a segment is
// shared: once per segment, through shuffles.
__device__ __forceinline__ void narrow_to_wide(const float (&accn)[4][4], int lane, float (&acc)[8][4]) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      // Channel j * 8 + 2t + e sits in lane (2t + e) * 4 + g / 2, token g in its element g % 2.
      const int src = (2 * t + e) * 4 + g / 2;
      const float v0 = __shfl_sync(0xFFFFFFFFu, accn[j / 2][2 * (j % 2)], src);
      const float v1 = __shfl_sync(0xFFFFFFFFu, accn[j / 2][2 * (j % 2) + 1], src);
      acc[j][e] = (g & 1) ? v1 : v0;
      acc[j][e + 2] = 0.0f;
    }
}

// K: the kernel: its tile (kBM rows, BN channels), its warp tile (WM rows, MT mma tiles) and its
//    output type (kOut).
template <class K> struct WarpSums {
  static constexpr int BM = K::kBM, BN = K::BN, WM = K::WM, MT = K::MT;
  static constexpr uint32_t OutId = K::kOut.id();

  // Calls f(i, j, h, m, n) for each pair of accumulators (acc[i][j][2h], acc[i][j][2h + 1]) of
  // this lane with its output row m and first channel n (the pair covers n and n + 1).
  template <class F>
  static __device__ __forceinline__ void for_each_pair(int64_t m0, int64_t n0, int wm, int wn, int lane, F f) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          f(i, j, h, m0 + wm * WM + i * 16 + lane / 4 + h * 8, n0 + wn * 64 + j * 8 + (lane % 4) * 2);
  }

  // Output channels n and n + 1 of row m (epilogue/store.h).
  static __device__ __forceinline__ void write_out(const GemmArgs &a, int64_t m, int64_t n, float2 v) {
    epilogue::write_pair<OutId>(a, m, n, v);
  }

  // The end of segment `seg` of tile `tile` (seg.tile, as the caller read it) at (m0, n0), its sums final (K-slice
  // warps added into the warps with wk == 0, every scale applied): the output written where the segment covers its
  // whole tile, else a partial contributed to the tile's fix-up (scheduler/streamk.h; the last contributor writes the
  // tile, epilogue/streamk_fixup.h). `flag` is a shared word. Called by all threads of the block.
  static __device__ __forceinline__ void store(const GemmArgs &a, const StreamKPlan &plan, const Segment &seg, int tile,
                                               int64_t m0, int64_t n0, int wm, int wn, int wk, int lane,
                                               float (&acc)[MT][8][4], int *flag) {
    if (seg.kt_begin == 0 && seg.kt_end == plan.k_tiles) {
      if (wk == 0)
        for_each_pair(m0, n0, wm, wn, lane, [&](int i, int j, int h, int64_t m, int64_t n) {
          if (m < a.m && n < a.dims.n) write_out(a, m, n, make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]));
        });
      return;
    }
    epilogue::streamk_fixup_pairs<MT * 16, BM, BN, 8>(
        a, plan, tile, m0, n0, wk == 0, flag,
        [&](auto f) {
          for_each_pair(m0, n0, wm, wn, lane, [&](int i, int j, int h, int64_t m, int64_t n) {
            f(m, n, [&] { return make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]); });
          });
        },
        [&](int pi, int64_t &m, int64_t &n) {
          const int i = pi / 16, j = (pi / 2) % 8, h = pi % 2;
          m = m0 + wm * WM + i * 16 + lane / 4 + h * 8;
          n = n0 + wn * 64 + j * 8 + (lane % 4) * 2;
        },
        [&](int64_t m, int64_t n, float2 v) { write_out(a, m, n, v); });
  }
};

} // namespace sm80
} // namespace humming
