// The sm90 8-bit activation layout of 4-bit codes (LayoutId kLayoutSm90A8): the generic layout's
// rows, each 128-input chunk of them reordered so that a thread of the sm90 W4A8 kernels
// (kernel/sm90_a8_dense.cuh) reads all its A fragment codes of a stage with one 16-byte load per
// row, where the generic order takes sixteen 2-byte loads and eight byte permutes.
//
// A row holds k_pad / 2 bytes (k_pad a multiple of 128), as in the generic layout, so the stages
// still copy boxes of 64-byte row chunks by TMA. Inside chunk c (inputs 128 c .. 128 c + 127),
// input kk = 32 s + 16 h + 4 q + j (k32 step s, half h, lane quad q = lane % 4, j < 4) sits in word
// 4 q + s of the chunk, at nibble 4 h + j: word 4 q + s is the eight codes of step s that lane quad
// q's A fragment registers take (inputs 4 q + {0..3} of the step in its low half, 16 + 4 q + {0..3}
// in its high half: the PTX ISA's m64nNk32 A fragment of 8-bit types), in the order the
// conversions of numeric/nibble_lut.h read, and the four words of quad q are its 16-byte unit.
#pragma once

#include <cstdint>

#include "humming/format/dtype.h"

namespace humming {
namespace layout_sm90_a8 {

constexpr int64_t kChunkK = 128; // inputs per reordered chunk: one stage of the kernels
constexpr int64_t kAlignK = kChunkK;
constexpr int64_t kAlignN = 8;

HUMMING_HD constexpr bool supports_bits(int bits) { return bits == 4; }

// Word of a row (k_pad / 8 words) holding input k, and the nibble of it.
HUMMING_HD constexpr int64_t word_of(int64_t k) {
  const int kk = static_cast<int>(k % kChunkK);
  return (k / kChunkK) * 16 + 4 * ((kk % 16) / 4) + kk / 32;
}
HUMMING_HD constexpr int nibble_of(int64_t k) {
  const int r = static_cast<int>(k % 32);
  return 4 * (r / 16) + r % 4;
}

// Code k of the row that starts at `row`.
HUMMING_HD uint32_t code_at(const uint32_t *row, int64_t k) { return (row[word_of(k)] >> (4 * nibble_of(k))) & 0xFu; }

// Word `w` of a packed row from unpacked codes (uint8 bit patterns, `k` of them; inputs past `k`
// are padding and pack as 0).
HUMMING_HD uint32_t pack_word(const uint8_t *codes_row, int64_t k, int64_t w) {
  const int64_t chunk = w / 16;
  const int q = static_cast<int>(w % 16) / 4, s = static_cast<int>(w % 4);
  uint32_t word = 0;
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j) {
      const int64_t kk = chunk * kChunkK + 32 * s + 16 * h + 4 * q + j;
      if (kk < k) word |= (codes_row[kk] & 0xFu) << (4 * (4 * h + j));
    }
  return word;
}

} // namespace layout_sm90_a8
} // namespace humming
