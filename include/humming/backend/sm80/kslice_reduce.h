// The end of a segment of the sm80 kernel (kernel/sm80_dense.cuh) whose warps split the stage's K
// (WarpsK > 1): the K-slice warps' sums added into the warps with wk == 0, through shared memory.
#pragma once

#include <cstdint>

namespace humming {
namespace sm80 {

// K: the kernel (sm80::Dense, sm80::DenseA8): its warp grid (kWarpsM, kWarpsN, kWarpsK), its sums
//    per lane (MT mma tiles, kAcc accumulators) and the bytes of one stage buffer (kStageBytes),
//    through which the sums pass in as many rounds as it needs.
template <class K> struct KSliceReduce {
  static constexpr int WarpsM = K::kWarpsM, WarpsN = K::kWarpsN, WarpsK = K::kWarpsK, MT = K::MT, kAcc = K::kAcc;
  // The K-slice warps' sums past the first, and the rounds of kRoundAcc accumulators a lane
  // stores so that each round fits the stage buffer.
  static constexpr int kReduceBytes = (WarpsK - 1) * WarpsM * WarpsN * 32 * kAcc * 4;
  static constexpr int kReduceRounds = WarpsK == 1 ? 1 : (kReduceBytes + K::kStageBytes - 1) / K::kStageBytes;
  static constexpr int kRoundAcc = (kAcc + kReduceRounds - 1) / kReduceRounds;

  // Called by all threads of the block, once its pipeline is drained; `buf` is free shared memory.
  static __device__ __forceinline__ void run(char *buf, int wm, int wn, int wk, int lane, float (&acc)[MT][8][4]) {
    float *red = reinterpret_cast<float *>(buf);
    const int mn = wm + WarpsM * wn;
#pragma unroll
    for (int round = 0; round < kReduceRounds; ++round) {
      __syncthreads(); // every warp is done with `buf` (its stage, or the previous round)
      if (wk > 0) {
        float *dst = red + ((wk - 1) * WarpsM * WarpsN + mn) * 32 * kRoundAcc;
#pragma unroll
        for (int q = 0; q < kRoundAcc; ++q) {
          const int idx = round * kRoundAcc + q;
          if (idx < kAcc) dst[q * 32 + lane] = acc[idx / 32][(idx / 4) % 8][idx % 4];
        }
      }
      __syncthreads();
      if (wk == 0) {
        for (int s = 1; s < WarpsK; ++s) {
          const float *src = red + ((s - 1) * WarpsM * WarpsN + mn) * 32 * kRoundAcc;
#pragma unroll
          for (int q = 0; q < kRoundAcc; ++q) {
            const int idx = round * kRoundAcc + q;
            if (idx < kAcc) acc[idx / 32][(idx / 4) % 8][idx % 4] += src[q * 32 + lane];
          }
        }
      }
    }
  }
};

} // namespace sm80
} // namespace humming
