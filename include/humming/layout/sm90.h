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

struct Position {
  int64_t word; // uint32 index into the packed codes
  int bit;      // bit offset of the code inside that word
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
  return Position{word, bits * (pair % ppw + h * ppw)};
}

// Word `w` of the packed codes from unpacked codes (uint8 bit patterns [n][k]; channels and inputs
// past n, k are padding and pack as 0).
HUMMING_HD uint32_t pack_word(const uint8_t *codes, int64_t n, int64_t k, int bits, int64_t n_blocks, int64_t w) {
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
      if (nn < n && kk < k) word |= (codes[nn * k + kk] & mask) << (bits * (p + h * ppw));
    }
  }
  return word;
}

HUMMING_HD uint32_t code_at(const uint32_t *packed, int64_t n, int64_t k, int bits, int64_t n_blocks) {
  const Position pos = position(n, k, bits, n_blocks);
  return (packed[pos.word] >> pos.bit) & ((1u << bits) - 1u);
}

} // namespace layout_sm90
} // namespace humming
