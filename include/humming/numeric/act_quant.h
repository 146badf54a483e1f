// Activation quantization shared by the CPU reference and the GPU kernel: one fp32 scale per token
// or per K group, scale = amax / max(type) (1 where the slice is all zeros), code = encode(x / scale).
// Both sides compute the scale and the quotient with the same fp32 operations, so they agree bit for
// bit with each other and with humming_aot.reference.quantize_activation.
#pragma once

#include <cstdint>

#include "humming/format/dtype.h"
#include "humming/numeric/dequant.h"

namespace humming {

HUMMING_HD float act_scale_from_amax(DType t, float amax) { return amax > 0.0f ? amax / act_type_max(t) : 1.0f; }

// The range codes of type t take: [-max, max], one step further below for integers (-128 for i8).
struct ActRange {
  float lo, hi;
};
HUMMING_HD ActRange act_range(DType t) {
  const float lim = act_type_max(t);
  return ActRange{-lim - (t.kind == kInt ? 1.0f : 0.0f), lim};
}

// A quotient clipped to `r`.
HUMMING_HD float act_clip(ActRange r, float q) { return fminf(fmaxf(q, r.lo), r.hi); }

// x / scale clipped to `r`: the value every quantizer encodes.
HUMMING_HD float act_quotient(ActRange r, float x, float scale) { return act_clip(r, x / scale); }

// Quantizes x[begin, end) of one row into codes (one byte each) with `scale`.
HUMMING_HD void quantize_act_slice(DType t, DType x_t, const void *x_row, int64_t begin, int64_t end, float scale,
                                   uint8_t *codes_row) {
  const ActRange r = act_range(t);
  for (int64_t k = begin; k < end; ++k)
    codes_row[k] = static_cast<uint8_t>(encode(t, act_quotient(r, load_element(x_t, x_row, k), scale)));
}

} // namespace humming
