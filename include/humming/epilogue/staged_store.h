// Output stores of the sm90 kernels through shared memory and one TMA copy per warpgroup: the
// warpgroup writes its 64 channels x BM tokens, scaled and rounded, into a box of its own, and one of
// its threads copies the box into the output with a single bulk tensor store, which runs while the
// warpgroup goes on to its next tile.
//
// Why: the direct stores (epilogue/wgmma_store.h) write each token's channels in 16-byte pieces,
// 32 stores per thread of a 128-token tile that each touch 8 rows, and the tensor cores wait for
// every consumer warpgroup to issue them. Here each thread issues BM / 16 matrix stores
// (stmatrix, transposed, so that a token's 64 channels become one 128-byte row of the box), and the
// copy to global memory leaves the warpgroup's path.
//
// The box is BM rows of 128 bytes in the 128-byte swizzle (16-byte chunk c of row r at chunk
// c ^ (r % 8)), which the tensor map of the output undoes; the eight rows one matrix store writes
// then fall in eight different bank groups. Rows past m and channels past n are clipped by the
// copy, so edge tiles need no checks.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "humming/backend/sm90/ptx.h"
#include "humming/backend/sm90/tensor_map.h"
#include "humming/epilogue/store.h"
#include "humming/humming.h"

namespace humming {
namespace epilogue {

// Bytes of one warpgroup's box for a tile of BM tokens (BM rows of 64 16-bit outputs).
template <int BM> constexpr int staged_box_bytes() { return BM * 128; }

// Bytes of the boxes a kernel keeps after its ring (shared memory `smem_ring` without them), 0
// where it stores directly: tiles of 64 tokens and more, in whole 16-token blocks (smaller tiles
// store little per tile, and the boxes' barriers would sit on decode's critical path; the grouped
// t80 joined in session 58) with a 16-bit output (Out16), where the boxes fit beside the ring.
// tools/gen_instances.py (_sm90_out_boxes) mirrors this rule.
template <int BM, int Consumers, bool Out16> constexpr int staged_store_bytes(int smem_ring) {
  return Out16 && BM >= 64 && BM % 16 == 0 && smem_ring + Consumers * staged_box_bytes<BM>() <= 227 * 1024
             ? Consumers * staged_box_bytes<BM>()
             : 0;
}

// Whether rows [row0, row0 + rows) of a tile may leave through a box: always in dense GEMMs; in
// grouped ones, whose tiles end at their expert's last row (m_end), which a box's copy would write
// past, only where all those rows are the expert's or its rows run to the output's end m (the copy
// clips there). Else the threads store directly.
template <bool Grouped>
__host__ __device__ constexpr bool boxed_rows(int64_t row0, int64_t rows, int64_t m_end, int64_t m) {
  return !Grouped || row0 + rows <= m_end || m_end >= m;
}

// Host side, for a kernel with boxes (Params with `out` and `staged`): where the output's rows
// start 16-byte aligned (the tensor map's requirement), the output's map, boxes of BM rows x 64
// channels, and staged = 1; else staged = 0 (the threads copy the boxes out).
template <int BM, class Params> Status prepare_staged_store(Params *p, const GemmArgs &a, sm90::MapElem elem) {
  const bool tma =
      reinterpret_cast<uintptr_t>(a.out) % 16 == 0 && (a.m == 1 || (a.ldo * 2) % 16 == 0) && a.ldo >= a.dims.n;
  p->staged = tma ? 1 : 0;
  return tma ? sm90::cached_rows_map(&p->out, a.out, elem, a.m, a.dims.n, a.ldo, BM) : Status::Ok();
}

// Outputs a tensor map cannot address (rows not 16-byte aligned): the warpgroup's threads copy
// `rows` rows of a box (64 16-bit channels each, 128-byte swizzle) to output rows m0.. and channels
// n0.., 16 bytes (8 channels of one token) per thread and row, element by element. The barrier at
// the next tile's start keeps the box until every thread has read its part.
__device__ __forceinline__ void copy_box_out(const GemmArgs &a, uint32_t box, int rows, int64_t m0, int64_t n0, int t) {
  const uint32_t c = static_cast<uint32_t>(t % 8);
  uint16_t *o = static_cast<uint16_t *>(a.out);
  for (int row = t / 8; row < rows; row += 16) {
    const int64_t m = m0 + row, n8 = n0 + 8 * c;
    if (m >= a.m) break;
    uint32_t w[4];
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                 : "r"(box + static_cast<uint32_t>(row) * 128 + ((c ^ static_cast<uint32_t>(row % 8)) << 4))
                 : "memory");
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (n8 + i < a.dims.n) o[m * a.ldo + n8 + i] = static_cast<uint16_t>(w[i / 2] >> (16 * (i % 2)));
  }
}

// OutId:       DType id of the output (bf16 or f16).
// Acc:         sums per thread (BM / 2 for a tile of BM tokens; BM a multiple of 16).
// TokenScales: multiply each token's sums by its fp32 activation scale, a_scales[token * cols].
// The sums acc[4j + e] of thread t (of its warpgroup's 128) are channel n (e < 2) or n + 8 and
// token m0 + 8j + 2 (t % 4) + e % 2, with n = wg_n0 + 16 (t / 32) + (t % 32) / 4 (the WGMMA's
// fragment); `f[h]` multiplies those of channel n + 8h. `box`: the warpgroup's box (1024-byte
// aligned); `bar`: a named barrier of the warpgroup's 128 threads only. With `tma`, `out_map` is
// the output's tensor map (boxes of 64 channels x BM tokens) and thread 0 of the warpgroup owns the
// copies: it waits for the previous one to have read the box before anyone writes it again, and the
// kernel's end waits for the last (finish_staged_stores). Without, the threads copy the box out.
// Boxes:       the boxes thread 0 fills in turn, a copy each (one per 64-channel block of its
//              warpgroup): before it writes one, the copies of the Boxes - 1 others may still read theirs.
template <uint32_t OutId, int Acc, bool TokenScales, int Boxes = 1>
__device__ __forceinline__ void stage_wgmma_sums(const GemmArgs &a, bool tma, const void *out_map, uint32_t box,
                                                 int bar, int64_t m0, int64_t wg_n0, int t, const float (&acc)[Acc],
                                                 const float (&f)[2]) {
  static_assert(DType::from_id(OutId).bits == 16, "boxes hold 16-bit outputs");
  static_assert(Acc % 8 == 0, "whole 16-token blocks, one matrix store each (BM a multiple of 16)");
  // The thread's index through an opaque move, so that nothing derived from it (shuffle lanes, box
  // addresses) is hoisted out of the kernel's tile loop and held across the main loop: in the
  // 192-token tile that cost 140 bytes of spills.
  asm volatile("mov.b32 %0, %0;\n" : "+r"(t));
  const int lane = t % 32, warp = t / 32;
  // Each lane loads one token scale of every 32 tokens of the tile, and the lanes that need one
  // take it by a shuffle: 6 registers in a 192-token tile, where a load per sum pair took 48 and
  // made ptxas spill.
  constexpr int kBlocks32 = (Acc + 15) / 16;
  float tok[kBlocks32];
#pragma unroll
  for (int i = 0; i < kBlocks32; ++i) {
    const int64_t m = m0 + 32 * i + lane;
    tok[i] = !TokenScales ? 1.0f : m < a.m ? a.a_scales[m * a.a_scale_cols] : 0.0f;
  }
  const int64_t n = wg_n0 + 16 * warp + lane / 4;
  float bias[2] = {-0.0f, -0.0f}; // x + -0 is x, zeros' signs too
  if (a.bias != nullptr)
#pragma unroll
    for (int h = 0; h < 2; ++h) bias[h] = n + 8 * h < a.dims.n ? load_out<OutId>(a.bias, n + 8 * h) : 0.0f;
  if (t == 0) sm90::bulk_wait<Boxes - 1, true>();
  sm90::named_sync(bar, 128);
  // Lane 8q + r addresses row r of matrix q of each store: token 8 (2 jj + q / 2) + r of the tile,
  // the 16 bytes of channels 16 warp + 8 (q % 2) .. + 7 of the warpgroup's 64 (chunk 2 warp + q % 2).
  const int q = lane / 8, r = lane % 8;
  const uint32_t chunk = static_cast<uint32_t>((2 * warp + q % 2) ^ r) << 4;
#pragma unroll
  for (int jj = 0; jj < Acc / 8; ++jj) {
    // The shuffles of this pair of blocks after the matrix store before (ordered asm statements):
    // hoisted all at once, their results spilled in the 192-token tile.
    if constexpr (TokenScales) sm90::fence_regs(tok);
    uint32_t v[4];
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const int j = 2 * jj + b;
      float ts[2] = {1.0f, 1.0f};
      if constexpr (TokenScales)
#pragma unroll
        for (int e = 0; e < 2; ++e) ts[e] = __shfl_sync(0xFFFFFFFFu, tok[j / 4], 8 * (j % 4) + 2 * (lane % 4) + e);
#pragma unroll
      for (int h = 0; h < 2; ++h)
        v[2 * b + h] = numeric::Operand<OutId == dtypes::bf16.id()>::pair(
            acc[4 * j + 2 * h] * f[h] * ts[0] + bias[h], acc[4 * j + 2 * h + 1] * f[h] * ts[1] + bias[h]);
    }
    const uint32_t row = static_cast<uint32_t>(8 * (2 * jj + q / 2) + r);
    sm90::stmatrix_x4_trans(box + row * 128 + chunk, v[0], v[1], v[2], v[3]);
  }
  if (tma) sm90::fence_proxy_async_smem();
  sm90::named_sync(bar, 128);
  if (tma) {
    if (t == 0) {
      sm90::tensor_store_2d(out_map, static_cast<int>(wg_n0), static_cast<int>(m0), box);
      sm90::bulk_commit();
    }
    return;
  }
  copy_box_out(a, box, 2 * Acc, m0, wg_n0, t);
}

