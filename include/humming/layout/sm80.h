// The sm80 packed layout (LayoutId kLayoutSm80): codes arranged so that one lane of a warp loads,
// with one vector load, the mma.sync m16n8k16 B fragments of a 16 (K) x 64 (N) block.
//
// The weight is cut into blocks of 16 inputs x 64 output channels, stored block column by block
// column: block (nb, kb) starts at word (nb * k_blocks + kb) * words_per_block. Inside a block,
// lane l owns words_per_lane consecutive words (16 bytes for 4-bit codes, 32 for 8-bit) holding the
// 16 register pairs of its B fragments: pair P covers channel n = 8 * (P / 2) + l / 4 and inputs
// k = 2 * (l % 4) + 8 * (P % 2) + {0, 1}. Pair P lives in word P / pairs_per_word at position
// p = P % pairs_per_word: its first element at bit bits * p, its second at bit
// bits * (p + pairs_per_word), so masking a word with 0x000F000F (0x00FF00FF for bytes) after a
// shift of bits * p yields both halves of one register pair at once.
#pragma once

#include <cstdint>

#include "humming/format/dtype.h"

namespace humming {
namespace layout_sm80 {

constexpr int64_t kBlockK = 16;
constexpr int64_t kBlockN = 64;
// Padding: K to whole blocks of the widest stage the kernels read, N to whole blocks.
constexpr int64_t kAlignK = 64;
constexpr int64_t kAlignN = 64;

HUMMING_HD constexpr bool supports_bits(int bits) { return bits == 4 || bits == 8; }
HUMMING_HD constexpr int words_per_lane(int bits) { return bits; } // 32 codes of `bits` bits per lane
HUMMING_HD constexpr int words_per_block(int bits) { return 32 * words_per_lane(bits); }
HUMMING_HD constexpr int pairs_per_word(int bits) { return 16 / bits; }

#if defined(__CUDACC__)
// A lane's `Bits` words of a block from shared memory, `first` its first word's index from `base`
// (block * words_per_block + lane * words_per_lane): they are consecutive, one 16-byte load per 4
// bits of code width.
template <int Bits> __device__ __forceinline__ void load_lane_words(const char *base, int first, uint32_t (&w)[Bits]) {
  const char *mine = base + first * 4;
#pragma unroll
  for (int v = 0; v < Bits / 4; ++v) {
    const uint4 q = *reinterpret_cast<const uint4 *>(mine + 16 * v);
    w[4 * v] = q.x, w[4 * v + 1] = q.y, w[4 * v + 2] = q.z, w[4 * v + 3] = q.w;
  }
}
#endif

struct Position {
  int64_t word; // uint32 index into the packed codes
  int bit;      // bit offset of the code inside that word
};

// Where code (n, k) is stored; k_blocks = k_pad / 16.
HUMMING_HD Position position(int64_t n, int64_t k, int bits, int64_t k_blocks) {
  const int64_t nb = n / kBlockN, kb = k / kBlockK;
  const int nn = static_cast<int>(n % kBlockN), kk = static_cast<int>(k % kBlockK);
  const int j = nn / 8, r = kk / 8, t = (kk % 8) / 2, h = kk % 2;
  const int lane = (nn % 8) * 4 + t;
  const int pair = 2 * j + r;
  const int ppw = pairs_per_word(bits);
  const int64_t word = (nb * k_blocks + kb) * words_per_block(bits) + lane * words_per_lane(bits) + pair / ppw;
  return Position{word, bits * (pair % ppw + h * ppw)};
}

// Word `w` of the packed codes from unpacked codes (uint8 bit patterns [n][k]; channels and inputs
// past n, k are padding and pack as 0).
HUMMING_HD uint32_t pack_word(const uint8_t *codes, int64_t n, int64_t k, int bits, int64_t k_blocks, int64_t w) {
  const int wpb = words_per_block(bits), wpl = words_per_lane(bits), ppw = pairs_per_word(bits);
  const int64_t block = w / wpb;
  const int in_block = static_cast<int>(w % wpb);
  const int lane = in_block / wpl, word_in_lane = in_block % wpl;
  const int64_t nb = block / k_blocks, kb = block % k_blocks;
  const uint32_t mask = (1u << bits) - 1u;
  uint32_t word = 0;
  for (int p = 0; p < ppw; ++p) {
    const int pair = word_in_lane * ppw + p;
    const int j = pair / 2, r = pair % 2;
    const int64_t nn = nb * kBlockN + j * 8 + lane / 4;
    for (int h = 0; h < 2; ++h) {
      const int64_t kk = kb * kBlockK + 2 * (lane % 4) + 8 * r + h;
      if (nn < n && kk < k) word |= (codes[nn * k + kk] & mask) << (bits * (p + h * ppw));
    }
  }
  return word;
}

HUMMING_HD uint32_t code_at(const uint32_t *packed, int64_t n, int64_t k, int bits, int64_t k_blocks) {
  const Position pos = position(n, k, bits, k_blocks);
  return (packed[pos.word] >> pos.bit) & ((1u << bits) - 1u);
}

} // namespace layout_sm80
} // namespace humming
