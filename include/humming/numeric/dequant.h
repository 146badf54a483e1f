// Element-wise dequantization shared by the CPU reference and the generic backend.
//
// w[n][k] = (decode(code) - zero) * scale * global_scale, with the scale and zero point of the
// group that holds (n, k) (unsigned codes without zero points: zero = 2^(bits-1)); a[m][k] = decode(a) * a_scale of the
// token or K group. The fast backends do the same arithmetic with bit tricks on whole registers; these are the readable
// definitions.
#pragma once

#include <cstdint>

#include "humming/format/dtype.h"
#include "humming/humming.h"
#include "humming/layout/generic.h"
#include "humming/layout/sm80.h"
#include "humming/layout/sm90.h"
#include "humming/layout/sm90_a8.h"

namespace humming {

// Value of weight element (n, k) of a packed weight (generic, sm80, sm90 or sm90a8 layout). `code_t` and `scale_t` are
// passed by value so that a kernel handing in compile-time constants gets the decode folded.
HUMMING_HD float weight_value_generic(const GemmArgs &args, DType code_t, DType scale_t, int zero, float global,
                                      int64_t n, int64_t k) {
  const PackedDims &d = args.dims;
  const int bits = static_cast<int>(code_t.bits);
  const uint32_t code =
      args.layout == kLayoutSm80   ? layout_sm80::code_at(args.codes, n, k, bits, d.k_pad / layout_sm80::kBlockK)
      : args.layout == kLayoutSm90 ? layout_sm90::code_at(args.codes, n, k, bits, d.n_pad / layout_sm90::kBlockN,
                                                          layout_sm90::spread_fp4(code_t))
      : args.layout == kLayoutSm90A8
          ? layout_sm90_a8::code_at(args.codes, d.n_pad, n, k, layout_sm90_a8::fp4_order(code_t))
          : layout_generic::code_at(args.codes + n * d.words_per_row, k, bits);
  float v = decode(code_t, code);
  // Unsigned codes without zero points are symmetric around the middle of their range (GPTQ
  // symmetric "uint4b8"): the zero point is implied, 2^(bits-1).
  if (code_t.kind == kUInt && zero == static_cast<int>(ZeroKind::kNone))
    v -= static_cast<float>(1u << (code_t.bits - 1));
  if (scale_t.id() != 0) {
    const int64_t g = (k / d.group_k) * d.n_groups + n / d.group_n;
    if (zero == static_cast<int>(ZeroKind::kInt))
      v -= static_cast<float>(static_cast<const uint8_t *>(args.zeros)[g]);
    else if (zero == static_cast<int>(ZeroKind::kFloat))
      v -= load_element(scale_t, args.zeros, g);
    v *= load_element(scale_t, args.scales, g);
  }
  return v * global;
}

// Value of activation element (m, k); `act_group` is the K extent of one activation scale.
HUMMING_HD float act_value(const GemmArgs &args, DType act_t, int64_t act_group, int64_t m, int64_t k) {
  float v = load_element(act_t, args.a, m * args.lda + k);
  if (args.a_scales != nullptr) v *= args.a_scales[m * args.a_scale_cols + k / act_group];
  return v;
}

// K extent of one activation scale: the whole row for per-token scales.
HUMMING_HD int64_t act_group_extent(const ActFormat &f, int64_t k) {
  return f.granularity == ActScale::kGroup ? f.group_k : (k > 0 ? k : 1);
}

HUMMING_HD float global_scale_value(const GemmArgs &args) {
  return args.global_scale != nullptr ? *args.global_scale : 1.0f;
}

// Largest finite magnitude of an activation type (the quantizer's target range).
HUMMING_HD float act_type_max(DType t) {
  if (t.kind == kInt) return static_cast<float>((1 << (t.bits - 1)) - 1);
  // Largest finite: the top exponent field (one less for IEEE types) with the top mantissa (one
  // less for e4m3, whose all-ones pattern is NaN).
  const int top_e = static_cast<int>(t.ieee() ? (1u << t.exp) - 2u : (1u << t.exp) - 1u);
  const int top_m = static_cast<int>(t.fn() ? (1u << t.man) - 2u : (1u << t.man) - 1u);
  return ldexpf(static_cast<float>((1 << t.man) + top_m), top_e - t.bias() - static_cast<int>(t.man));
}

} // namespace humming
