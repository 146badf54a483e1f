// 4-bit weight codes of a ring stage -> an 8-bit operand box beside them in the same stage, for the
// sm90 8-bit activation kernel's W4A8 tiles that convert in the producer warpgroup
// (kernel/sm90_a8_dense.cuh, StagedCodes): the consumers then read the weights through a
// descriptor, as they read 8-bit codes, and issue WGMMAs with both operands in shared memory.
//
// In: the TMA's box of the stage, Rows rows of 64 bytes (128 codes, code k at bits 4 (k % 8) of word
// k / 8) in the 64-byte swizzle: 16-byte unit u of row r sits at unit u ^ ((r / 2) % 4).
// Out: Rows rows of 128 operand bytes (byte k is code k's e4m3 or s8 operand) in the 128-byte
// swizzle the WGMMA descriptors read (desc_sw128): unit u of row r at unit u ^ (r % 8). Both boxes
// start where their swizzle repeats (a multiple of 1024 bytes).
//
// A thread takes whole 16-byte units of the input (32 codes): one 16-byte load, four lookups of
// eight codes (numeric/nibble_lut.h), two 16-byte stores (output units 2u and 2u + 1 of the row).
// Threads of consecutive indices take consecutive units, so the eight lanes of each quarter warp
// read one 128-byte line and write two rows' distinct banks: no bank conflicts either way.
#pragma once

#include <cstdint>

#include "humming/format/dtype.h"
#include "humming/backend/sm90/operand_convert.h" // Words4
#include "humming/numeric/nibble_lut.h"

namespace humming {
namespace sm90 {

// Converter thread i of Threads: its units (i, i + Threads, ...) of the Rows x 4 units of `codes`
// into `out`, by `table`. (Host code runs it too: tests/cpp checks the box against the layouts.)
// Rows:    rows (channels) of the stage's box; Threads: converter threads that share it.
template <int Rows, int Threads>
HUMMING_HD void convert_stage_codes(const char *codes, char *out, int i, const numeric::NibbleTable &table) {
  static_assert(Rows % 8 == 0, "whole swizzle repeats of both boxes");
#pragma unroll 2
  for (int u = i; u < 4 * Rows; u += Threads) {
    const int row = u / 4, unit = u % 4;
    const Words4 in = *reinterpret_cast<const Words4 *>(codes + row * 64 + 16 * (unit ^ ((row >> 1) & 3)));
    Words4 lo, hi;
    numeric::nibbles_to_bytes(in.w[0], table, lo.w[0], lo.w[1]);
    numeric::nibbles_to_bytes(in.w[1], table, lo.w[2], lo.w[3]);
    numeric::nibbles_to_bytes(in.w[2], table, hi.w[0], hi.w[1]);
    numeric::nibbles_to_bytes(in.w[3], table, hi.w[2], hi.w[3]);
    char *r = out + row * 128;
    *reinterpret_cast<Words4 *>(r + 16 * ((2 * unit) ^ (row & 7))) = lo;
    *reinterpret_cast<Words4 *>(r + 16 * ((2 * unit + 1) ^ (row & 7))) = hi;
  }
}

} // namespace sm90
} // namespace humming
