// Numeric data types shared by host and device code.
//
// A DType is four small integers (kind, bits, exponent bits, mantissa bits). Its id() packs them
// into one 32-bit value that kernels take as a template argument and that Python's
// humming_aot.formats.DType.id computes the same way; the string names are those of that module.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define HUMMING_HD __host__ __device__ __forceinline__
#else
#define HUMMING_HD inline
#endif

namespace humming {

enum DTypeKind : uint32_t {
  kInt = 0,   // signed two's complement integer
  kUInt = 1,  // unsigned integer
  kFloat = 2, // signed floating point eXmY (f16, bf16 and f32 included)
  kE8M0 = 3,  // unsigned power of two, bias 127, 0xFF is NaN
};

struct DType {
  uint32_t kind = kFloat;
  uint32_t bits = 32;
  uint32_t exp = 8;
  uint32_t man = 23;

  HUMMING_HD constexpr uint32_t id() const { return (kind << 24) | (bits << 16) | (exp << 8) | man; }
  static HUMMING_HD constexpr DType from_id(uint32_t id) {
    return DType{id >> 24, (id >> 16) & 0xFF, (id >> 8) & 0xFF, id & 0xFF};
  }
  HUMMING_HD constexpr bool operator==(const DType &o) const { return id() == o.id(); }
  HUMMING_HD constexpr bool operator!=(const DType &o) const { return id() != o.id(); }
  HUMMING_HD constexpr bool is_int() const { return kind == kInt || kind == kUInt; }
  // Exponent all ones means infinity or NaN (e5m2, f16, bf16, f32).
  HUMMING_HD constexpr bool ieee() const {
    return kind == kFloat && ((exp == 5 && (man == 2 || man == 10)) || (exp == 8 && (man == 7 || man == 23)));
  }
  // Only S.1111.111 is NaN, no infinity (e4m3 as torch.float8_e4m3fn).
  HUMMING_HD constexpr bool fn() const { return kind == kFloat && exp == 4 && man == 3; }
  HUMMING_HD constexpr int bias() const { return kind == kE8M0 ? 127 : (kind == kFloat ? (1 << (exp - 1)) - 1 : 0); }
  // Bytes of one element as stored in a tensor (codes of fewer than 8 bits are packed elsewhere).
  HUMMING_HD constexpr int storage_bytes() const { return bits <= 8 ? 1 : bits / 8; }
};

namespace dtypes {
constexpr DType f32{kFloat, 32, 8, 23};
constexpr DType f16{kFloat, 16, 5, 10};
constexpr DType bf16{kFloat, 16, 8, 7};
constexpr DType e4m3{kFloat, 8, 4, 3};
constexpr DType e5m2{kFloat, 8, 5, 2};
constexpr DType e2m1{kFloat, 4, 2, 1};
constexpr DType e8m0{kE8M0, 8, 8, 0};
constexpr DType i8{kInt, 8, 0, 0};
constexpr DType none{0, 0, 0, 0}; // "absent" (no scale); id() == 0
constexpr HUMMING_HD DType int_type(uint32_t bits) { return DType{kInt, bits, 0, 0}; }
constexpr HUMMING_HD DType uint_type(uint32_t bits) { return DType{kUInt, bits, 0, 0}; }
} // namespace dtypes

// Value of the bit pattern `code` (the low `t.bits` bits) of a type of at most 16 bits, or of f32,
// for any type (decode below takes the 16-bit floats a shorter way to the same values).
// Straight-line arithmetic; the generic backend and the CPU reference both use it, so they agree
// bit for bit on every decoded value.
HUMMING_HD float decode_generic(DType t, uint32_t code) {
  if (t.bits == 32) {
    float f;
    memcpy(&f, &code, 4);
    return f;
  }
  code &= (1u << t.bits) - 1u;
  if (t.kind == kUInt) return static_cast<float>(code);
  if (t.kind == kInt) {
    int v = static_cast<int>(code);
    if (code >> (t.bits - 1)) v -= 1 << t.bits;
    return static_cast<float>(v);
  }
  if (t.kind == kE8M0) return code == 0xFFu ? NAN : ldexpf(1.0f, static_cast<int>(code) - 127);
  const float sign = (code >> (t.bits - 1)) ? -1.0f : 1.0f;
  const uint32_t e = (code >> t.man) & ((1u << t.exp) - 1u);
  const uint32_t m = code & ((1u << t.man) - 1u);
  const uint32_t emax_field = (1u << t.exp) - 1u;
  if (t.ieee() && e == emax_field) return m == 0 ? sign * INFINITY : NAN;
  if (t.fn() && e == emax_field && m == (1u << t.man) - 1u) return NAN;
  const int man = static_cast<int>(t.man);
  if (e == 0) return sign * ldexpf(static_cast<float>(m), 1 - t.bias() - man);
  return sign * ldexpf(static_cast<float>((1u << t.man) + m), static_cast<int>(e) - t.bias() - man);
}

// Bit pattern of the value of type `t` nearest to `v`, ties to even. Values past the largest
// finite one become infinity for IEEE types and saturate to the largest finite value otherwise
// (e4m3 included: quantizers clip before they cast). NaN maps to the type's NaN, or to 0 for types
// without one. Integer kinds round to nearest even and clamp to their range. Any type (encode below
// takes the 16-bit floats a shorter way to the same codes).
HUMMING_HD uint32_t encode_generic(DType t, float v) {
  if (t.bits == 32) {
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
  }
  const uint32_t mask = (1u << t.bits) - 1u;
  if (t.kind == kInt || t.kind == kUInt) {
    const float lo = t.kind == kInt ? -static_cast<float>(1 << (t.bits - 1)) : 0.0f;
    const float hi = t.kind == kInt ? static_cast<float>((1 << (t.bits - 1)) - 1) : static_cast<float>(mask);
    float r = v != v ? 0.0f : rintf(fminf(fmaxf(v, lo), hi));
    return static_cast<uint32_t>(static_cast<int>(r)) & mask;
  }
  if (t.kind == kE8M0) {
    if (v != v || v <= 0.0f) return v != v ? 0xFFu : 0u;
    // The OCP MX rule keeps floor(log2(v)); ilogbf gives it without a pointer argument (which
    // would put a stack slot in every kernel that encodes).
    const int field = ilogbf(v) + 127;
    return static_cast<uint32_t>(field < 0 ? 0 : (field > 254 ? 254 : field));
  }
  const uint32_t sign = (v < 0.0f || (v == 0.0f && 1.0f / v < 0.0f)) ? 1u : 0u;
  const uint32_t sign_bit = sign << (t.bits - 1);
  const uint32_t emax_field = (1u << t.exp) - 1u;
  const uint32_t man_all = (1u << t.man) - 1u;
  if (v != v) {
    if (t.ieee()) return (emax_field << t.man) | (1u << (t.man - 1)) | sign_bit;
    if (t.fn()) return mask;
    return 0u;
  }
  // Largest finite (exponent field, mantissa field).
  const uint32_t top_e = t.ieee() ? emax_field - 1u : emax_field;
  const uint32_t top_m = t.fn() ? man_all - 1u : man_all;
  const float a = fabsf(v);
  const int man = static_cast<int>(t.man);
  const int emin = 1 - t.bias();
  if (a == 0.0f) return sign_bit;
  if (a == INFINITY) {
    if (t.ieee()) return sign_bit | (emax_field << t.man);
    return sign_bit | (top_e << t.man) | top_m;
  }
  int E = ilogbf(a); // floor(log2(a)), also for subnormal inputs
  if (E < emin) E = emin;
  float q = rintf(ldexpf(a, man - E)); // significand in units of the last place, ties to even
  if (q >= ldexpf(1.0f, man + 1)) {
    q = ldexpf(1.0f, man);
    E += 1;
  }
  uint32_t efield, mfield;
  const uint32_t qi = static_cast<uint32_t>(q);
  if (qi < (1u << t.man)) {
    efield = 0;
    mfield = qi;
  } else {
    const int ef = E + t.bias();
    efield = static_cast<uint32_t>(ef);
    mfield = qi - (1u << t.man);
  }
  if (efield > top_e || (efield == top_e && mfield > top_m)) {
    if (t.ieee()) return sign_bit | (emax_field << t.man);
    return sign_bit | (top_e << t.man) | top_m;
  }
  return sign_bit | (efield << t.man) | mfield;
}

// The 16-bit floats by bit arithmetic: the same values and codes as decode_generic and
// encode_generic (NaN included: decoded as NAN, encoded as the positive quiet NaN), which
// tests/cpp/test_core.cpp checks on every code and on the floats around every rounding boundary.
// Why: the generic path's ldexpf / ilogbf / rintf take dozens of instructions per element, and the
// kernels that load and store 16-bit values through load_element / store_element (the MoE routing
// helpers, the activation quantization's loads, the generic backend) paid them on every one (ncu,
// H100, session 33: one token's MoE combine, 1,490 instructions a warp for eight terms).
HUMMING_HD float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
HUMMING_HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
HUMMING_HD float decode_bf16(uint32_t code) {
  code &= 0xFFFFu;
  return (code & 0x7FFFu) > 0x7F80u ? NAN : bits_float(code << 16);
}
HUMMING_HD float decode_f16(uint32_t code) {
  code &= 0xFFFFu;
  const uint32_t sign = code & 0x8000u, e = (code >> 10) & 0x1Fu, m = code & 0x3FFu;
  if (e == 31u) return m != 0u ? NAN : (sign != 0u ? -INFINITY : INFINITY);
  if (e == 0u) { // subnormal: m x 2^-24, exact in fp32
    const float f = static_cast<float>(m) * 5.9604644775390625e-8f;
    return sign != 0u ? -f : f;
  }
  return bits_float(sign << 16 | (e + 112u) << 23 | m << 13); // exponent rebiased from 15 to 127
}
// Round to nearest, ties to even, in the integers: adding half an ulp minus one, plus the kept
// part's lowest bit, carries exactly when the dropped bits round up (into the exponent too, up to
// infinity past the largest finite value).
HUMMING_HD uint32_t encode_bf16(float v) {
  const uint32_t u = float_bits(v);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u;
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}
HUMMING_HD uint32_t encode_f16(float v) {
  const uint32_t u = float_bits(v), sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7E00u;
  if (a >= 0x477FF000u) return sign | 0x7C00u; // from 65520 (halfway past 65504, to even): infinity
  if (a < 0x38800000u)                         // below 2^-14: a subnormal count of 2^-24 (the scaling is exact)
    return sign | static_cast<uint32_t>(rintf(bits_float(a) * 16777216.0f));
  const uint32_t r = a - 0x38000000u; // exponent rebiased from 127 to 15
  return sign | (r + 0xFFFu + ((r >> 13) & 1u)) >> 13;
}

// (The 16-bit floats told apart by their fields: dtypes' constants are host objects.)
HUMMING_HD float decode(DType t, uint32_t code) {
  if (t.kind == kFloat && t.bits == 16 && t.exp == 8 && t.man == 7) return decode_bf16(code);
  if (t.kind == kFloat && t.bits == 16 && t.exp == 5 && t.man == 10) return decode_f16(code);
  return decode_generic(t, code);
}

// Bit pattern of the value of type `t` nearest to `v` (encode_generic's rules).
HUMMING_HD uint32_t encode(DType t, float v) {
  if (t.kind == kFloat && t.bits == 16 && t.exp == 8 && t.man == 7) return encode_bf16(v);
  if (t.kind == kFloat && t.bits == 16 && t.exp == 5 && t.man == 10) return encode_f16(v);
  return encode_generic(t, v);
}

// Element `i` of an array stored with type `t` (f32, f16, bf16, or one byte per element), as float.
HUMMING_HD float load_element(DType t, const void *base, int64_t i) {
  if (t.bits == 32) return static_cast<const float *>(base)[i];
  if (t.bits == 16) return decode(t, static_cast<const uint16_t *>(base)[i]);
  return decode(t, static_cast<const uint8_t *>(base)[i]);
}

// Store `v` rounded to type `t` into element `i` of an array of that type.
HUMMING_HD void store_element(DType t, void *base, int64_t i, float v) {
  if (t.bits == 32)
    static_cast<float *>(base)[i] = v;
  else if (t.bits == 16)
    static_cast<uint16_t *>(base)[i] = static_cast<uint16_t>(encode(t, v));
  else
    static_cast<uint8_t *>(base)[i] = static_cast<uint8_t>(encode(t, v));
}

} // namespace humming
