// One stage of the sm80 family's GEMM with 8-bit activations (kernel/sm80_a8_dense.cuh): its
// cp.async copies and how the stage math reads it back into mma fragments.
//
// Both operands are K-major: the activations' rows (lda bytes apart) and the weight's rows in the
// generic layout (layout 1: each output channel's codes are k_pad consecutive bytes, or with 4-bit
// codes k_pad / 2 bytes, code k at bits 4 (k % 8) of word k / 8). A stage holds BM activation rows
// of BK bytes, then BN weight rows, then (scales per 128 inputs) the BN channels' scales of the
// stage's K group. A 16-byte chunk c of a row of 8 or more chunks sits at chunk c ^ (r % 8) of
// its row r (rows of 4 chunks, 4-bit codes: c ^ ((r / 2) % 4)), so that the eight rows one
// ldmatrix matrix, or one quarter of a warp's 4-byte loads, reads fall in different banks.
// 8-bit codes: ldmatrix of 16-bit pairs hands each lane 4 consecutive bytes of a row, which is
// exactly the m16n8k32 fragment of 8-bit operands for either role (A: rows x K, B: columns x K).
// 4-bit codes: lane quad t reads word t of a k32 step's 16 bytes of codes, codes 8t .. 8t + 7,
// which become its two fragment registers in order (backend/sm80/a8_stage_mma.h); its activation
// fragments then hold the same inputs, bytes 8t .. 8t + 7 of the step, one 8-byte load a row.
#pragma once

#include <cstdint>

#include "humming/backend/sm80/a8_addressing.h"
#include "humming/backend/sm80/ptx.h"
#include "humming/epilogue/store.h"
#include "humming/humming.h"

namespace humming {
namespace sm80 {

// K: the kernel (sm80::DenseA8): its tile (kBM, BN, BK, kThreads), its codes (kCodeBits), its
//    stage layout (kABytes, kBBytes), its group scales (kGroupK, kScaleId) and its Params (args).
template <class K> struct A8Stage {
  using Params = typename K::Params;
  static constexpr int kThreads = K::kThreads, BM = K::kBM, BN = K::BN, BK = K::BK, kABytes = K::kABytes,
                       kBBytes = K::kBBytes, kCodeBits = K::kCodeBits, GroupK = K::kGroupK, GroupN = K::kGroupN;
  static constexpr bool kBlocks = K::kBlocks;
  static constexpr int kRowChunks = BK / 16;            // 16-byte chunks per activation row
  static constexpr int kWRowBytes = BK * kCodeBits / 8; // bytes per weight row of a stage
  static constexpr int kWRowChunks = kWRowBytes / 16;   // 16-byte chunks per weight row
  static constexpr int kScaleBytes = static_cast<int>(DType::from_id(K::kScaleId).bits) / 8;
  // Group scales (per channel and GroupK inputs): the BN channels' of each of the stage's kScaleRows
  // groups, in chunks of kScaleChunkBytes (8 scales of 1 or 2 bytes, 4 of 4: n_pad is a multiple
  // of 8, so a chunk that starts inside a row ends inside it). Blocks: BM fp32 activation scales
  // of the stage's group, then the tile's one weight block's (BN <= GroupN), by 4-byte copies.
  static constexpr int kScaleRows = GroupK == 0 || kBlocks ? 0 : BK / GroupK;
  static constexpr int kScaleChunkBytes = kScaleBytes == 1 ? 8 : 16;
  static constexpr int kScaleChunks = kScaleRows * BN * kScaleBytes / kScaleChunkBytes;
  static_assert(BK % 128 == 0, "the swizzle moves chunks within rows of at least 4 (4-bit codes) or 8 chunks");
  static_assert(kCodeBits == 8 || BK == 128, "4-bit codes: rows of 64 bytes");

  // Byte offsets of chunk `chunk` of row `row` in the activation tile (rows of BK bytes) and in the
  // weight tile (backend/sm80/a8_addressing.h).
  static __device__ __forceinline__ int offset(int row, int chunk) { return a8::offset<BK>(row, chunk); }
  static __device__ __forceinline__ int woffset(int row, int chunk) { return a8::offset<kWRowBytes>(row, chunk); }

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
    const int64_t row_bytes = a.dims.k_pad * kCodeBits / 8, kp_bytes = kp_left * kCodeBits / 8;
    const char *w = reinterpret_cast<const char *>(a.codes) + n0 * row_bytes + k0 * kCodeBits / 8;
    for_each_chunk<BN * kWRowChunks>([&](int i) {
      const int r = i / kWRowChunks, c = i % kWRowChunks;
      const bool ok = r < cols && c * 16 < kp_bytes;
      cp_async16<256>(stage + kABytes + woffset(r, c), ok ? w + r * row_bytes + c * 16 : w, ok);
    });
    if constexpr (kBlocks) {
      // The stage is one K group: its activation scale of each of the tile's rows (zeros past m),
      // and the scale of the weight block of the tile's channels.
      const float *as = a.a_scales + m0 * a.a_scale_cols + kt;
      const uint32_t ss = stage + kABytes + kBBytes;
      for_each_chunk<BM>([&](int r) { cp_async4(ss + r * 4, r < rows ? as + r * a.a_scale_cols : as, r < rows); });
      if (threadIdx.x == 0)
        cp_async4(ss + BM * 4, static_cast<const float *>(a.scales) + kt * a.dims.n_groups + n0 / GroupN, true);
    } else if constexpr (GroupK != 0) {
      // The stage's K groups (kScaleRows of them): their rows of scales, the tile's BN channels.
      constexpr int kPerChunk = kScaleChunkBytes / kScaleBytes, kRowChunks = BN / kPerChunk;
      const char *sc = static_cast<const char *>(a.scales) + (kt * kScaleRows * a.dims.n_groups + n0) * kScaleBytes;
      // (A K padded to whole groups but not to whole stages leaves the last stage groups past
      // k_groups: their scales read as zeros, as their codes and activations do.)
      const int64_t groups_left = a.dims.k_groups - static_cast<int64_t>(kt) * kScaleRows;
      for_each_chunk<kScaleChunks>([&](int i) {
        const int r = i / kRowChunks, c = i % kRowChunks;
        const bool ok = c * kPerChunk < cols && r < groups_left;
        const char *src = ok ? sc + (r * a.dims.n_groups + c * kPerChunk) * kScaleBytes : sc;
        const uint32_t dst = stage + kABytes + kBBytes + i * kScaleChunkBytes;
        if constexpr (kScaleChunkBytes == 16)
          cp_async16(dst, src, ok);
        else
          cp_async8(dst, src, ok);
      });
    }
  }

