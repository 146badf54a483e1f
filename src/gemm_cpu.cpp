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
} // namespace

Status quantize_act_cpu(const ActFormat &fmt, DType x_type, const void *x, int64_t m, int64_t k, int64_t ldx,
                        void *codes, float *scales) {
  Status st = check_act_quant(fmt, x_type, m, k, ldx);
  if (!st) return st;
  const int64_t group = act_group_extent(fmt, k);
  const int64_t cols = (k + group - 1) / group;
  const int64_t elem = x_type.storage_bytes();
  for (int64_t r = 0; r < m; ++r) {
    const void *row = static_cast<const uint8_t *>(x) + r * ldx * elem;
    auto *out_row = static_cast<uint8_t *>(codes) + r * k;
    for (int64_t g = 0; g < cols; ++g) {
      const int64_t begin = g * group, end = std::min(k, begin + group);
      float amax = 0.0f;
      for (int64_t i = begin; i < end; ++i) amax = std::fmax(amax, std::fabs(load_element(x_type, row, i)));
      const float scale = act_scale_from_amax(fmt.type, amax);
      scales[r * cols + g] = scale;
      quantize_act_slice(fmt.type, x_type, row, begin, end, scale, out_row);
    }
  }
  return Status::Ok();
}

} // namespace humming
