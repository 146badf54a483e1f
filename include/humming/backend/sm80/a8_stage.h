// One stage of the sm80 family's GEMM with 8-bit activations (kernel/sm80_a8_dense.cuh): its
// cp.async copies and how the stage math reads it back into mma fragments.
//
// Both operands are 8-bit and K-major: the activations' rows (lda bytes apart) and the weight's rows
// in the generic layout (layout 1: each output channel's codes are k_pad consecutive bytes). So a
// stage is two tiles of the same shape of row, BM activation rows and then BN weight rows of BK
// bytes, and one swizzle and one fragment reader serve both: a 16-byte chunk c of row r sits at
// chunk c ^ (r % 8) of its row, so the eight rows one ldmatrix matrix reads fall in eight
// different banks. ldmatrix of 16-bit pairs hands each lane 4 consecutive bytes of a row, which is
// exactly the m16n8k32 fragment of 8-bit operands for either role (A: rows x K, B: columns x K).
#pragma once

#include <cstdint>

#include "humming/backend/sm80/ptx.h"
#include "humming/humming.h"

namespace humming {
namespace sm80 {

// K: the kernel (sm80::DenseA8): its tile (kBM, BN, BK, kThreads), its stage layout (kABytes) and
//    its Params (args; k_pad bytes per weight row).
template <class K> struct A8Stage {
  using Params = typename K::Params;
  static constexpr int kThreads = K::kThreads, BM = K::kBM, BN = K::BN, BK = K::BK, kABytes = K::kABytes;
  static constexpr int kRowChunks = BK / 16; // 16-byte chunks per row of a stage
  static_assert(BK % 128 == 0, "the swizzle moves chunks within rows of at least 8 chunks");

  // Byte offset of chunk `chunk` of row `row` in a tile of rows of BK bytes.
  static __device__ __forceinline__ int offset(int row, int chunk) { return row * BK + ((chunk ^ (row & 7)) * 16); }

  // cp.async loops with trip counts known at compile time (the last round may be partial).
  template <int Total, class F> static __device__ __forceinline__ void for_each_chunk(F f) {
#pragma unroll
    for (int it = 0; it < (Total + kThreads - 1) / kThreads; ++it) {
      const int i = static_cast<int>(threadIdx.x) + it * kThreads;
      if (Total % kThreads == 0 || i < Total) f(i);
    }
  }

  // The copies of K tile kt of the tile at (m0, n0) into the stage at shared address `stage`.
  // Chunks outside the operands (rows past m or n_pad, activation bytes past k, weight bytes past
  // k_pad) are written as zeros and read nothing: every operand in shared memory is a finite value
  // (zero codes are zero in every 8-bit type here), and the zero activations past k cancel
  // whatever the weight holds there. k and k_pad are multiples of 16 (can_implement), so a chunk
  // lies wholly inside or outside.
  static __device__ __forceinline__ void copy(const Params &p, uint32_t stage, int kt, int64_t m0, int64_t n0) {
    const GemmArgs &a = p.args;
    const int64_t k0 = static_cast<int64_t>(kt) * BK;
    const int64_t k_left = a.dims.k - k0, kp_left = a.dims.k_pad - k0;
    const int64_t rows = a.m - m0, cols = a.dims.n_pad - n0;
    const char *act = static_cast<const char *>(a.a) + m0 * a.lda + k0;
    for_each_chunk<BM * kRowChunks>([&](int i) {
      const int r = i / kRowChunks, c = i % kRowChunks;
      const bool ok = r < rows && c * 16 < k_left;
      cp_async16<128>(stage + offset(r, c), ok ? act + r * a.lda + c * 16 : act, ok);
    });
    const int64_t row_bytes = a.dims.k_pad;
    const char *w = reinterpret_cast<const char *>(a.codes) + n0 * row_bytes + k0;
    for_each_chunk<BN * kRowChunks>([&](int i) {
      const int r = i / kRowChunks, c = i % kRowChunks;
      const bool ok = r < cols && c * 16 < kp_left;
      cp_async16<256>(stage + kABytes + offset(r, c), ok ? w + r * row_bytes + c * 16 : w, ok);
    });
  }

  // The A fragment (m16n8k32) of rows row0..row0 + 15 of `tile` at stage input kk (a multiple of
  // 32): matrices 0 / 1 are rows 0-7 / 8-15 of the step's first 16 inputs, 2 / 3 of its second.
  static __device__ __forceinline__ void rows16(const char *tile, int row0, int kk, int lane, uint32_t (&f)[4]) {
    ldmatrix_x4(f, tile + offset(row0 + (lane % 8) + ((lane / 8) % 2) * 8, kk / 16 + lane / 16));
  }

  // The B fragments (m16n8k32) of two tiles of 8 rows, row0..row0 + 7 in f[0..1] and the next 8 in
  // f[2..3], at stage input kk: matrices 0 / 1 are the first 8 rows' two 16-input halves.
  static __device__ __forceinline__ void rows8_pair(const char *tile, int row0, int kk, int lane, uint32_t (&f)[4]) {
    ldmatrix_x4(f, tile + offset(row0 + (lane % 8) + (lane / 16) * 8, kk / 16 + (lane / 8) % 2));
  }

  // The B fragment of rows row0..row0 + 7 at stage input kk (lanes 16-31 repeat lanes 0-15's
  // addresses, which ldmatrix .x2 does not read).
  static __device__ __forceinline__ void rows8(const char *tile, int row0, int kk, int lane, uint32_t (&f)[2]) {
    ldmatrix_x2(f, tile + offset(row0 + (lane % 8), kk / 16 + (lane / 8) % 2));
  }
};

} // namespace sm80
} // namespace humming