  // The A fragment (m16n8k32) of rows row0..row0 + 15 of an activation or 8-bit weight tile at
  // stage input kk (a multiple of 32); the B fragments of two tiles of 8 rows (f[0..1], then the
  // next 8 rows' f[2..3]); the B fragment of 8 rows (backend/sm80/a8_addressing.h says where each
  // lane reads).
  static __device__ __forceinline__ void rows16(const char *tile, int row0, int kk, int lane, uint32_t (&f)[4]) {
    ldmatrix_x4(f, tile + a8::rows16<BK>(row0, kk, lane));
  }
  static __device__ __forceinline__ void rows8_pair(const char *tile, int row0, int kk, int lane, uint32_t (&f)[4]) {
    ldmatrix_x4(f, tile + a8::rows8_pair<BK>(row0, kk, lane));
  }
  static __device__ __forceinline__ void rows8(const char *tile, int row0, int kk, int lane, uint32_t (&f)[2]) {
    ldmatrix_x2(f, tile + a8::rows8<BK>(row0, kk, lane));
  }

  // 4-bit codes: bytes 8t .. 8t + 7 (t = lane % 4) of the k32 step at stage input kk of activation
  // row `row` (x: the first four, y: the next four); word t (codes 8t .. 8t + 7) of that step of
  // weight row `row`.
  static __device__ __forceinline__ uint2 act_bytes8(const char *tile, int row, int kk, int lane) {
    return *reinterpret_cast<const uint2 *>(tile + a8::act_bytes8<BK>(row, kk, lane));
  }
  static __device__ __forceinline__ uint32_t code_word(const char *wtile, int row, int kk, int lane) {
    return *reinterpret_cast<const uint32_t *>(wtile + a8::code_word<kWRowBytes>(row, kk, lane));
  }

  // The scale of tile channel `ch` in the stage's scale row `row` (GroupK != 0, not blocks): e8m0
  // (MXFP4) as the power of two it is, 2^-127 for byte 0 (byte 255, NaN, is refused at packing).
  static __device__ __forceinline__ float group_scale(const char *stage, int row, int ch) {
    const char *srow = stage + kABytes + kBBytes + row * BN * kScaleBytes;
    if constexpr (K::kScaleId == dtypes::e8m0.id()) {
      const uint32_t e = reinterpret_cast<const uint8_t *>(srow)[ch];
      return e == 0 ? 5.877471754111438e-39f : __uint_as_float(e << 23);
    } else {
      return epilogue::load_out<K::kScaleId>(srow, ch);
    }
  }

  // Blocks: the activation scale of tile row `row` for the stage's group, and the weight block's.
  static __device__ __forceinline__ float act_block_scale(const char *stage, int row) {
    return reinterpret_cast<const float *>(stage + kABytes + kBBytes)[row];
  }
  static __device__ __forceinline__ float weight_block_scale(const char *stage) {
    return reinterpret_cast<const float *>(stage + kABytes + kBBytes)[BM];
  }
};

} // namespace sm80
} // namespace humming
