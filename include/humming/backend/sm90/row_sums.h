// The activations' sums per token and scale group of a ring stage, for the sm90 weight-only kernel
// (kernel/sm90_dense.cuh) where its operands keep their offset (numeric/fast_dequant.h,
// offset_pair_of): each operand is then code - zero + R (R = kept_offset, exact), so a group's
// tensor-core sum carries R x (the token's activations summed over the group), which the consumers
// take off in fp32. That saves one HSUB2 per operand pair (4 of the about 24 warp instructions of
// each decode K step, session 32's ncu) for a few fp32 adds per group.
//
// Who computes them: the producer warpgroup's warps 1 and 2, which have nothing else to do (warp 0
// issues the copies and, in grouped kernels, walks the experts). They wait for each stage's
// "full" barrier as the consumers do, sum the activation box's rows out of shared memory, write
// -R x each sum into the stage's slot and arrive on the stage's third barrier ("converted" in
// pipeline.h's terms). The consumers wait on it only when they fold a stage's sums in, a stage
// after they waited for the data, and they hand the stage back after that, so the slot and the
// box are free to refill once the stage's "empty" barrier completes, as before.
//
// Exactness: the products in the tensor cores are exact either way; the sums carry larger partial
// sums (up to R = 136 for bf16, 1032 for f16, against |code - zero| <= 8) before the cancellation,
// about 2^-24 x R / 4.6 relative per group in fp32: far below the 16-bit output's rounding.
#pragma once

#include <cstdint>

#include "humming/numeric/fast_dequant.h"

namespace humming {
namespace sm90 {

// K: the kernel (sm90::Dense): its tile (kTileM tokens, BK inputs in kKAtoms boxes of kAtomBytes,
//    kSets scale groups a stage) and operand type (kBf16).
template <class K> struct RowSums {
  static constexpr int BM = K::kTileM, BK = K::BK, kSets = K::kSets, kAtomBytes = K::kAtomBytes;
  static constexpr bool kBf16 = K::kBf16;
  // Threads that sum: the producer warpgroup's warps 1 and 2.
  static constexpr int kFirstThread = 32, kThreads = 64;
  // 16-byte units (8 inputs) of one row inside one group; of the whole stage.
  static constexpr int kChunks = BK / 8 / kSets;
  static constexpr int kUnits = BM * BK / 8;
  // Units each thread sums (adjacent ones of one row and group, so that its loads are independent
  // and in flight together), and the adjacent lanes whose partial sums make one group's.
  static constexpr int kPer = kUnits / kThreads;
  static constexpr int kLanes = kChunks / kPer;
  // Bytes of one stage's sums: kSets rows of BM floats.
  static constexpr int kStageBytes = kSets * BM * 4;

  // Summing thread h (0 .. kThreads - 1): the stage's activation box `act` (kKAtoms boxes of BM rows
  // of 128 bytes in the 128-byte swizzle) into sums[g * BM + row] = -offset x (row's inputs of
  // group g). The stage period at decode is a few hundred cycles, and the sums hold the consumers
  // back if they take longer: so each thread's loads are issued together and summed as a tree, and
  // a group takes few shuffles. The order of the adds is fixed: the sums are the same every run.
  static __device__ __forceinline__ void sum_stage(const char *act, float *sums, int h, float offset) {
    static_assert(kUnits % kThreads == 0 && kPer >= 1, "every thread sums whole units");
    static_assert(kLanes >= 1 && kChunks % kPer == 0 && 32 % kLanes == 0, "a row's group is whole lanes of one warp");
    const int u0 = h * kPer; // first unit: c0 of output o = g * BM + row
    const int c0 = u0 % kChunks, o = u0 / kChunks;
    const int g = o / BM, row = o % BM;
    uint4 v[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int kc = g * kChunks + c0 + i; // 16-byte unit of the row across the stage
      v[i] = *reinterpret_cast<const uint4 *>(act + (kc / 8) * kAtomBytes + row * 128 + (((kc % 8) ^ (row % 8)) << 4));
    }
    float part[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      part[i] = (pair_sum(v[i].x) + pair_sum(v[i].y)) + (pair_sum(v[i].z) + pair_sum(v[i].w));
#pragma unroll
    for (int w = 1; w < kPer; w *= 2)
#pragma unroll
      for (int i = 0; i + w < kPer; i += 2 * w) part[i] += part[i + w];
    float s = part[0];
#pragma unroll
    for (int lanes = kLanes / 2; lanes > 0; lanes /= 2) s += __shfl_xor_sync(0xFFFFFFFFu, s, lanes);
    if (c0 == 0) sums[o] = -offset * s;
  }

  // A consumer thread's -offset x sums of scale group g of a stage, for its sums i (tokens
  // 8 (i / 4) + 2 (lane % 4) + i % 2, the WGMMA accumulator layout): ns[j] holds tokens
  // 8 j + 2 (lane % 4) and the one after it.
  static __device__ __forceinline__ void load(const float *sums, int g, int lane, float2 (&ns)[BM / 8]) {
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) ns[j] = *reinterpret_cast<const float2 *>(sums + g * BM + 8 * j + 2 * (lane % 4));
  }

private:
  // The two 16-bit activations of a register as floats, added.
  static __device__ __forceinline__ float pair_sum(uint32_t w) {
    const float2 f = numeric::Operand<kBf16>::to_float2(w);
    return f.x + f.y;
  }
};

} // namespace sm90
} // namespace humming
