// 4-bit weight codes -> 8-bit tensor-core operands (e4m3 for the FP8 tensor cores, s8 for the
// integer ones) by table lookup in registers, with no per-element branch or conversion.
//
// Every 4-bit code this backend takes has a value that is exact in the 8-bit operand: u4 (symmetric
// around 8: -8..7), i4 (-8..7) and e2m1 (0, +-0.5 .. +-6) are all small multiples of 0.5 with at
// most four significant bits, which e4m3 holds exactly; the integers are exact in s8 as well. So a
// weight's scales stay out of the operands (they multiply the fp32 sums), and the FP8 product of a
// converted code and an activation is exact.
//
// The lookup is PRMT: it picks bytes out of two 32-bit registers (an 8-entry byte table) with one
// 4-bit selector per output byte. A selector's top bit does not index (it asks for the picked byte's
// sign replicated instead), so a 16-entry table is two 8-entry ones indexed by the low three bits of
// each code, and the code's top bit chooses between them through a byte mask, itself made by PRMT's
// sign replication from the top bits moved to the top of their bytes. Eight codes (one word of the
// generic layout: code i at bits 4i .. 4i + 3) become two words of eight bytes in 12 integer
// instructions.
#pragma once

#include <cstdint>

#include "humming/format/dtype.h"

