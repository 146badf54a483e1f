// The generic packed layout (LayoutId kLayoutGeneric).
//
// Codes of one output channel form a little-endian bit stream: code k sits at bits
// [k * bits, (k + 1) * bits) of that channel's row of uint32 words. Rows are k_pad codes long and
// k_pad is a multiple of 32, so every row is a whole number of words for any width from 1 to 8
// bits; codes of 3, 5, 6 or 7 bits may straddle two words. The CPU reference, the pack/unpack code
// on both sides and the generic backend all go through these functions, so there is one copy of the
// index math.
#pragma once

#include <cstdint>

#include "humming/format/dtype.h"

namespace humming {
namespace layout_generic {

// Padding the layout asks for: K to whole words for any code width, N to a multiple of 8.
constexpr int64_t kAlignK = 32;
constexpr int64_t kAlignN = 8;

HUMMING_HD int64_t words_per_row(int64_t k_pad, int bits) { return k_pad * bits / 32; }

// Code k of the row that starts at `row` (low `bits` bits of the result).
HUMMING_HD uint32_t code_at(const uint32_t *row, int64_t k, int bits) {
  const int64_t bit = k * bits;
  const int64_t w = bit >> 5;
  const int shift = static_cast<int>(bit & 31);
  uint32_t v = row[w] >> shift;
  if (shift + bits > 32) v |= row[w + 1] << (32 - shift);
  return v & ((1u << bits) - 1u);
}

// Word `w` of a packed row from unpacked codes (uint8 bit patterns, `k` of them; codes past `k`
// are padding and packed as 0).
HUMMING_HD uint32_t pack_word(const uint8_t *codes_row, int64_t k, int bits, int64_t w) {
  const uint32_t mask = (1u << bits) - 1u;
  const int64_t first_bit = w * 32;
  const int64_t k_begin = first_bit / bits;
  const int64_t k_end = (first_bit + 32 + bits - 1) / bits; // exclusive; covers a straddling code
  uint32_t word = 0;
  for (int64_t kk = k_begin; kk < k_end; ++kk) {
    if (kk >= k) break;
    const int64_t offset = kk * bits - first_bit; // may be negative for a code that started before
    const uint32_t c = codes_row[kk] & mask;
    if (offset >= 0)
      word |= c << offset;
    else
      word |= c >> (-offset);
  }
  return word;
}

} // namespace layout_generic

// Scales and zero points of every layout: element (kg, ng) of the packed [k_groups][n_groups]
// grid, taken from the logical [n_groups_logical][k_groups_logical] grid (0 outside it).
// Returns the index into the logical grid, or -1 for padding.
HUMMING_HD int64_t group_source_index(int64_t kg, int64_t ng, int64_t k_groups_logical, int64_t n_groups_logical) {
  if (kg >= k_groups_logical || ng >= n_groups_logical) return -1;
  return ng * k_groups_logical + kg;
}

HUMMING_HD void copy_element(const void *src, int64_t si, void *dst, int64_t di, int bytes) {
  auto *d = static_cast<uint8_t *>(dst) + di * bytes;
  if (si < 0) {
    for (int b = 0; b < bytes; ++b) d[b] = 0;
    return;
  }
  const auto *s = static_cast<const uint8_t *>(src) + si * bytes;
  for (int b = 0; b < bytes; ++b) d[b] = s[b];
}

} // namespace humming
