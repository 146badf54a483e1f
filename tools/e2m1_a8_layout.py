"""Design check (session 46; built on branch s46-e2m1-a8-order, not on main until it is timed and
tested on a GPU: layout/sm90_a8.h fp4_order / fp4_bit, numeric/nibble_lut.h
e2m1_a8_to_shifted_e4m3), not used by the build: a bit order for e2m1 codes in a 32-bit word of
layout 4 (sm90a8, layout/sm90_a8.h) under which the W4A8 kernels could turn a word's eight codes
into their two registers of shifted e4m3 operand bytes (numeric/nibble_lut.h e2m1_to_shifted_e4m3:
sign at bit 7 of the byte, exponent and mantissa at bits 4..2, 2^-6 the code's value) in five
integer instructions instead of nine.

Today a word holds code i at nibble i (the order the generic layout's fragments and the u4 lookup
read). The conversion spreads the even nibbles and the odd ones into bytes (two shifts and two masks each) and
interleaves them with two byte permutes: nine instructions in the SASS of the t80 grouped tile
(session 46, scripts/sass_local.py: SHF, two IMAD.SHL, four LOP3, two PRMT per word), 72 a stage
per consumer thread of a 64-channel warpgroup, about half its stage loop.

The order checked here: register 0's codes (j = 0..3) already at their operand bits, byte j bits 7,
4, 3, 2 (sign, e1, e0, m); register 1's code 4 + j in the bits left over: sign at bit 5 and e0 at
bit 1 of byte j (a left rotation by 2 puts them at 7 and 3), e1 at bit 0 of byte j and m at bit 6
of byte j - 1 (mod 4; a left rotation by 4 puts them at 4 and 2). Then
    out0 = w & 0x9C9C9C9C
    out1 = (rotl(w, 2) & 0x88888888) | (rotl(w, 4) & 0x14141414)
one LOP3, and two funnel shifts and two LOP3. Every bit of the word is used once. No order makes
out1 a single rotation and mask: the byte offsets between register 0's bit set {7, 4, 3, 2} and
itself take every value mod 8, so any one rotation lands some of register 1's bits on register 0's.

The u4 codes keep today's order (their lookup indexes nibbles), so layout 4 would then depend on
the code type, and e2m1 weights packed in today's order would read wrong without an error: as in
session 39 (layout 3's e2m1 order, tools/e2m1_prmt_layout.py), the packed-checkpoint schema would
have to refuse them. Running this packs random codes in that order, emulates the instructions and
checks both registers against the operand bytes of every code.
"""

import random


def rotl(w: int, s: int) -> int:
    return ((w << s) | (w >> (32 - s))) & 0xFFFFFFFF


def operand(code: int) -> int:
    """The shifted e4m3 byte of an e2m1 code (sign bit 3 -> 7, exponent bits 2..1 -> 4..3, mantissa 0 -> 2)."""
    return ((code >> 3) & 1) << 7 | ((code >> 1) & 3) << 3 | (code & 1) << 2


def pack(codes: list[int]) -> int:
    """A word of eight codes: register 0's (codes 0..3) and register 1's (codes 4..7) in the order above."""
    w = 0
    for j in range(4):
        w |= operand(codes[j]) << (8 * j)
        c = codes[4 + j]
        w |= ((c >> 3) & 1) << (8 * j + 5)  # sign: rotl 2 -> bit 7
        w |= ((c >> 1) & 1) << (8 * j + 1)  # e0: rotl 2 -> bit 3
        w |= ((c >> 2) & 1) << (8 * j + 0)  # e1: rotl 4 -> bit 4
        w |= (c & 1) << (8 * ((j - 1) % 4) + 6)  # m: rotl 4 -> bit 2 of the next byte
    return w


def main() -> None:
    rng = random.Random(46)
    for _ in range(100000):
        codes = [rng.randrange(16) for _ in range(8)]
        w = pack(codes)
        out0 = w & 0x9C9C9C9C
        out1 = (rotl(w, 2) & 0x88888888) | (rotl(w, 4) & 0x14141414)
        assert out0 == sum(operand(codes[j]) << (8 * j) for j in range(4)), codes
        assert out1 == sum(operand(codes[4 + j]) << (8 * j) for j in range(4)), codes
    assert pack([15] * 8).bit_count() == 32  # every bit of the word holds one code bit
    print("ok: 100000 words, both registers equal the operand bytes; 5 instructions a word")


if __name__ == "__main__":
    main()
