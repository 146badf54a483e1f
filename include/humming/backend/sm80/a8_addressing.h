// Where each lane of the sm80 family's 8-bit activation kernel (kernel/sm80_a8_dense.cuh) reads its
// mma.sync m16n8k32 fragments in a stage (backend/sm80/a8_stage.h): byte offsets in a tile of
// K-major rows, host and device code alike, so that tests/cpp can check them against the
// instruction's fragment layout with no GPU.
//
// A tile holds rows of RowBytes bytes (inputs, or 4-bit codes two to a byte), a 16-byte chunk c of
// row r at chunk c ^ (r % 8) (rows of 8 chunks or more) or c ^ ((r / 2) % 4) (rows of 4 chunks):
// the eight rows of one ldmatrix matrix, or of one quarter warp's 4-byte loads, fall in distinct
// banks. kk is a k32 step's first input within the stage (a multiple of 32).
#pragma once

#include <cstdint>

#include "humming/format/dtype.h"

namespace humming {
namespace sm80 {
namespace a8 {

// Byte offset of chunk `chunk` of row `row`.
template <int RowBytes> HUMMING_HD int offset(int row, int chunk) {
  static_assert(RowBytes % 64 == 0, "rows of 4 chunks or of at least 8");
  return row * RowBytes + ((chunk ^ (RowBytes >= 128 ? row & 7 : (row >> 1) & 3)) * 16);
}

// ldmatrix.x4 row address of `lane` for the A fragment (m16n8k32, 8-bit) of rows row0..row0 + 15
// at step kk: matrices 0 / 1 are rows 0-7 / 8-15 of the step's first 16 inputs, 2 / 3 of its second.
template <int RowBytes> HUMMING_HD int rows16(int row0, int kk, int lane) {
  return offset<RowBytes>(row0 + (lane % 8) + ((lane / 8) % 2) * 8, kk / 16 + lane / 16);
}

// ldmatrix.x4 row address of `lane` for the B fragments of two 8-row tiles at step kk: matrices
// 0 / 1 are rows row0..row0 + 7's two 16-input halves (b0, b1 of the first tile), 2 / 3 the next
// 8 rows'.
template <int RowBytes> HUMMING_HD int rows8_pair(int row0, int kk, int lane) {
  return offset<RowBytes>(row0 + (lane % 8) + (lane / 16) * 8, kk / 16 + (lane / 8) % 2);
}

// ldmatrix.x2 row address of `lane` for the B fragment of rows row0..row0 + 7 at step kk (lanes
// 16-31 repeat lanes 0-15's, which .x2 does not read).
template <int RowBytes> HUMMING_HD int rows8(int row0, int kk, int lane) {
  return offset<RowBytes>(row0 + (lane % 8), kk / 16 + (lane / 8) % 2);
}

// 4-bit codes: the 8-byte load of bytes 8t .. 8t + 7 (t = lane % 4) of activation row `row` at step
// kk (the inputs of lane quad t's code word: the first four, then the next four).
template <int RowBytes> HUMMING_HD int act_bytes8(int row, int kk, int lane) {
  const int t = lane % 4;
  return offset<RowBytes>(row, kk / 16 + t / 2) + (t % 2) * 8;
}

// 4-bit codes: the 4-byte load of word t (t = lane % 4; codes 8t .. 8t + 7) of step kk of a weight
// row `row` of 4-bit codes (16 bytes a step).
template <int RowBytes> HUMMING_HD int code_word(int row, int kk, int lane) {
  return offset<RowBytes>(row, kk / 32) + (lane % 4) * 4;
}

// 4-bit codes, the wide form: the A fragment (m16n8k32) of a 16-row tile from lane quad t's two
// 8-byte loads (act_bytes8) of rows g (x0, y0) and g + 8 (x1, y1): registers 0 / 2 hold row g's
// "inputs 4t.. and 16 + 4t.." of the fragment layout, which here are its inputs 8t.. and 8t + 4..,
// the ones the code word of the B fragment holds in the same places.
HUMMING_HD void wide4_a(uint32_t x0, uint32_t y0, uint32_t x1, uint32_t y1, uint32_t (&af)[4]) {
  af[0] = x0, af[1] = x1, af[2] = y0, af[3] = y1;
}

// 4-bit codes, the narrow form: the A fragment of 16 channels from the operands of the code words
// of channels g (lo0: codes 8t..8t + 3, hi0: 8t + 4..) and g + 8 (lo1, hi1).
HUMMING_HD void narrow4_a(uint32_t lo0, uint32_t hi0, uint32_t lo1, uint32_t hi1, uint32_t (&af)[4]) {
  af[0] = lo0, af[1] = lo1, af[2] = hi0, af[3] = hi1;
}

} // namespace a8
} // namespace sm80
} // namespace humming
