// In-register dequantization for tensor-core operands: packed integer codes -> f16 / bf16 register
// pairs, with bit tricks instead of per-element conversions.
//
// The trick: OR a code into the low mantissa bits of a float whose exponent makes one mantissa
// unit worth 1 (1024.0 in f16, 128.0 in bf16); the register then holds magic + code exactly, and
// subtracting (magic + zero point) leaves code - zero exactly. One LOP3 extracts and biases both
// halves of a register pair; one HSUB2 removes the bias. Bytes do not fit bf16's 7-bit mantissa,
// so 8-bit codes for bf16 go through the same trick in fp32 (2^23 + code) and one pack. e4m3 codes
// are moved into the operand's exponent and mantissa bits (e4m3_pair).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "humming/backend/sm80/ptx.h"
#include "humming/format/dtype.h"
#include "humming/numeric/nibble_lut.h"

namespace humming {
namespace numeric {

// Operand register pair helpers for f16 (IsBf16 false) and bf16.
template <bool IsBf16> struct Operand;

template <> struct Operand<false> {
  static constexpr uint32_t kMagic = 0x64006400u; // 1024.0 in both halves
  static constexpr float kMagicValue = 1024.0f;
  static __device__ __forceinline__ uint32_t pair(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&h);
  }
  static __device__ __forceinline__ uint32_t sub(uint32_t a, uint32_t b) {
    __half2 r = __hsub2(*reinterpret_cast<const __half2 *>(&a), *reinterpret_cast<const __half2 *>(&b));
    return *reinterpret_cast<uint32_t *>(&r);
  }
  static __device__ __forceinline__ uint32_t mul(uint32_t a, uint32_t b) {
    __half2 r = __hmul2(*reinterpret_cast<const __half2 *>(&a), *reinterpret_cast<const __half2 *>(&b));
    return *reinterpret_cast<uint32_t *>(&r);
  }
  static __device__ __forceinline__ float to_float(uint16_t bits) {
    return __half2float(*reinterpret_cast<const __half *>(&bits));
  }
  // Both halves of a register pair as floats.
  static __device__ __forceinline__ float2 to_float2(uint32_t pair) {
    return __half22float2(*reinterpret_cast<const __half2 *>(&pair));
  }
};

template <> struct Operand<true> {
  static constexpr uint32_t kMagic = 0x43004300u; // 128.0 in both halves
  static constexpr float kMagicValue = 128.0f;
  static __device__ __forceinline__ uint32_t pair(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&h);
  }
  static __device__ __forceinline__ uint32_t sub(uint32_t a, uint32_t b) {
    __nv_bfloat162 r =
        __hsub2(*reinterpret_cast<const __nv_bfloat162 *>(&a), *reinterpret_cast<const __nv_bfloat162 *>(&b));
    return *reinterpret_cast<uint32_t *>(&r);
  }
  static __device__ __forceinline__ uint32_t mul(uint32_t a, uint32_t b) {
    __nv_bfloat162 r =
        __hmul2(*reinterpret_cast<const __nv_bfloat162 *>(&a), *reinterpret_cast<const __nv_bfloat162 *>(&b));
    return *reinterpret_cast<uint32_t *>(&r);
  }
  static __device__ __forceinline__ float to_float(uint16_t bits) {
    return __uint_as_float(static_cast<uint32_t>(bits) << 16);
  }
  static __device__ __forceinline__ float2 to_float2(uint32_t pair) {
    return make_float2(__uint_as_float(pair << 16), __uint_as_float(pair & 0xFFFF0000u));
  }
};

// Bias register pair for zero point z: magic + z in both halves, so that sub(pair, bias) is
// code - z. For bf16 with 8-bit codes the bias is not used (the fp32 path subtracts z itself).
template <bool IsBf16> __device__ __forceinline__ uint32_t zero_bias(float z) {
  return Operand<IsBf16>::pair(Operand<IsBf16>::kMagicValue + z, Operand<IsBf16>::kMagicValue + z);
}

