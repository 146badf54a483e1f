// The cp.async copies of one stage of the sm80 kernel (kernel/sm80_dense.cuh): BM activation rows
// x BK inputs, the BK x BN weight blocks of the tile's 64-channel columns, and the stage's scale
// and zero-point rows, into the stage layout the kernel reads (kABytes of activations swizzled by
// StageFragments<K>::a_offset (backend/sm80/stage_fragments.h), then kBBytes of weights, kSBytes of scales, the zero
// points). Two forms: inner() for stages that lie wholly inside K (no K tests, no zero fill) and edge() for the rest.
#pragma once

#include <cstdint>

#include "humming/backend/sm80/ptx.h"
#include "humming/backend/sm80/stage_fragments.h"
#include "humming/humming.h"

namespace humming {
namespace sm80 {

// K: the kernel (sm80::Dense): its tile (kBM, BN, BK, kWarpsN, kThreads), its stage layout
//    (kABytes, kBBytes, kSBytes; the activations' swizzle from StageFragments), its weight layout (kWordsPerBlock), its
//    groups (kGroupK, kScaleRows, kZeroBytes, kIntZero, kFloatZero) and its Params.
template <class K> struct StageCopies {
  using Params = typename K::Params;
  static constexpr int kThreads = K::kThreads, BM = K::kBM, BN = K::BN, BK = K::BK, WarpsN = K::kWarpsN;
  static constexpr int GroupK = K::kGroupK, kScaleRows = K::kScaleRows, kZeroBytes = K::kZeroBytes;
  static constexpr int kWordsPerBlock = K::kWordsPerBlock, kABytes = K::kABytes, kBBytes = K::kBBytes,
                       kSBytes = K::kSBytes;
  static constexpr bool kIntZero = K::kIntZero, kFloatZero = K::kFloatZero;

  // cp.async loops with trip counts known at compile time (the last round may be partial).
  template <int Total, class F> static __device__ __forceinline__ void for_each_chunk(F f) {
#pragma unroll
    for (int it = 0; it < (Total + kThreads - 1) / kThreads; ++it) {
      const int i = static_cast<int>(threadIdx.x) + it * kThreads;
      if (Total % kThreads == 0 || i < Total) f(i);
    }
  }

  // This thread's copies of every stage of one tile, worked out once per tile (a stage then adds
  // a uniform K offset and issues its copies): under the decode tiles' register budget the
  // compiler would otherwise rebuild these addresses for every stage.
  static constexpr int kRowChunks = BK / 8;                         // 16-byte chunks per activation row
  static constexpr int kRowsPerPass = kThreads / kRowChunks;        // activation rows per round of copies
  static constexpr int kColChunks = (BK / 16) * kWordsPerBlock / 4; // per 64-channel weight column
  static constexpr int kBChunks = WarpsN * kColChunks;              // weight chunks per stage
  static constexpr bool kFixedCopies = kColChunks % kThreads == 0;
  static constexpr int kScaleChunks = BN * 2 / 16;         // per scale row
  static constexpr int kZeroChunks = BN * kZeroBytes / 16; // per zero-point row
  static_assert(kThreads % kRowChunks == 0, "a thread copies the same chunk of several activation rows");
  static_assert(kColChunks % kThreads == 0 || kThreads % kColChunks == 0, "weight chunks split evenly");
  static_assert(kScaleRows * kScaleChunks <= kThreads, "one scale chunk per thread and stage at most");
  static_assert(kScaleRows * kZeroChunks <= kThreads, "one zero-point chunk per thread and stage at most");
  struct Tile {
    const char *a; // this thread's first activation chunk at K = 0
    const char *b; // this thread's first weight chunk at K = 0
    int a_rows;    // activation rows of this thread's column that lie below m
    int a_col;     // first input of this thread's activation chunks
    int b_cols;    // weight columns of the tile that lie inside n_pad
  };
  static __device__ __forceinline__ Tile tile(const Params &p, int64_t m0, int64_t n0) {
    const GemmArgs &a = p.args;
    const int t = static_cast<int>(threadIdx.x);
    const int r0 = t / kRowChunks, c = t % kRowChunks;
    const int rows = static_cast<int>(a.m - m0 < BM ? a.m - m0 : BM);
    Tile tc;
    tc.a = static_cast<const char *>(a.a) + (m0 + r0) * a.lda * 2 + c * 16;
    tc.a_rows = r0 < rows ? (rows - 1 - r0) / kRowsPerPass + 1 : 0;
    tc.a_col = c * 8;
    // Fixed copies: chunk t of column 0; otherwise chunk t % kColChunks of column t / kColChunks.
    const int b_col = kFixedCopies ? 0 : t / kColChunks;
    const int b_chunk = kFixedCopies ? t : t % kColChunks;
    tc.b = reinterpret_cast<const char *>(a.codes) + (n0 / 64 + b_col) * p.k_blocks * kWordsPerBlock * 4 + b_chunk * 16;
    tc.b_cols = static_cast<int>((a.dims.n_pad - n0) / 64);
    return tc;
  }

  // The copies of a stage that lies wholly inside K (every stage but a partial last one): no K
  // tests, no zero fill, and per stream one multiply-add of the K tile to a per-tile pointer.
  // Rows past m and weight columns past n_pad are not loaded (see edge), and scale rows
  // all exist. Only the two pointers of Tile stay live across stages: whatever else a
  // thread needs is a few integer operations on its index, cheaper than registers under the
  // decode tiles' budget of 128.
  static __device__ __forceinline__ void inner(const Params &p, const Tile &tc, uint32_t stage, int kt, int64_t n0) {
    const int t = static_cast<int>(threadIdx.x);
    const int r0 = t / kRowChunks, c = t % kRowChunks;
    // r0 < kRowsPerPass, so row r0 + j * kRowsPerPass swizzles with (r0 & 7) ^ ((j * kRowsPerPass) & 7).
    const uint32_t a_dst = static_cast<uint32_t>(StageFragments<K>::a_offset(r0, c));
    const int a_pass = static_cast<int>(p.args.lda * 2 * kRowsPerPass);
    const char *asrc = tc.a + kt * (BK * 2);
#pragma unroll
    for (int j = 0; j < (BM + kRowsPerPass - 1) / kRowsPerPass; ++j)
      if (j < tc.a_rows)
        cp_async16_full<128>(stage + ((a_dst + j * kRowsPerPass * BK * 2) ^ (((j * kRowsPerPass) & 7) * 16)),
                             asrc + j * a_pass);
    const int col_bytes = static_cast<int>(p.k_blocks * kWordsPerBlock * 4);
    const char *bsrc = tc.b + kt * ((BK / 16) * kWordsPerBlock * 4);
    if constexpr (kFixedCopies) {
      // Chunk t + (j % kPasses) * kThreads of column j / kPasses.
      constexpr int kPasses = kColChunks / kThreads;
#pragma unroll
      for (int j = 0; j < WarpsN * kPasses; ++j) {
        const int nb = j / kPasses, c_off = (j % kPasses) * kThreads;
        if (nb == 0 || nb < tc.b_cols)
          cp_async16_full<256>(stage + kABytes + (nb * kColChunks + c_off + t) * 16,
                               bsrc + nb * col_bytes + c_off * 16);
      }
    } else {
      // Chunk t % kColChunks of columns t / kColChunks + j * (kThreads / kColChunks).
      constexpr int kColsPerPass = kThreads / kColChunks;
      const int b_col = t / kColChunks;
#pragma unroll
      for (int j = 0; j < (kBChunks + kThreads - 1) / kThreads; ++j)
        if ((kBChunks % kThreads == 0 || t + j * kThreads < kBChunks) && b_col + j * kColsPerPass < tc.b_cols)
          cp_async16_full<256>(stage + kABytes + (t + j * kThreads) * 16, bsrc + j * kColsPerPass * col_bytes);
    }
    if constexpr (GroupK != 0) {
      const GemmArgs &a = p.args;
      const int g0 = GroupK <= BK ? kt * kScaleRows : kt / (GroupK <= BK ? 1 : GroupK / BK);
      const int n_left = static_cast<int>(a.dims.n_pad - n0);
      const int64_t first = static_cast<int64_t>(g0) * a.dims.n_groups + n0;
      const uint32_t ss = stage + kABytes + kBBytes;
      const int sr = t / kScaleChunks, sc = t % kScaleChunks;
      if (t < kScaleRows * kScaleChunks && sc * 8 < n_left)
        cp_async16_full(ss + t * 16, static_cast<const char *>(a.scales) + (first + sr * a.dims.n_groups + sc * 8) * 2);
      if constexpr (kIntZero || kFloatZero) {
        constexpr int kPerChunk = 16 / kZeroBytes; // zero points per 16-byte chunk
        const int zr = t / kZeroChunks, zc = t % kZeroChunks;
        if (t < kScaleRows * kZeroChunks && zc * kPerChunk < n_left)
          cp_async16_full(ss + kSBytes + t * 16, static_cast<const char *>(a.zeros) +
                                                     (first + zr * a.dims.n_groups + zc * kPerChunk) * kZeroBytes);
      }
    }
  }

  // One stage's cp.async copies into the stage at shared address `stage` (K tile kt of the tile
  // at m0, n0). Activations: BM rows x BK inputs in 16-byte chunks, chunk c of row r stored at
  // c ^ (r % 8); rows past m are not loaded at all (mma rows are independent, so whatever those
  // rows of shared memory hold only reaches output rows that are never stored), and K past k
  // reads as zeros, which cancels the padded weights. Weights: for each 64-channel column, BK / 16
  // consecutive blocks; blocks past the padded K or N read as zeros (finite operands, so the zero
  // activations cancel them).
  static __device__ __forceinline__ void edge(const Params &p, const Tile &tc, uint32_t stage, int kt, int64_t m0,
                                              int64_t n0) {
    const GemmArgs &a = p.args;
    // K offsets fit 32 bits (can_implement): cheaper per stage than the 64-bit forms.
    const int k0 = kt * BK;
    const int t = static_cast<int>(threadIdx.x);
    const int k_left = static_cast<int>(a.dims.k) - k0 < BK ? static_cast<int>(a.dims.k) - k0 : BK;
    const int kb0 = k0 / 16;
    const int kb_left = static_cast<int>(p.k_blocks) - kb0 < BK / 16 ? static_cast<int>(p.k_blocks) - kb0 : BK / 16;
    constexpr int kChunksPerBlock = kWordsPerBlock / 4;
    if constexpr (kFixedCopies) {
      // Thread t copies chunk t % kRowChunks of rows t / kRowChunks + j * kRowsPerPass, and chunks
      // t + (j % kPasses) * kThreads of weight column j / kPasses. Only a stage at the end of K
      // tests each copy against K.
      constexpr int kPasses = kColChunks / kThreads;
      const bool inner = k_left == BK && kb_left == BK / 16;
      const int row_bytes = static_cast<int>(a.lda * 2);
      const int col_bytes = static_cast<int>(p.k_blocks * kWordsPerBlock * 4);
      const char *asrc = tc.a + k0 * 2;
      const char *bsrc = tc.b + kb0 * (kWordsPerBlock * 4);
      const int r0 = t / kRowChunks, c = t % kRowChunks;
      const bool a_k = inner || tc.a_col < k_left;
#pragma unroll
      for (int j = 0; j < (BM + kRowsPerPass - 1) / kRowsPerPass; ++j) {
        const int r = r0 + j * kRowsPerPass;
        if (j < tc.a_rows)
          cp_async16<128>(stage + StageFragments<K>::a_offset(r, c), a_k ? asrc + j * kRowsPerPass * row_bytes : asrc,
                          a_k);
      }
#pragma unroll
      for (int j = 0; j < WarpsN * kPasses; ++j) {
        const int nb = j / kPasses, c_off = (j % kPasses) * kThreads;
        const bool ok = (nb == 0 || nb < tc.b_cols) && (inner || (t + c_off) / kChunksPerBlock < kb_left);
        cp_async16<256>(stage + kABytes + (nb * kColChunks + c_off + t) * 16,
                        ok ? bsrc + nb * col_bytes + c_off * 16 : bsrc, ok);
      }
    } else {
      const char *base = static_cast<const char *>(a.a) + (m0 * a.lda + k0) * 2;
      const int rows = static_cast<int>(a.m - m0 < BM ? a.m - m0 : BM);
      const int row_bytes = static_cast<int>(a.lda * 2);
      for_each_chunk<BM * kRowChunks>([&](int i) {
        const int r = i / kRowChunks, c = i % kRowChunks;
        if (r >= rows) return;
        const bool ok = c * 8 < k_left;
        cp_async16<128>(stage + StageFragments<K>::a_offset(r, c), ok ? base + r * row_bytes + c * 16 : base, ok);
      });
      const char *wbase = reinterpret_cast<const char *>(a.codes) + ((n0 / 64) * p.k_blocks + kb0) * kWordsPerBlock * 4;
      const int col_bytes = static_cast<int>(p.k_blocks * kWordsPerBlock * 4);
      const int cols = static_cast<int>((a.dims.n_pad - n0) / 64);
      for_each_chunk<WarpsN * kColChunks>([&](int i) {
        const int nb = i / kColChunks, c = i % kColChunks;
        const bool ok = c / kChunksPerBlock < kb_left && nb < cols;
        cp_async16<256>(stage + kABytes + i * 16, ok ? wbase + nb * col_bytes + c * 16 : wbase, ok);
      });
    }
    if constexpr (GroupK != 0) {
      // Scale rows (and zero-point rows) of the groups this stage touches; rows past the last
      // group read as zeros, never as stale values that could be NaN.
      const int g0 = k0 / GroupK;
      const int g_left =
          static_cast<int>(a.dims.k_groups) - g0 < kScaleRows ? static_cast<int>(a.dims.k_groups) - g0 : kScaleRows;
      const int n_left = static_cast<int>(a.dims.n_pad - n0);
      const int row_elems = static_cast<int>(a.dims.n_groups);
      const int64_t first = g0 * a.dims.n_groups + n0;
      const char *scales = static_cast<const char *>(a.scales) + first * 2;
      const uint32_t ss = stage + kABytes + kBBytes;
      for_each_chunk<kScaleRows * kScaleChunks>([&](int i) {
        const int r = i / kScaleChunks, c = i % kScaleChunks;
        const bool ok = r < g_left && c * 8 < n_left;
        cp_async16(ss + i * 16, ok ? scales + (r * row_elems + c * 8) * 2 : scales, ok);
      });
      if constexpr (kIntZero || kFloatZero) {
        constexpr int kPerChunk = 16 / kZeroBytes;
        const char *zeros = static_cast<const char *>(a.zeros) + first * kZeroBytes;
        const uint32_t sz = ss + kSBytes;
        for_each_chunk<kScaleRows * kZeroChunks>([&](int i) {
          const int r = i / kZeroChunks, c = i % kZeroChunks;
          const bool ok = r < g_left && c * kPerChunk < n_left;
          cp_async16(sz + i * 16, ok ? zeros + (r * row_elems + c * kPerChunk) * kZeroBytes : zeros, ok);
        });
      }
    }
  }
};

} // namespace sm80
} // namespace humming
