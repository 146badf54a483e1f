// The sm90 8-bit activation layout of 4-bit codes (LayoutId kLayoutSm90A8): each channel's codes
// cut into 128-input chunks (one stage of the kernels, 64 bytes), the chunks stored K tile by K
// tile, and inside a chunk the codes reordered so that a thread of the sm90 W4A8 kernels
// (kernel/sm90_a8_dense.cuh) reads all its A fragment codes of a stage with one 16-byte load per
// channel, where the generic order takes sixteen 2-byte loads and eight byte permutes.
//
// Chunk order: chunk c of channel r (inputs 128 c .. 128 c + 127) is the 64 bytes at
// (c n_pad + r) x 64: K tile c of every channel, then K tile c + 1 (word_index). So a stage's box
// of BN channels is BN x 64 contiguous bytes, one box of a 2-D tensor map over 64-byte rows. In the
// generic order (each channel's k_pad / 2 bytes together, until session 48) the same box was BN
// pieces of 64 bytes, k_pad / 2 bytes apart. The packed codes keep the generic layout's extent:
// n_pad x k_pad / 8 words.
//
// Inside chunk c, input kk = 32 s + 16 h + 4 q + j (k32 step s, half h, lane quad q = lane % 4,
// j < 4) sits in word 4 q + s of the chunk, at nibble 4 h + j: word 4 q + s is the eight codes of
// step s that lane quad q's A fragment registers take (inputs 4 q + {0..3} of the step in its low
// half, 16 + 4 q + {0..3} in its high half: the PTX ISA's m64nNk32 A fragment of 8-bit types), in
// the order the conversions of numeric/nibble_lut.h read, and the four words of quad q are its
// 16-byte unit.
//
// e2m1 codes (fp4_order) spread their bits over the word instead of taking a nibble each, so that
// the kernels turn a word into its two operand registers of e4m3 bytes of 2^-6 the codes' values
// (numeric/nibble_lut.h e2m1_a8_to_shifted_e4m3) in five instructions instead of nine: the codes
// of nibbles 0..3 (register 0's) sit at their operand bits (byte j: sign at bit 7, exponent at 4..3,
// mantissa at 2), those of nibbles 4..7 (register 1's) in the bits left over, where a left
// rotation by 2 (sign, low exponent bit) or by 4 (high exponent bit, mantissa) moves them to their
// operand bits (fp4_bit; tools/e2m1_a8_layout.py checks the order on random words).
#pragma once

#include <cstdint>

#include "humming/format/dtype.h"

namespace humming {
namespace layout_sm90_a8 {

constexpr int64_t kChunkK = 128; // inputs per reordered chunk: one stage of the kernels
constexpr int64_t kAlignK = kChunkK;
constexpr int64_t kAlignN = 8;

HUMMING_HD constexpr bool supports_bits(int bits) { return bits == 4; }

// Whether codes of type `code` take the spread bit order (e2m1) rather than a nibble each.
HUMMING_HD constexpr bool fp4_order(DType code) { return code.kind == kFloat && code.bits == 4; }

// Bit of the word that holds bit b (0 mantissa, 1 and 2 exponent, 3 sign) of the e2m1 code at
// nibble i (0..7) in the spread order.
HUMMING_HD constexpr int fp4_bit(int i, int b) {
  constexpr int kOperandBit[4] = {2, 3, 4, 7}; // register 0: byte i, at the operand bits
  if (i < 4) return 8 * i + kOperandBit[b];
  const int j = i - 4; // register 1's byte j: sign and e0 two bits below, e1 and m four below
  constexpr int kRotation[4] = {4, 2, 4, 2};
  return (8 * j + kOperandBit[b] - kRotation[b] + 32) % 32;
}

// Word w of a channel's k_pad / 8 that holds input k (word w % 16 of the channel's chunk w / 16),
// and the nibble of it.
HUMMING_HD constexpr int64_t word_of(int64_t k) {
  const int kk = static_cast<int>(k % kChunkK);
  return (k / kChunkK) * 16 + 4 * ((kk % 16) / 4) + kk / 32;
}
HUMMING_HD constexpr int nibble_of(int64_t k) {
  const int r = static_cast<int>(k % 32);
  return 4 * (r / 16) + r % 4;
}

constexpr int64_t kChunkWords = kChunkK / 8; // 16 words, 64 bytes

// Chunks of each channel, for a weight of k_pad inputs: the 64-byte rows a kernel's map reads.
HUMMING_HD constexpr int64_t chunks_per_channel(int64_t k_pad) { return k_pad / kChunkK; }

// Index in the packed codes of word w (word_of) of channel r, for a weight of n_pad channels.
HUMMING_HD constexpr int64_t word_index(int64_t n_pad, int64_t r, int64_t w) {
  return ((w / kChunkWords) * n_pad + r) * kChunkWords + w % kChunkWords;
}
// Its inverse: the channel (r) and word (w) that packed word i holds.
HUMMING_HD constexpr void word_place(int64_t n_pad, int64_t i, int64_t &r, int64_t &w) {
  const int64_t c = i / kChunkWords;
  r = c % n_pad;
  w = (c / n_pad) * kChunkWords + i % kChunkWords;
}

// Code k of channel r of packed codes of n_pad channels (fp4: in the spread order, fp4_order).
HUMMING_HD uint32_t code_at(const uint32_t *packed, int64_t n_pad, int64_t r, int64_t k, bool fp4) {
  const uint32_t word = packed[word_index(n_pad, r, word_of(k))];
  const int i = nibble_of(k);
  if (!fp4) return (word >> (4 * i)) & 0xFu;
  uint32_t code = 0;
  for (int b = 0; b < 4; ++b) code |= ((word >> fp4_bit(i, b)) & 1u) << b;
  return code;
}

// Word `w` (word_of) of a channel from its unpacked codes (uint8 bit patterns, `k` of them; inputs past `k`
// are padding and pack as 0); fp4: in the spread order (fp4_order).
HUMMING_HD uint32_t pack_word(const uint8_t *codes_row, int64_t k, int64_t w, bool fp4) {
  const int64_t chunk = w / 16;
  const int q = static_cast<int>(w % 16) / 4, s = static_cast<int>(w % 4);
  uint32_t word = 0;
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j) {
      const int64_t kk = chunk * kChunkK + 32 * s + 16 * h + 4 * q + j;
      if (kk >= k) continue;
      const uint32_t code = codes_row[kk] & 0xFu;
      const int i = 4 * h + j;
      if (!fp4)
        word |= code << (4 * i);
      else
        for (int b = 0; b < 4; ++b) word |= ((code >> b) & 1u) << fp4_bit(i, b);
    }
  return word;
}

} // namespace layout_sm90_a8
} // namespace humming