// Register pair `p` of a word of 4-bit codes with the magic left in: (magic + code[p],
// magic + code[p + 4]), exact. A kernel that removes the offset after the mma (as a multiple of
// the activations' row sums) needs nothing more per pair than this one LOP3.
template <bool IsBf16, int P> __device__ __forceinline__ uint32_t u4_pair_biased(uint32_t word) {
  return sm80::and_or(word >> (4 * P), 0x000F000Fu, Operand<IsBf16>::kMagic);
}

// Register pair `p` of a word of 4-bit codes: (code[p] - z, code[p + 4] - z), exact.
template <bool IsBf16, int P> __device__ __forceinline__ uint32_t u4_pair(uint32_t word, uint32_t bias) {
  return Operand<IsBf16>::sub(u4_pair_biased<IsBf16, P>(word), bias);
}

// Register pair `p` of a word of 8-bit codes as f16 with the magic left in: (1024 + byte[p],
// 1024 + byte[p + 2]), exact (bf16 cannot hold 256 consecutive integers; see u8_pair).
template <int P> __device__ __forceinline__ uint32_t u8_pair_biased_f16(uint32_t word) {
  return sm80::and_or(word >> (8 * P), 0x00FF00FFu, Operand<false>::kMagic);
}

// Register pair `p` of a word of 8-bit codes: (byte[p] - z, byte[p + 2] - z), exact.
template <bool IsBf16, int P> __device__ __forceinline__ uint32_t u8_pair(uint32_t word, uint32_t bias, float z) {
  if constexpr (!IsBf16) {
    return Operand<false>::sub(u8_pair_biased_f16<P>(word), bias);
  } else {
    // 2^23 + byte is exact in fp32; subtracting 2^23 + z leaves byte - z, which bf16 holds exactly.
    const float lo = __uint_as_float(((word >> (8 * P)) & 0xFFu) | 0x4B000000u) - (8388608.0f + z);
    const float hi = __uint_as_float(((word >> (8 * P + 16)) & 0xFFu) | 0x4B000000u) - (8388608.0f + z);
    return Operand<true>::pair(lo, hi);
  }
}

// Register pair `p` of a word of e4m3 codes (float8_e4m3fn): (value(byte[p]), value(byte[p + 2])),
// exact. One PRMT moves the two bytes to the top of their halves (S EEEE MMM, then zeros). Shifted
// right so that EEEE MMM lands in the low exponent and top mantissa bits of the operand type, with
// the sign put back at bit 15, the register holds value x 2^-8 (f16: exponent bias 15 against 7)
// or value x 2^-120 (bf16: bias 127); subnormal codes become subnormals of the same scale. One
// multiply by the power of two (exact; f16 and bf16 arithmetic keep subnormals) restores the value.
// sm_89 and newer convert a byte pair to f16 in one instruction. Codes S.1111.111 (NaN) are not
// produced by the quantizers and decode as +-480.
template <bool IsBf16, int P> __device__ __forceinline__ uint32_t e4m3_pair(uint32_t word) {
  if constexpr (!IsBf16) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    uint32_t r;
    const uint16_t pair = static_cast<uint16_t>(__byte_perm(word, 0u, P == 0 ? 0x4420u : 0x4431u));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(r) : "h"(pair));
    return r;
#else
    const uint32_t x = __byte_perm(word, 0u, P == 0 ? 0x2404u : 0x3414u); // bytes P, P + 2 to bits 15..8, 31..24
    const uint32_t bits = ((x >> 1) & 0x3F803F80u) | (x & 0x80008000u);
    return Operand<false>::mul(bits, 0x5C005C00u); // x 256
#endif
  } else {
    const uint32_t x = __byte_perm(word, 0u, P == 0 ? 0x2404u : 0x3414u);
    const uint32_t bits = ((x >> 4) & 0x07F007F0u) | (x & 0x80008000u);
    return Operand<true>::mul(bits, 0x7B807B80u); // x 2^120
  }
}

