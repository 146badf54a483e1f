// The sm90 packed layout (LayoutId kLayoutSm90): codes arranged so that each thread of a
// warpgroup loads the WGMMA register A fragments of a 64 (N) x 64 (K) block with one 16-byte
// load per 4 bits of code width (one for 4-bit codes, two for 8-bit ones).
//
// The weight is cut into blocks of 64 output channels x 64 inputs, stored K-block major: block
// (kb, nb) starts at word (kb * n_blocks + nb) * words_per_block, so the blocks of consecutive
// channels at one K block are adjacent and a stage of a tile copies them in one bulk copy.
// Inside a block, thread t of the warpgroup (warp w = t / 32, lane l) owns `bits` words; its word
// j sits at word (j / 4) * 512 + 4 * t + j % 4 of the block (16-byte slices of consecutive threads
// are adjacent, so the loads do not conflict in shared memory). Word j holds the register pairs
// P = j * pairs_per_word + p (p < pairs_per_word = 16 / bits) of the thread's fragments: pair P is
// register r = P % 4 of K step s = P / 4 (16 inputs each), which covers channel
// 16 w + l / 4 + 8 (r % 2) and inputs 16 s + 2 (l % 4) + 8 (r / 2) + {0, 1}. Its first element sits
// at bit bits * p, its second at bit bits * (p + pairs_per_word): the same pairing as layout 2, so
// the same shift-and-mask turns a word into register pairs (numeric/fast_dequant.h).
//
// e2m1 (FP4) codes spread their four bits over the word instead (fp4_bit), so that the kernels make
// each pair's operand bits with one byte permute and one AND, after three rotations of the word that
// its four pairs share (numeric/nibble_lut.h e2m1_operand_bits): 2.75 integer instructions a pair,
// where contiguous nibbles took five (H100, session 39: dense e2m1 GEMMs 6 % faster in geometric
// mean over 20 points, up to 11 %; 1.08x u4g128's time, about their bytes' ratio). Pairs
// 0 and 1 keep code p + 4h in byte j = 2p + h with its mantissa and low exponent bit at bits 6, 7 of
// the byte, its high exponent bit at bit 1 and its sign at bit 0 of the next byte; pairs 2 and 3 in
// byte j = 2 (p - 2) + h with those bits at 2, 3, 5 and bit 4 of the next byte. Weights packed with
// nibbles (packed-checkpoint schema 1) are refused by the loader (packed_checkpoint.py).
#pragma once

#include <cstdint>

#include "humming/format/dtype.h"

