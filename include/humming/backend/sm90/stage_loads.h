// What the producer of the sm90 weight-only kernel (kernel/sm90_dense.cuh) copies into one ring
// stage, all completing on the stage's "full" mbarrier: the activations' BM x 64 boxes through
// the tensor map (rows past m and inputs past k land as zeros), the weight's layout-3 blocks of
// the stage (contiguous per 64-input block: one bulk copy each), and the stage's scale and
// zero-point rows. The stage layout is the one backend/sm90/stage_fragments.h reads.
//
// With the experts' gated activation (GemmArgs::glu; grouped kernels with K::kGlu) the tile at n0
// is output channels n0 / 2 .. n0 / 2 + BN / 2 of F = n / 2: the stage's first Columns / 2
// blocks (and scale columns) are those gate channels', copied from channel n0 / 2, the others the
// same channels of the up half, copied from F + n0 / 2 (K::column places each warpgroup's blocks).
//
// A tile whose rows end before BM (the last row of tiles, where BM does not divide m) loads its
// activations in one box per 64 inputs of only its rows, rounded up to 8 (Params::tail_rows),
// through a second map (Params::act_tail): a BM-row box mostly past m cost the copy engine more
// than a whole one in bounds (H200, u4g128 t128x128x128 forced, graph us: 12288 x 4096 at m = 144,
// 16 rows past 128, 64.0, at m = 240 46.2; 8192 x 8192 70.8 and 47.5), and boxes of 8 rows, as
// many as the rows need, cost more again from 32 rows (at m = 240, 78.2 and 90.8). The stage's
// rows past the tail box keep what an earlier stage left there; they meet only the sums of tokens
// past m, which nothing stores.
#pragma once

#include <cstdint>

#include "humming/backend/sm90/ptx.h"
#include "humming/humming.h"

namespace humming {
namespace sm90 {

// K: the kernel (sm90::Dense): its tile (kTileM tokens, BN channels in kColumns 64-channel
//    columns, BK inputs in kKAtoms 64-input blocks), its stage layout (kAtomBytes per activation
//    box, kABytes, kBlockBytes per weight block, kWBytes, kSBytes), its groups (kGroupK,
//    kScaleRows, kIntZero) and its Params (the activations' tensor maps `act` and, where
//    `tail_rows`, `act_tail`; `args`, n_blocks).
template <class K> struct StageLoads {
  using Params = typename K::Params;
  static constexpr int BM = K::kTileM, BN = K::BN, BK = K::BK, KAtoms = K::kKAtoms, Columns = K::kColumns;
  static constexpr int GroupK = K::kGroupK, kScaleRows = K::kScaleRows;
  static constexpr int kAtomBytes = K::kAtomBytes, kABytes = K::kABytes, kBlockBytes = K::kBlockBytes,
                       kWBytes = K::kWBytes, kSBytes = K::kSBytes;
  static constexpr bool kIntZero = K::kIntZero;

  // Whether this launch ends its tiles with the gated activation (the stage's two halves).
  static __device__ __forceinline__ bool glu(const GemmArgs &a) {
    if constexpr (K::kGlu) return a.glu >= 0;
    return false;
  }

  // Channel blocks of the tile at n0 that lie inside n_pad (with glu: inside each half of F, both
  // halves counted): the copies stop there (the consumers of the others compute on whatever the
  // stage holds, and nothing of theirs is stored).
  static __device__ __forceinline__ int columns(const GemmArgs &a, int64_t n0) {
    if (glu(a)) {
      const int64_t left = (a.dims.n / 2 - n0 / 2) / 64;
      return 2 * static_cast<int>(left < Columns / 2 ? left : Columns / 2);
    }
    const int64_t left = (a.dims.n_pad - n0) / 64;
    return static_cast<int>(left < Columns ? left : Columns);
  }

  // Bytes that arrive on the stage's barrier for a tile of `cols` channel blocks whose activation
  // boxes hold `rows` rows (box_rows, backend/sm90/pipeline.h).
  static __device__ __forceinline__ uint32_t bytes(int cols, int rows) {
    return KAtoms * rows * 128 + KAtoms * cols * kBlockBytes + kScaleRows * cols * 64 * (2 + (kIntZero ? 1 : 0));
  }

  // The copies of K tile kt of the tile at (m0, n0) into the stage at shared address `stage`, from
  // the weight of `expert` (0 but in grouped GEMMs: GemmArgs::expert_*_stride); `rows`: box_rows.
  static __device__ __forceinline__ void issue(const Params &p, uint32_t stage, uint32_t full, int64_t kt, int64_t m0,
                                               int64_t n0, int cols, int rows, int expert) {
    const GemmArgs &a = p.args;
    const char *codes = reinterpret_cast<const char *>(a.codes) + expert * a.expert_codes_stride;
    const char *scales = static_cast<const char *>(a.scales) + expert * a.expert_scales_stride;
    const char *zeros = static_cast<const char *>(a.zeros) + expert * a.expert_zeros_stride;
#pragma unroll
    for (int at = 0; at < KAtoms; ++at) {
      const int k0 = static_cast<int>(kt * BK + at * 64);
      tensor_copy_2d(stage + at * kAtomBytes, rows == BM ? &p.act : &p.act_tail, k0, static_cast<int>(m0), full);
    }
    // One run of `count` channel blocks from weight channel c0 into the stage's blocks from `slot`.
    const auto blocks = [&](int slot, int64_t c0, int count) {
#pragma unroll
      for (int at = 0; at < KAtoms; ++at) {
        const int64_t kb = kt * KAtoms + at;
        const char *src = codes + (kb * p.n_blocks + c0 / 64) * kBlockBytes;
        bulk_copy(stage + kABytes + (at * Columns + slot) * kBlockBytes, src, count * kBlockBytes, full);
      }
      if constexpr (GroupK != 0) {
#pragma unroll
        for (int r = 0; r < kScaleRows; ++r) {
          const int64_t g = kt * BK / GroupK + r;
          bulk_copy(stage + kABytes + kWBytes + (r * BN + slot * 64) * 2, scales + (g * a.dims.n_groups + c0) * 2,
                    count * 128, full);
          if constexpr (kIntZero)
            bulk_copy(stage + kABytes + kWBytes + kSBytes + r * BN + slot * 64, zeros + g * a.dims.n_groups + c0,
                      count * 64, full);
        }
      }
    };
    if (glu(a)) {
      blocks(0, n0 / 2, cols / 2);
      blocks(Columns / 2, a.dims.n / 2 + n0 / 2, cols / 2);
    } else {
      blocks(0, n0, cols);
    }
  }
};

} // namespace sm90
} // namespace humming