// Register pair `P` of a word of e2m1 codes (OCP FP4: sign bit 3, exponent bits 2..1 with bias 1,
// mantissa bit 0) in layout 3's spread order (layout/sm90.h): (value(code[P]), value(code[P + 4])),
// exact. numeric/nibble_lut.h e2m1_operand_bits gives the operand bits of value x 2^-126 (bf16) or
// value x 2^-14 (f16); one multiply by the power of two (exact) restores the value.
template <bool IsBf16, int P> __device__ __forceinline__ uint32_t e2m1_pair(uint32_t word) {
  return Operand<IsBf16>::mul(e2m1_operand_bits<IsBf16, P>(word), IsBf16 ? 0x7E807E80u : 0x74007400u);
}

// Register pair `P` of a word of codes of type CodeId (u4, i4, u8, i8, e4m3 or e2m1) as the exact operand
// pair (code[P] - zero, code[P + pairs per word] - zero): signed integers read as offset binary
// (flipping the sign bit adds 2^(bits-1), which the zero then includes); `bias` is
// zero_bias(zero) and `zero` the zero point itself (bytes as bf16 need it in fp32); e4m3 codes are
// their values (no zero point).
template <bool IsBf16, uint32_t CodeId, int P>
__device__ __forceinline__ uint32_t exact_pair(uint32_t word, uint32_t bias, float zero) {
  constexpr DType kCode = DType::from_id(CodeId);
  if constexpr (kCode.kind == kFloat && kCode.bits == 4) {
    return e2m1_pair<IsBf16, P>(word);
  } else if constexpr (kCode.kind == kFloat) {
    return e4m3_pair<IsBf16, P>(word);
  } else {
    if constexpr (kCode.kind == kInt) word ^= kCode.bits == 4 ? 0x88888888u : 0x80808080u;
    if constexpr (kCode.bits == 4)
      return u4_pair<IsBf16, P>(word, bias);
    else
      return u8_pair<IsBf16, P>(word, bias, zero);
  }
}

// u4_pair_biased for slot q (0..3) of a word chosen at run time, unrolled into one of the four
// compile-time shifts.
template <bool IsBf16> __device__ __forceinline__ uint32_t u4_pair_biased_at(uint32_t word, int q) {
  if (q == 0) return u4_pair_biased<IsBf16, 0>(word);
  if (q == 1) return u4_pair_biased<IsBf16, 1>(word);
  if (q == 2) return u4_pair_biased<IsBf16, 2>(word);
  return u4_pair_biased<IsBf16, 3>(word);
}

// Register pair `pair` of a thread's fragments (numbered as the packed layouts number them) from
// its words of codes: pair P sits in word P / pairs_per_word at slot P % pairs_per_word, which
// picks the shift (exact_pair's P) at compile time once the loop over pairs is unrolled.
template <bool IsBf16, uint32_t CodeId, int Words>
__device__ __forceinline__ uint32_t exact_pair_of(const uint32_t (&words)[Words], int pair, uint32_t bias, float zero) {
  constexpr int kPpw = 16 / static_cast<int>(DType::from_id(CodeId).bits); // pairs per 32-bit word
  const uint32_t w = words[pair / kPpw];
  if (pair % kPpw == 0) return exact_pair<IsBf16, CodeId, 0>(w, bias, zero);
  if (pair % kPpw == 1) return exact_pair<IsBf16, CodeId, 1>(w, bias, zero);
  if (pair % kPpw == 2) return exact_pair<IsBf16, CodeId, (kPpw > 2 ? 2 : 0)>(w, bias, zero);
  return exact_pair<IsBf16, CodeId, (kPpw > 3 ? 3 : 0)>(w, bias, zero);
}

} // namespace numeric
} // namespace humming