namespace humming {
namespace layout_sm90 {

constexpr int64_t kBlockK = 64;
constexpr int64_t kBlockN = 64;
// K pads to 128 so that stages of two 64-input blocks never reach past the packed codes (a stage
// that did would compute on whatever shared memory held, which may not be finite).
constexpr int64_t kAlignK = 128;
constexpr int64_t kAlignN = 64;
constexpr int kThreads = 128; // one warpgroup

HUMMING_HD constexpr bool supports_bits(int bits) { return bits == 4 || bits == 8; }
HUMMING_HD constexpr int words_per_thread(int bits) { return bits; } // 32 codes of `bits` bits
HUMMING_HD constexpr int words_per_block(int bits) { return kThreads * words_per_thread(bits); }
HUMMING_HD constexpr int pairs_per_word(int bits) { return 16 / bits; }

// Word of the block where thread t keeps its word j.
HUMMING_HD constexpr int word_in_block(int t, int j) { return (j / 4) * (4 * kThreads) + 4 * t + j % 4; }

#if defined(__CUDACC__)
// Thread t's `Bits` words of one block, from the block's copy in shared memory, as 16-byte loads
// (adjacent threads' slices are adjacent: no bank conflicts).
template <int Bits>
__device__ __forceinline__ void load_thread_words(const uint32_t *block, int t, uint32_t (&w)[Bits]) {
#pragma unroll
  for (int v = 0; v < Bits / 4; ++v) {
    const uint4 q = *reinterpret_cast<const uint4 *>(block + word_in_block(t, 4 * v));
    w[4 * v] = q.x, w[4 * v + 1] = q.y, w[4 * v + 2] = q.z, w[4 * v + 3] = q.w;
  }
}
#endif

// Whether codes of type `code` use the spread FP4 bit order (e2m1 only: the other float and integer
// codes keep contiguous fields).
HUMMING_HD constexpr bool spread_fp4(DType code) { return code.kind == kFloat && code.bits == 4; }

// Bit of the word that holds bit b (0 mantissa, 1 and 2 exponent, 3 sign) of the e2m1 code of pair
// slot p (0..3), element h (0 first, 1 second), in the spread order.
HUMMING_HD constexpr int fp4_bit(int p, int h, int b) {
  // Offsets in the code's byte of mantissa, exponent 0, exponent 1 and sign (the sign's past the byte).
  constexpr int kLow[4] = {6, 7, 1, 8}, kHigh[4] = {2, 3, 5, 12};
  return (8 * (2 * (p % 2) + h) + (p < 2 ? kLow[b] : kHigh[b])) % 32;
}

// `code` (bits wide) put into its place for pair slot p, element h of a word.
HUMMING_HD uint32_t place_code(uint32_t code, int p, int h, int bits, bool spread) {
  if (!spread) return code << (bits * (p + h * pairs_per_word(bits)));
  uint32_t w = 0;
  for (int b = 0; b < 4; ++b) w |= ((code >> b) & 1u) << fp4_bit(p, h, b);
  return w;
}

// The code of pair slot p, element h of `word`.
HUMMING_HD uint32_t take_code(uint32_t word, int p, int h, int bits, bool spread) {
  if (!spread) return (word >> (bits * (p + h * pairs_per_word(bits)))) & ((1u << bits) - 1u);
  uint32_t c = 0;
  for (int b = 0; b < 4; ++b) c |= ((word >> fp4_bit(p, h, b)) & 1u) << b;
  return c;
}

struct Position {
  int64_t word; // uint32 index into the packed codes
  int pair;     // pair slot (0 .. pairs_per_word - 1) of the code inside that word
  int half;     // 0 for the pair's first element (even input), 1 for its second
};

// Where code (n, k) is stored; n_blocks = n_pad / 64.
HUMMING_HD Position position(int64_t n, int64_t k, int bits, int64_t n_blocks) {
  const int64_t nb = n / kBlockN, kb = k / kBlockK;
  const int nn = static_cast<int>(n % kBlockN), kk = static_cast<int>(k % kBlockK);
  const int w = nn / 16, g = nn % 8, hi_row = (nn % 16) / 8;
  const int s = kk / 16, q = (kk % 8) / 2, hi_k = (kk % 16) / 8, h = kk % 2;
  const int t = w * 32 + g * 4 + q;
  const int pair = s * 4 + hi_k * 2 + hi_row;
  const int ppw = pairs_per_word(bits);
  const int64_t word = (kb * n_blocks + nb) * words_per_block(bits) + word_in_block(t, pair / ppw);
  return Position{word, pair % ppw, h};
}

// Word `w` of the packed codes from unpacked codes (uint8 bit patterns [n][k]; channels and inputs
// past n, k are padding and pack as 0); `spread`: spread_fp4 of the code type.
HUMMING_HD uint32_t pack_word(const uint8_t *codes, int64_t n, int64_t k, int bits, int64_t n_blocks, int64_t w,
                              bool spread) {
  const int wpb = words_per_block(bits), ppw = pairs_per_word(bits);
  const int64_t block = w / wpb;
  const int in_block = static_cast<int>(w % wpb);
  // Invert word_in_block: plane j / 4, then thread and word within the plane.
  const int plane = in_block / (4 * kThreads), t = (in_block % (4 * kThreads)) / 4;
  const int j = plane * 4 + in_block % 4;
  const int64_t kb = block / n_blocks, nb = block % n_blocks;
  const int warp = t / 32, lane = t % 32;
  const uint32_t mask = (1u << bits) - 1u;
  uint32_t word = 0;
  for (int p = 0; p < ppw; ++p) {
    const int pair = j * ppw + p;
    const int s = pair / 4, r = pair % 4;
    const int64_t nn = nb * kBlockN + warp * 16 + lane / 4 + 8 * (r % 2);
    for (int h = 0; h < 2; ++h) {
      const int64_t kk = kb * kBlockK + s * 16 + 2 * (lane % 4) + 8 * (r / 2) + h;
      if (nn < n && kk < k) word |= place_code(codes[nn * k + kk] & mask, p, h, bits, spread);
    }
  }
  return word;
}

HUMMING_HD uint32_t code_at(const uint32_t *packed, int64_t n, int64_t k, int bits, int64_t n_blocks, bool spread) {
  const Position pos = position(n, k, bits, n_blocks);
  return take_code(packed[pos.word], pos.pair, pos.half, bits, spread);
}

} // namespace layout_sm90
} // namespace humming
