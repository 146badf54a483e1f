// 4-bit weight codes in shared memory -> the register A fragments of the FP8 / integer WGMMAs
// (m64nNk32, 8-bit operands), for the sm90 8-bit activation kernel's W4A8 path.
//
// The codes of a stage land by TMA in the generic layout, one 64-byte row (128 codes, code k at bits
// 4 (k % 8) of word k / 8) per channel, in the 64-byte swizzle: 16-byte unit u of row r sits at unit
// u ^ ((r / 2) % 4) (rows relative to a 512-byte aligned box).
//
// The A fragment of a k32 step (PTX ISA, wgmma register fragments; CUTLASS's ALayout_64x32): thread
// t (warp w, lane l) holds four registers of four operand bytes each, register r covering channel
// 16 w + l / 4 + 8 (r % 2) and inputs 4 (l % 4) + 16 (r / 2) + {0 .. 3} of the step. In a row of
// codes, four consecutive inputs are one 16-bit word, so a thread reads words q and q + 4 (q = l % 4)
// of each step's 16-byte unit: the swizzle spreads the eight rows a warp reads at once over distinct
// banks, and no two lanes read different words of one bank.
#pragma once

#include <cstdint>

#include "humming/format/dtype.h"
#include "humming/humming.h"
#include "humming/numeric/nibble_lut.h"

namespace humming {
namespace sm90 {

// Four words moved as one 16-byte shared-memory access.
struct alignas(16) Words4 {
  uint32_t w[4];
};

// Thread t of the warpgroup whose 64 rows start at row `row0` (a multiple of 16) of the codes' box
// `codes`: its A fragments of the stage's four k32 steps, af[step][r], each word of eight codes
// turned into two fragment registers by `convert(word, lo, hi)` (numeric/nibble_lut.h: a lookup,
// or e2m1's bit moves). Sixteen 2-byte loads and eight conversions of eight codes; nothing is
// stored, so the operands need no proxy fence or barrier before the WGMMAs read them. (Host code
// runs it too: tests/cpp checks the fragments against the WGMMA layout.)
template <typename Convert>
HUMMING_HD void nibble_fragments(const char *codes, int row0, int t, const Convert &convert, uint32_t (&af)[4][4]) {
  const int lane = t % 32, q = lane % 4;
  const int row = row0 + 16 * (t / 32) + lane / 4;
  // (row / 2) % 4, the same for row + 8.
  const int x = (row >> 1) & 3;
  uint32_t w[2][4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const auto *r = reinterpret_cast<const uint16_t *>(codes + (row + 8 * h) * 64);
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const uint16_t *unit = r + 8 * (s ^ x);
      // Inputs 4q .. 4q + 3 of step s in the low half, 16 + 4q .. 16 + 4q + 3 in the high half.
      w[h][s] = static_cast<uint32_t>(unit[q]) | (static_cast<uint32_t>(unit[q + 4]) << 16);
    }
  }
#pragma unroll
  for (int s = 0; s < 4; ++s)
#pragma unroll
    for (int h = 0; h < 2; ++h) convert(w[h][s], af[s][h], af[s][2 + h]);
}

// The same fragments from a box of codes in layout 4 (layout/sm90_a8.h), which orders each row's
// 128 codes of a stage so that lane quad q's eight words (the words `w` above, in the same bit
// order) are its 16-byte unit q: two 16-byte loads (one per row) instead of sixteen 2-byte loads
// and eight permutes. The eight lanes of a quarter warp read two rows' four units each, 128
// distinct bytes: no bank conflicts, whatever the swizzle.
template <typename Convert>
HUMMING_HD void chunk_fragments(const char *codes, int row0, int t, const Convert &convert, uint32_t (&af)[4][4]) {
  const int lane = t % 32, q = lane % 4;
  const int row = row0 + 16 * (t / 32) + lane / 4;
  const int x = (row >> 1) & 3; // the same for row + 8
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const Words4 unit = *reinterpret_cast<const Words4 *>(codes + (row + 8 * h) * 64 + 16 * (q ^ x));
#pragma unroll
    for (int s = 0; s < 4; ++s) convert(unit.w[s], af[s][h], af[s][2 + h]);
  }
}

// The fragments of a stage's box of 4-bit codes in the weight's layout (Layout: kLayoutSm90A8 reads
// chunk_fragments, the generic layout nibble_fragments).
template <int Layout, typename Convert>
HUMMING_HD void layout_fragments(const char *codes, int row0, int t, const Convert &convert, uint32_t (&af)[4][4]) {
  if constexpr (Layout == kLayoutSm90A8)
    chunk_fragments(codes, row0, t, convert, af);
  else
    nibble_fragments(codes, row0, t, convert, af);
}

} // namespace sm90
} // namespace humming