namespace humming {
namespace numeric {

// e4m3 bits of h / 2 (|h| <= 16, with at most four significant bits: exact in e4m3).
HUMMING_HD constexpr uint32_t e4m3_of_halves(int h) {
  const uint32_t sign = h < 0 ? 0x80u : 0u;
  const int a = h < 0 ? -h : h;
  if (a == 0) return sign;
  int e = 0; // floor(log2(a))
  while ((a >> (e + 1)) != 0) ++e;
  // a = 2^e (1 + m / 8) half units, so the value's exponent is e - 1, its field e - 1 + 7.
  return sign | (static_cast<uint32_t>(e + 6) << 3) | (static_cast<uint32_t>((a << 3) >> e) & 7u);
}

// Value of 4-bit code c of type `code`, in units of 0.5: u4 is symmetric around 8 (the format's
// implied zero point), i4 two's complement, e2m1 the OCP FP4 values.
HUMMING_HD constexpr int nibble_halves(DType code, uint32_t c) {
  if (code.kind == kUInt) return 2 * (static_cast<int>(c) - 8);
  if (code.kind == kInt) return 2 * (c < 8 ? static_cast<int>(c) : static_cast<int>(c) - 16);
  // e2m1: exponent bits 2..1 (bias 1), mantissa bit 0; the subnormal 0.5 has exponent 0.
  const int mag[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  return (c & 8u) ? -mag[c & 7u] : mag[c & 7u];
}

// Byte of the operand for code c: e4m3 bits (Int false) or the s8 value (Int true, integer codes).
HUMMING_HD constexpr uint32_t nibble_operand(DType code, bool is_int, uint32_t c) {
  const int h = nibble_halves(code, c);
  return is_int ? static_cast<uint32_t>(static_cast<uint8_t>(static_cast<int8_t>(h / 2))) : e4m3_of_halves(h);
}

// The 16 operand bytes of a code type as four PRMT table words: lo[] for codes 0..7, hi[] for
// codes 8..15, byte j of word i holding entry 4i + j.
struct NibbleTable {
  uint32_t lo[2], hi[2];
};

HUMMING_HD constexpr NibbleTable nibble_table(DType code, bool is_int) {
  NibbleTable t{{0u, 0u}, {0u, 0u}};
  for (uint32_t c = 0; c < 8; ++c) {
    t.lo[c / 4] |= nibble_operand(code, is_int, c) << (8 * (c % 4));
    t.hi[c / 4] |= nibble_operand(code, is_int, c + 8) << (8 * (c % 4));
  }
  return t;
}

// PRMT (default mode): byte j of the result is byte s_j & 7 of {b, a} (a = bytes 0..3), or that
// byte's top bit replicated where s_j's top bit is set (s_j: bits 4j .. 4j + 3 of s).
HUMMING_HD uint32_t prmt(uint32_t a, uint32_t b, uint32_t s) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(s));
  return d;
#else
  const uint64_t bytes = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t d = 0;
  for (int j = 0; j < 4; ++j) {
    const uint32_t sel = (s >> (4 * j)) & 0xFu;
    uint32_t v = static_cast<uint32_t>(bytes >> (8 * (sel & 7u))) & 0xFFu;
    if (sel & 8u) v = (v & 0x80u) ? 0xFFu : 0u;
    d |= v << (8 * j);
  }
  return d;
#endif
}

// The eight codes of `w` (code i at bits 4i .. 4i + 3) as operand bytes: out0 holds codes 0..3,
// out1 codes 4..7 (byte j of out0 is code j's operand).
HUMMING_HD void nibbles_to_bytes(uint32_t w, const NibbleTable &t, uint32_t &out0, uint32_t &out1) {
  const uint32_t sel = w & 0x77777777u; // table indices; PRMT reads the low 16 bits
  const uint32_t w4 = w << 4;
  // Byte masks of the codes' top bits (bit 4i + 3): codes 0, 2 find theirs at the top of bytes 0, 1
  // of w << 4, codes 1, 3 at the top of bytes 0, 1 of w; codes 4..7 in bytes 2, 3 alike.
  const uint32_t m0 = prmt(w4, w, 0xD9C8u), m1 = prmt(w4, w, 0xFBEAu);
  out0 = (prmt(t.lo[0], t.lo[1], sel) & ~m0) | (prmt(t.hi[0], t.hi[1], sel) & m0);
  out1 = (prmt(t.lo[0], t.lo[1], sel >> 16) & ~m1) | (prmt(t.hi[0], t.hi[1], sel >> 16) & m1);
}

// e2m1 codes by bit moves instead of a lookup. An e2m1 code (sign bit 3, exponent bits 2..1 with
// bias 1, mantissa bit 0) put into an e4m3 byte with its exponent and mantissa at bits 4..2 and its
// sign at bit 7 is the e4m3 code of exactly 2^-6 times its value: a normal code 2^(e - 1) (1 + m / 2)
// becomes 2^(e - 7) (1 + 4m / 8), the subnormal 0.5 becomes e4m3's subnormal 2^-6 x 4 / 8. So a
// kernel that converts this way multiplies its sums by kE2m1ShiftScale (a power of two: exact, as is
// every FP8 product of a shifted code and an activation, the smallest being 2^-9 x 2^-7).
constexpr float kE2m1ShiftScale = 64.0f;

// The eight e2m1 codes of `w` (code i at bits 4i .. 4i + 3) as e4m3 operand bytes of 2^-6 their
// values, in the places of nibbles_to_bytes (byte j of out0 is code j's, of out1 code 4 + j's): the
// even codes' bytes in place, the odd ones' shifted down a nibble, interleaved by two PRMTs. Seven
// integer instructions, against 12 for the lookup.
HUMMING_HD void e2m1_to_shifted_e4m3(uint32_t w, uint32_t &out0, uint32_t &out1) {
  const uint32_t even = ((w << 2) & 0x1C1C1C1Cu) | ((w << 4) & 0x80808080u); // byte j: code 2j
  const uint32_t odd = ((w >> 2) & 0x1C1C1C1Cu) | (w & 0x80808080u);         // byte j: code 2j + 1
  out0 = prmt(even, odd, 0x5140u);
  out1 = prmt(even, odd, 0x7362u);
}

// A left rotation of `w` by `s` (0 < s < 32): one funnel shift on the GPU.
HUMMING_HD constexpr uint32_t rotate_left(uint32_t w, int s) { return (w << s) | (w >> (32 - s)); }

// The same operand bytes as e2m1_to_shifted_e4m3 from a word of layout 4's spread order
// (layout/sm90_a8.h fp4_order, fp4_bit): out0's codes are at their operand bits already, out1's
// two bits left of theirs (sign, low exponent bit) or four (high exponent bit, mantissa; the
// rotation carries the last byte's mantissa bit into the first). Five integer instructions: one AND,
// two funnel shifts and two LOP3.
HUMMING_HD void e2m1_a8_to_shifted_e4m3(uint32_t w, uint32_t &out0, uint32_t &out1) {
  out0 = w & 0x9C9C9C9Cu;
  out1 = (rotate_left(w, 2) & 0x88888888u) | (rotate_left(w, 4) & 0x14141414u);
}

// A right rotation of `w` by `s` (0 < s < 32): one funnel shift on the GPU. Written out rather than
// as __funnelshift_r, whose inline assembly the compiler does not merge when four pairs of a word
// ask for the same rotation.
HUMMING_HD constexpr uint32_t rotate_right(uint32_t w, int s) { return (w >> s) | (w << (32 - s)); }

// Register pair `P` (0..3) of a word of e2m1 codes in layout 3's spread order (layout/sm90.h fp4_bit)
// as operand bits of the codes' values times 2^-126 (bf16: the first code's sign at bit 15, its
// exponent and mantissa at bits 8..6, where exponent 0 makes the subnormal 0.5 a bf16 subnormal of
// the same scale; the second code's at 31 and 24..22) or times 2^-14 (f16: the three bits at 11..9
// and 27..25). Pairs 0 and 1 find their mantissa and low exponent bits in place in the word and their
// high exponent bit and sign in the word rotated by 1, pairs 2 and 3 in the word rotated by 4 and by
// 5; one PRMT picks each pair's four bytes from those and one AND clears the rest. The rotations are
// the same for the four pairs of a word, so a kernel that unrolls them pays 3 + 4 x 2 integer
// instructions a word for bf16; f16 moves the three bits up by one shift and one LOP3 more (nothing
// else is set, so OR-ing the shifted copy and masking keeps exactly them and the signs).
template <bool IsBf16, int P> HUMMING_HD uint32_t e2m1_operand_bits(uint32_t w) {
  static_assert(P >= 0 && P < 4, "a word holds four pairs of 4-bit codes");
  // Byte j of the result from byte sel_j of {a, b}: the code's own byte, then the rotated copy's.
  constexpr uint32_t kSelect = P == 0 ? 0x5140u : P == 1 ? 0x7362u : P == 2 ? 0x5043u : 0x7261u;
  const uint32_t a = P < 2 ? w : rotate_right(w, 4);
  const uint32_t b = rotate_right(w, P < 2 ? 1 : 5);
  const uint32_t bits = prmt(a, b, kSelect) & 0x81C081C0u;
  return IsBf16 ? bits : ((bits << 3) | bits) & 0x8E008E00u;
}

} // namespace numeric
} // namespace humming
