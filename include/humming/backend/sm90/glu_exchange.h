// The experts' gated activation at the end of a grouped sm90 weight-only tile (GemmArgs::glu,
// kernel/sm90_dense.cuh with K::kGlu): which weight channel each consumer thread's sums belong to
// when the first half of the tile's columns take its gate channels and the second half the same
// channels of the up half, and how the two halves meet so that the gate sums become the activated
// outputs: through shared memory between two warpgroups of one block each (exchange), or in the
// registers of a warpgroup of two blocks, a gate block and its up block (pair).
#pragma once

#include <cstdint>

#include "humming/backend/sm90/ptx.h"
#include "humming/epilogue/wgmma_store.h"
#include "humming/humming.h"
#include "humming/scheduler/moe_route.h"

namespace humming {
namespace sm90 {

// K: the kernel (sm90::Dense): its consumer warpgroups (kConsumers) and tile channels (BN), its sums
//    per thread and block (kAcc), its activation type (kActId, the output's too) and whether its
//    tiles can take the activation at all (kGlu: grouped, and two blocks a warpgroup or an even
//    number of consumer warpgroups with the exchange beside the ring).
template <class K> struct GluExchange {
  static constexpr int kAcc = K::kAcc, Consumers = K::kConsumers, BN = K::BN;
  static constexpr bool kGlu = K::kGlu;
  static constexpr uint32_t ActId = K::kActId;

  // The weight channel of the sum a thread at `col` inside the tile at n0 holds first: n0 + col, or
  // with the gated activation (GemmArgs::glu, kGlu) gate channel n0 / 2 + col in the first half of
  // the tile's columns and up channel F + n0 / 2 + col - BN / 2 in the second (F = n / 2).
  static __device__ __forceinline__ int64_t weight_channel(const GemmArgs &a, int64_t n0, int col) {
    if constexpr (kGlu)
      if (a.glu >= 0) return n0 / 2 + col + (col >= BN / 2 ? a.dims.n / 2 - BN / 2 : 0);
    return n0 + col;
  }

  // The gated activation's end of a tile (GemmArgs::glu) for a thread whose first sum is weight
  // channel `channel` (weight_channel): each up thread (warpgroup cw >= half) puts its up values
  // (epilogue::glu_inputs) into the exchange; its gate partner (warpgroup cw - half, the same
  // thread index) turns its gate values and them into the activated outputs (moe_route::activate,
  // as moe_activation) in its sums, with f set to 1, which the caller stores as channels
  // n0 / 2 + col of F. Each pair of warpgroups meets twice at named barrier
  // 2 + pair: first so that an up thread, which may be a tile ahead, never overwrites values its
  // partner has not read yet; then so that the writes come before the reads.
  static __device__ __forceinline__ void exchange(const GemmArgs &a, char *exchange, int64_t n0, int64_t channel,
                                                  int expert, int cw, int t, int col, float (&acc)[kAcc],
                                                  float (&f)[2]) {
    constexpr int kHalf = Consumers / 2;
    const int pair = cw % kHalf;
    float *x = reinterpret_cast<float *>(exchange) + pair * 128 * kAcc;
    float v[kAcc];
    epilogue::glu_inputs<ActId, kAcc>(a, expert, channel, n0 / 2 + col % (BN / 2), acc, f, v);
    named_sync(2 + pair, 256);
    if (cw >= kHalf) {
#pragma unroll
      for (int i = 0; i < kAcc; ++i) x[i * 128 + t] = v[i];
      named_sync(2 + pair, 256);
      return;
    }
    named_sync(2 + pair, 256);
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = moe_route::activate(v[i], x[i * 128 + t], a.glu, a.glu_limit, a.glu_alpha);
    f[0] = f[1] = 1.0f;
  }

  // The same end for a thread of a two-block warpgroup, whose block 0 holds gate channel
  // channel[0] (at `col` inside the tile) and block 1 the same channel's up (channel[1]): the
  // activated outputs go into acc[0], with f[0] set to 1, one value at a time (no second copy of
  // the 2 x kAcc sums).
  static __device__ __forceinline__ void pair(const GemmArgs &a, int64_t n0, const int64_t (&channel)[2], int expert,
                                              int col, float (&acc)[2][kAcc], float (&f)[2][2]) {
    const int64_t c = n0 / 2 + col;
    float gate_bias[2], up_bias[2];
    epilogue::glu_biases(a, expert, channel[0], c, gate_bias);
    epilogue::glu_biases(a, expert, channel[1], c, up_bias);
#pragma unroll
    for (int i = 0; i < kAcc; ++i)
      acc[0][i] = moe_route::activate(epilogue::glu_input<ActId>(a, i, acc[0][i], f[0], gate_bias),
                                      epilogue::glu_input<ActId>(a, i, acc[1][i], f[1], up_bias), a.glu, a.glu_limit,
                                      a.glu_alpha);
    f[0][0] = f[0][1] = 1.0f;
  }
};

} // namespace sm90
} // namespace humming
