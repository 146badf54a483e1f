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

// Quantizes x[begin, end) of one row into codes (one byte each) with `scale`.
HUMMING_HD void quantize_act_slice(DType t, DType x_t, const void *x_row, int64_t begin, int64_t end, float scale,
                                   uint8_t *codes_row) {
  const float lim = act_type_max(t);
  for (int64_t k = begin; k < end; ++k) {
    float q = load_element(x_t, x_row, k) / scale;
    q = fminf(fmaxf(q, -lim - (t.kind == kInt ? 1.0f : 0.0f)), lim);
    codes_row[k] = static_cast<uint8_t>(encode(t, q));
  }
}

} // namespace humming
