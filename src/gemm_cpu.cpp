// The CPU reference GEMM and activation quantizer: read the packed layout through the same
// functions as the generic backend, accumulate in fp32. A reference, not a fast path.
#include <algorithm>
#include <cmath>
#include <vector>

#include "humming/humming.h"
#include "humming/numeric/act_quant.h"
#include "humming/numeric/dequant.h"

namespace humming {

Status gemm_cpu(const GemmArgs &args) {
  Status st = validate(args);
  if (!st) return st;
  if (args.experts > 0) {
    // A grouped GEMM: each expert's rows against its own weight (offsets or counts in host memory
    // here, so bad ones are reported; the GPU kernels can only clip them).
    const int32_t *off = args.expert_offsets, *counts = args.expert_counts;
    if (off != nullptr) {
      if (off[0] != 0 || off[args.experts] != args.m)
        return Status::Error("expert row offsets must run from 0 to m=" + std::to_string(args.m) + ", got " +
                             std::to_string(off[0]) + " .. " + std::to_string(off[args.experts]));
      for (int32_t e = 0; e < args.experts; ++e)
        if (off[e + 1] < off[e])
          return Status::Error("expert row offsets must not fall (expert " + std::to_string(e) + ": " +
                               std::to_string(off[e]) + " then " + std::to_string(off[e + 1]) + ")");
    } else {
      for (int32_t e = 0; e < args.experts; ++e)
        if (counts[e] < 0 || counts[e] > args.expert_capacity)
          return Status::Error("expert " + std::to_string(e) + " has " + std::to_string(counts[e]) +
                               " rows; a masked grouped GEMM takes 0 to the capacity, " +
                               std::to_string(args.expert_capacity));
    }
    const int64_t a_elem = args.fmt.act.type.storage_bytes(), o_elem = args.fmt.out.storage_bytes();
    for (int32_t e = 0; e < args.experts; ++e) {
      GemmArgs one = args;
      one.experts = 0;
      one.expert_offsets = one.expert_counts = nullptr;
      const int64_t first = off != nullptr ? off[e] : e * args.expert_capacity;
      one.m = off != nullptr ? off[e + 1] - off[e] : counts[e];
      if (one.m == 0) continue;
      one.a = static_cast<const char *>(args.a) + first * args.lda * a_elem;
      if (args.a_scales != nullptr) one.a_scales = args.a_scales + first * args.a_scale_cols;
      one.out = static_cast<char *>(args.out) + first * args.ldo * o_elem;
      one.codes =
          reinterpret_cast<const uint32_t *>(reinterpret_cast<const char *>(args.codes) + e * args.expert_codes_stride);
      if (args.scales != nullptr) one.scales = static_cast<const char *>(args.scales) + e * args.expert_scales_stride;
      if (args.zeros != nullptr) one.zeros = static_cast<const char *>(args.zeros) + e * args.expert_zeros_stride;
      st = gemm_cpu(one);
      if (!st) return st;
    }
    return Status::Ok();
  }
  if (args.m == 0) return Status::Ok(); // no rows: nothing to dequantize (the whole weight, otherwise)
  const int64_t m_total = args.m, n_total = args.dims.n, k_total = args.dims.k;
  const float global = global_scale_value(args);
  const int64_t act_group = act_group_extent(args.fmt.act, k_total);
  // Dequantize each operand once, then a plain triple loop in fp32.
  std::vector<float> w(static_cast<size_t>(n_total * k_total));
  for (int64_t n = 0; n < n_total; ++n)
    for (int64_t k = 0; k < k_total; ++k)
      w[n * k_total + k] = weight_value_generic(args, args.fmt.weight.code, args.fmt.weight.scale,
                                                static_cast<int>(args.fmt.weight.zero), global, n, k);
  std::vector<float> a(static_cast<size_t>(k_total));
  for (int64_t m = 0; m < m_total; ++m) {
    for (int64_t k = 0; k < k_total; ++k) a[k] = act_value(args, args.fmt.act.type, act_group, m, k);
    for (int64_t n = 0; n < n_total; ++n) {
      float acc = 0.0f;
      const float *wr = w.data() + n * k_total;
      for (int64_t k = 0; k < k_total; ++k) acc = std::fma(a[k], wr[k], acc);
      if (args.bias != nullptr) acc += load_element(args.fmt.out, args.bias, n);
      store_element(args.fmt.out, args.out, m * args.ldo + n, acc);
    }
  }
  return Status::Ok();
}

namespace {
Status check_act_quant(const ActFormat &fmt, DType x_type, int64_t m, int64_t k, int64_t ldx) {
  if (fmt.granularity == ActScale::kNone)
    return Status::Error("activation format " + to_string(fmt) +
                         " is not quantized; quantize_act takes e4m3, e5m2 or i8 with -pt or -g{K}");
  if (!(x_type == dtypes::f32 || x_type == dtypes::f16 || x_type == dtypes::bf16))
    return Status::Error("activations to quantize must be f32, f16 or bf16, not " + to_string(x_type));
  if (m < 0 || k <= 0) return Status::Error("activation extents must be m >= 0 and k > 0");
  if (ldx < k)
    return Status::Error("activation row stride " + std::to_string(ldx) + " is below k=" + std::to_string(k));
  return Status::Ok();
}

// Quantizes one row (`row`, or zeros where it is null: scale 1 and the code of zero) into
// codes_row and its scales.
void quantize_row(const ActFormat &fmt, DType x_type, const void *row, int64_t k, int64_t group, uint8_t *codes_row,
                  float *scales_row) {
  const int64_t cols = (k + group - 1) / group;
  if (row == nullptr) {
    const float scale = act_scale_from_amax(fmt.type, 0.0f);
    std::fill(scales_row, scales_row + cols, scale);
    std::fill(codes_row, codes_row + k,
              static_cast<uint8_t>(encode(fmt.type, act_quotient(act_range(fmt.type), 0.0f, scale))));
    return;
  }
  for (int64_t g = 0; g < cols; ++g) {
    const int64_t begin = g * group, end = std::min(k, begin + group);
    float amax = 0.0f;
    for (int64_t i = begin; i < end; ++i) amax = std::fmax(amax, std::fabs(load_element(x_type, row, i)));
    const float scale = act_scale_from_amax(fmt.type, amax);
    scales_row[g] = scale;
    quantize_act_slice(fmt.type, x_type, row, begin, end, scale, codes_row);
  }
}
} // namespace

Status quantize_act_cpu(const ActFormat &fmt, DType x_type, const void *x, int64_t m, int64_t k, int64_t ldx,
                        void *codes, float *scales) {
  Status st = check_act_quant(fmt, x_type, m, k, ldx);
  if (!st) return st;
  const int64_t group = act_group_extent(fmt, k);
  const int64_t cols = (k + group - 1) / group;
  const int64_t elem = x_type.storage_bytes();
  for (int64_t r = 0; r < m; ++r)
    quantize_row(fmt, x_type, static_cast<const uint8_t *>(x) + r * ldx * elem, k, group,
                 static_cast<uint8_t *>(codes) + r * k, scales + r * cols);
  return Status::Ok();
}

Status moe_permute_quantize_cpu(const ActFormat &fmt, DType x_type, const void *x, int64_t k, int64_t ldx,
                                const int32_t *sorted_ids, int64_t capacity, int64_t assignments, int32_t top_k,
                                void *codes, float *scales) {
  Status st = check_act_quant(fmt, x_type, capacity, k, ldx);
  if (!st) return st;
  if (top_k < 1) return Status::Error("top_k must be positive, got " + std::to_string(top_k));
  const int64_t group = act_group_extent(fmt, k);
  const int64_t cols = (k + group - 1) / group;
  const int64_t elem = x_type.storage_bytes();
  for (int64_t r = 0; r < capacity; ++r) {
    const int64_t a = sorted_ids[r];
    const void *row = a >= 0 && a < assignments ? static_cast<const uint8_t *>(x) + (a / top_k) * ldx * elem : nullptr;
    quantize_row(fmt, x_type, row, k, group, static_cast<uint8_t *>(codes) + r * k, scales + r * cols);
  }
  return Status::Ok();
}

} // namespace humming
