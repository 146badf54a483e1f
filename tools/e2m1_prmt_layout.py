"""Design check (session 38; the order is layout 3's for e2m1 since session 39: layout/sm90.h fp4_bit,
numeric/nibble_lut.h e2m1_operand_bits, tests/cpp test_sm90_fp4_operands), not used by the build: a bit order for e2m1 codes in a 32-bit word of
layout 3 under which the sm90 kernels could turn a register pair of codes into its bf16 operand
pair (value x 2^-126, as numeric/fast_dequant.h e2m1_pair makes it: sign at bit 15 / 31, exponent
and mantissa bits at 8..6 / 24..22) with one byte permute and one AND per pair, after three
rotations of the word shared by its four pairs: 2.75 integer instructions a pair, where e2m1_pair
takes about five (nvcc -ptx of the t64 dense tile, session 38: 1,285 integer instructions for 256
pairs against 550 for u4g128) and u4 about two.

The order: codes P and P + 4 make register pair P (as layout/sm90.h numbers them). Pairs 0 and 1
(codes 0, 4, 1, 5 in byte slots 0..3) keep m, e0 at bits 8j+6, 8j+7 of byte slot j (read from the
word itself) and e1, sign at bits 8j+1, 8j+8 (read from the word rotated right by 1); pairs 2 and 3
(codes 2, 6, 3, 7) keep m, e0 at 8j+2, 8j+3 (read from the word rotated by 4, one byte down) and
e1, sign at 8j+5, 8j+12 (rotated by 5). Every bit of the word is used once.

Running it packs random codes in that order, emulates the rotations, prmt.b32 and the AND mask
0x81C081C0, and checks every pair against the operand bits e2m1_pair gave. Changing layout 3's
e2m1 bit order made weights packed before the change wrong without an error; session 39 bumped the
packed-checkpoint schema to 2, whose loader refuses schema-1 e2m1 weights in layout 3.
"""

import random


def rot(w: int, s: int) -> int:
    return ((w >> s) | (w << (32 - s))) & 0xFFFFFFFF


def prmt(a: int, b: int, sel: list[int]) -> int:
    """prmt.b32 without sign replication: result byte i = byte sel[i] of (a, b) (0-3 a's, 4-7 b's)."""
    src = [(a >> (8 * i)) & 255 for i in range(4)] + [(b >> (8 * i)) & 255 for i in range(4)]
    return sum(src[s] << (8 * i) for i, s in enumerate(sel))


SLOT_LOW = {0: 0, 4: 1, 1: 2, 5: 3}  # codes of pairs 0 and 1 -> byte slot
SLOT_HIGH = {2: 0, 6: 1, 3: 2, 7: 3}  # codes of pairs 2 and 3 -> byte slot


def pack(codes: list[int]) -> int:
    w = 0
    for c, v in enumerate(codes):
        bits = {"s": (v >> 3) & 1, "e1": (v >> 2) & 1, "e0": (v >> 1) & 1, "m": v & 1}
        if c in SLOT_LOW:
            j = SLOT_LOW[c]
            pos = {"m": 8 * j + 6, "e0": 8 * j + 7, "e1": 8 * j + 1, "s": (8 * j + 8) % 32}
        else:
            j = SLOT_HIGH[c]
            pos = {"m": 8 * j + 2, "e0": 8 * j + 3, "e1": 8 * j + 5, "s": (8 * j + 12) % 32}
        for k, b in bits.items():
            w |= b << pos[k]
    return w


def operand_pair(w: int, p: int) -> int:
    lo, hi = p, p + 4
    if p < 2:
        out = prmt(w, rot(w, 1), [SLOT_LOW[lo], 4 + SLOT_LOW[lo], SLOT_LOW[hi], 4 + SLOT_LOW[hi]])
    else:
        a_lo, a_hi = (SLOT_HIGH[lo] - 1) % 4, (SLOT_HIGH[hi] - 1) % 4
        out = prmt(rot(w, 4), rot(w, 5), [a_lo, 4 + SLOT_HIGH[lo], a_hi, 4 + SLOT_HIGH[hi]])
    return out & 0x81C081C0


def expected(lo: int, hi: int) -> int:
    one = lambda v: ((v >> 3) & 1) << 15 | (v & 7) << 6  # noqa: E731
    return one(lo) | one(hi) << 16


if __name__ == "__main__":
    rng = random.Random(0)
    for _ in range(20000):
        codes = [rng.randrange(16) for _ in range(8)]
        w = pack(codes)
        for p in range(4):
            assert operand_pair(w, p) == expected(codes[p], codes[p + 4]), (codes, p)
    print("every pair of 20000 random words matches e2m1_pair's operand bits")
