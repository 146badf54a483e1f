// 4-bit weight codes in shared memory -> the register A fragments of the FP8 / integer WGMMAs
// (m64nNk32, 8-bit operands), for the sm90 8-bit activation kernel's W4A8 path.
//
// The codes of a stage land by TMA in the generic layout, one 64-byte row (128 codes, code k at bits
// 4 (k % 8) of word k / 8) per channel, in the 64-byte swizzle: 16-byte unit u of row r sits at unit
// u ^ ((r / 2) % 4) (rows relative to a 512-byte aligned box).

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

// A thread's 4-bit codes of one stage, read from the stage's box before they are turned into its
// A fragments: load() reads them, to_fragments() converts them. Split so that a main loop can read
// the next stage's codes while it converts this one's (the loads' latency then hides behind the
// conversion instead of standing between a stage's barrier and its WGMMAs). Layout: kLayoutSm90A8
// (layout 4) or the generic layout, below.
template <int Layout> struct FragmentCodes;

// The generic layout. The A fragment of a k32 step (PTX ISA, wgmma register fragments; CUTLASS's
// ALayout_64x32): thread t (warp w, lane l) holds four registers of four operand bytes each,
// register r covering channel 16 w + l / 4 + 8 (r % 2) and inputs 4 (l % 4) + 16 (r / 2) + {0 .. 3}
// of the step. In a row of codes, four consecutive inputs are one 16-bit word, so a thread reads
// words q and q + 4 (q = l % 4) of each step's 16-byte unit: the swizzle spreads the eight rows a
// warp reads at once over distinct banks, and no two lanes read different words of one bank.
// Sixteen 2-byte loads, kept as loaded: merging a pair into one word of eight codes waits for the
// loads, so it belongs to the conversion.
template <> struct FragmentCodes<kLayoutGeneric> {
  uint32_t lo[2][4], hi[2][4]; // [row h][step s]: inputs 4q .. 4q + 3, and 16 + 4q .. 16 + 4q + 3

  // Thread t of the warpgroup whose 64 rows start at row `row0` (a multiple of 16) of `codes`.
  HUMMING_HD void load(const char *codes, int row0, int t) {
    const int lane = t % 32, q = lane % 4;
    const int row = row0 + 16 * (t / 32) + lane / 4;
    const int x = (row >> 1) & 3; // (row / 2) % 4, the same for row + 8
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const auto *r = reinterpret_cast<const uint16_t *>(codes + (row + 8 * h) * 64);
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const uint16_t *unit = r + 8 * (s ^ x);
        lo[h][s] = unit[q];
        hi[h][s] = unit[q + 4];
      }
    }
  }

  // af[step][r] from the codes, each word of eight codes turned into two fragment registers by
  // `convert(word, lo, hi)` (numeric/nibble_lut.h: a lookup, or e2m1's bit moves).
  template <typename Convert> HUMMING_HD void to_fragments(const Convert &convert, uint32_t (&af)[4][4]) const {
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
      for (int h = 0; h < 2; ++h) convert(lo[h][s] | (hi[h][s] << 16), af[s][h], af[s][2 + h]);
  }
};

// Layout 4 (layout/sm90_a8.h) orders each row's 128 codes of a stage so that lane quad q's eight
// words (the words of the generic layout's pairs, in the same bit order) are its 16-byte unit q: two
// 16-byte loads (one per row) instead of sixteen 2-byte loads and eight merges. The eight lanes of
// a quarter warp read two rows' four units each, 128 distinct bytes: no bank conflicts, whatever
// the swizzle.
template <> struct FragmentCodes<kLayoutSm90A8> {
  Words4 unit[2]; // [row h]: word s holds step s's codes

  HUMMING_HD void load(const char *codes, int row0, int t) {
    const int lane = t % 32, q = lane % 4;
    const int row = row0 + 16 * (t / 32) + lane / 4;
    const int x = (row >> 1) & 3; // the same for row + 8
#pragma unroll
    for (int h = 0; h < 2; ++h) unit[h] = *reinterpret_cast<const Words4 *>(codes + (row + 8 * h) * 64 + 16 * (q ^ x));
  }

  template <typename Convert> HUMMING_HD void to_fragments(const Convert &convert, uint32_t (&af)[4][4]) const {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int s = 0; s < 4; ++s) convert(unit[h].w[s], af[s][h], af[s][2 + h]);
  }
};

// Thread t's A fragments of the stage's four k32 steps, af[step][r], from the box of codes `codes`
// whose warpgroup's 64 rows start at row `row0`: read and converted at once. Nothing is stored, so
// the operands need no proxy fence or barrier before the WGMMAs read them. (Host code runs these
// too: tests/cpp checks the fragments against the WGMMA layout.)
template <int Layout, typename Convert>
HUMMING_HD void layout_fragments(const char *codes, int row0, int t, const Convert &convert, uint32_t (&af)[4][4]) {
  FragmentCodes<Layout> c;
  c.load(codes, row0, t);
  c.to_fragments(convert, af);
}

} // namespace sm90
} // namespace humming