// Tiles with the tokens on the WGMMA's M side (sm90::DenseA8 with ChannelsN = BN): a warpgroup's
// 64 tokens x BN channels, row-major, as BN / 64 boxes of 64 rows x 128 bytes (128-byte swizzle),
// one after the other: 64 x BN x 2 bytes per warpgroup.
template <int BN> constexpr int staged_token_rows_bytes() { return 64 * BN * 2; }

// Bytes of those boxes after the ring (`smem_ring` without them), 0 where the tile stores directly
// (store_token_rows): 16-bit outputs (Out16) where the boxes fit beside the ring.
// tools/gen_instances.py (_sm90_out_boxes) mirrors this rule.
template <int BN, int Consumers, bool Out16> constexpr int staged_token_rows_store_bytes(int smem_ring) {
  return Out16 && smem_ring + Consumers * staged_token_rows_bytes<BN>() <= 227 * 1024
             ? Consumers * staged_token_rows_bytes<BN>()
             : 0;
}

// The sums of such a tile through its boxes. OutId, Acc (BN / 2), TokenScales and ScaleId as
// store_token_rows (epilogue/wgmma_store.h): acc[4j + e] of thread t (of its warpgroup's 128) is
// token m_wg + 16 (t / 32) + (t % 32) / 4 + 8 (e / 2) and channel n0 + 8j + 2 (t % 4) + e % 2.
// `box`, `bar`, `tma` and `out_map` as stage_wgmma_sums, with the map's boxes 64 channels x 64
// tokens: the matrix stores are not transposed, since the sums' rows are the output's rows, and
// thread 0 of the warpgroup copies the BN / 64 boxes out.
// `scales`: the per-channel scales (a.scales, or a grouped GEMM's expert's).
template <uint32_t OutId, int Acc, bool TokenScales, uint32_t ScaleId>
__device__ __forceinline__ void stage_token_rows(const GemmArgs &a, bool tma, const void *out_map, uint32_t box,
                                                 int bar, int64_t m_wg, int64_t n0, int t, const float (&acc)[Acc],
                                                 float global, const void *scales) {
  static_assert(DType::from_id(OutId).bits == 16, "boxes hold 16-bit outputs");
  static_assert(Acc % 32 == 0, "whole boxes of 64 channels");
  constexpr int kBoxes = Acc / 32;
  // Opaque, as in stage_wgmma_sums: nothing derived from the thread index is held across the main loop.
  asm volatile("mov.b32 %0, %0;\n" : "+r"(t));
  const int lane = t % 32, warp = t / 32;
  const int64_t m = m_wg + 16 * warp + lane / 4;
  float ts[2];
  token_row_factors<TokenScales>(a, m, global, ts);
  if (t == 0) sm90::bulk_wait<0, true>();
  sm90::named_sync(bar, 128);
  // Lane 8q + r addresses row r of matrix q of each store: token row 16 warp + 8 (q % 2) + r of the
  // warpgroup's 64 and the 16 bytes of channel block 2 jj + q / 2 (chunk (2 jj + q / 2) % 8 of box
  // (2 jj + q / 2) / 8), whose swizzled chunk is that ^ r (the row's index mod 8).
  const int q = lane / 8, r = lane % 8;
  const uint32_t row_addr = box + static_cast<uint32_t>(16 * warp + 8 * (q % 2) + r) * 128;
#pragma unroll
  for (int jj = 0; jj < Acc / 8; ++jj) {
    uint32_t v[4];
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const int j = 2 * jj + b;
      const int64_t c = n0 + 8 * j + 2 * (lane % 4);
      float f[2], bias[2] = {-0.0f, -0.0f}; // x + -0 is x, zeros' signs too
      channel_pair_factors<ScaleId>(a, scales, c, f);
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (a.bias != nullptr && c + e < a.dims.n) bias[e] = load_out<OutId>(a.bias, c + e);
#pragma unroll
      for (int h = 0; h < 2; ++h)
        v[2 * b + h] = numeric::Operand<OutId == dtypes::bf16.id()>::pair(
            acc[4 * j + 2 * h] * f[0] * ts[h] + bias[0], acc[4 * j + 2 * h + 1] * f[1] * ts[h] + bias[1]);
    }
    const int block = 2 * jj + q / 2; // channel block of 8 this lane's row address is in
    sm90::stmatrix_x4(row_addr + (block / 8) * (64 * 128) + (static_cast<uint32_t>((block % 8) ^ r) << 4), v[0], v[1],
                      v[2], v[3]);
  }
  if (tma) sm90::fence_proxy_async_smem();
  sm90::named_sync(bar, 128);
  if (tma) {
    if (t == 0) {
#pragma unroll
      for (int i = 0; i < kBoxes; ++i)
        sm90::tensor_store_2d(out_map, static_cast<int>(n0 + 64 * i), static_cast<int>(m_wg), box + i * 64 * 128);
      sm90::bulk_commit();
    }
    return;
  }
  // Outputs a tensor map cannot address: the warpgroup copies the boxes out itself.
  for (int i = 0; i < kBoxes; ++i) copy_box_out(a, box + i * 64 * 128, 64, m_wg, n0 + 64 * i, t);
}

// The end of a block that stored through boxes: thread 0 of each warpgroup waits for its last copy
// (the block's shared memory must outlive the copy's reads).
__device__ __forceinline__ void finish_staged_stores(int t) {
  if (t == 0) sm90::bulk_wait<0, false>();
}

} // namespace epilogue
} // namespace humming
