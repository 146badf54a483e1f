// Packed extents and the CPU side of packing (the GPU side is pack.cu; both use layout/*.h).
#include <string>

#include "humming/humming.h"
#include "humming/layout/generic.h"

namespace humming {

const char *layout_name(int layout) {
  switch (layout) {
  case kLayoutGeneric:
    return "generic";
  default:
    return "unknown";
  }
}

namespace {
int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }
} // namespace

Status packed_dims(int layout, const WeightFormat &fmt, int64_t n, int64_t k, PackedDims *out) {
  if (layout != kLayoutGeneric)
    return Status::Error("unknown weight layout id " + std::to_string(layout) + "; this build knows layout 1 (generic)");
  if (n <= 0 || k <= 0)
    return Status::Error("weight extents must be positive, got n=" + std::to_string(n) + ", k=" + std::to_string(k));
  if (n > (int64_t{1} << 31) || k > (int64_t{1} << 31))
    return Status::Error("weight extents above 2^31 are not supported (n=" + std::to_string(n) +
                         ", k=" + std::to_string(k) + ")");
  PackedDims d;
  d.n = n;
  d.k = k;
  const int64_t gk = fmt.group_k;
  const int64_t gn = fmt.group_n;
  // K pads to whole words and whole K groups, N to the layout's multiple and whole N groups.
  d.k_pad = round_up(k, gk > layout_generic::kAlignK ? gk : layout_generic::kAlignK);
  d.n_pad = round_up(n, gn > layout_generic::kAlignN ? gn : layout_generic::kAlignN);
  d.group_k = gk == 0 ? d.k_pad : gk;
  d.group_n = gn;
  d.k_groups = d.k_pad / d.group_k;
  d.n_groups = d.n_pad / d.group_n;
  d.k_groups_logical = gk == 0 ? 1 : ceil_div(k, gk);
  d.n_groups_logical = ceil_div(n, gn);
  d.words_per_row = layout_generic::words_per_row(d.k_pad, static_cast<int>(fmt.code.bits));
  d.code_words = d.words_per_row * d.n_pad;
  *out = d;
  return Status::Ok();
}

Status pack_codes_cpu(int layout, const WeightFormat &fmt, const PackedDims &d, const uint8_t *codes,
                      uint32_t *packed) {
  if (layout != kLayoutGeneric) return Status::Error("unknown weight layout id " + std::to_string(layout));
  const int bits = static_cast<int>(fmt.code.bits);
  for (int64_t r = 0; r < d.n_pad; ++r)
    for (int64_t w = 0; w < d.words_per_row; ++w)
      packed[r * d.words_per_row + w] = r < d.n ? layout_generic::pack_word(codes + r * d.k, d.k, bits, w) : 0u;
  return Status::Ok();
}

Status unpack_codes_cpu(int layout, const WeightFormat &fmt, const PackedDims &d, const uint32_t *packed,
                        uint8_t *codes) {
  if (layout != kLayoutGeneric) return Status::Error("unknown weight layout id " + std::to_string(layout));
  const int bits = static_cast<int>(fmt.code.bits);
  for (int64_t r = 0; r < d.n; ++r)
    for (int64_t c = 0; c < d.k; ++c)
      codes[r * d.k + c] = static_cast<uint8_t>(layout_generic::code_at(packed + r * d.words_per_row, c, bits));
  return Status::Ok();
}

Status pack_groups_cpu(const PackedDims &d, int elem_bytes, const void *logical, void *packed) {
  for (int64_t kg = 0; kg < d.k_groups; ++kg)
    for (int64_t ng = 0; ng < d.n_groups; ++ng)
      copy_element(logical, group_source_index(kg, ng, d.k_groups_logical, d.n_groups_logical), packed,
                   kg * d.n_groups + ng, elem_bytes);
  return Status::Ok();
}

Status unpack_groups_cpu(const PackedDims &d, int elem_bytes, const void *packed, void *logical) {
  for (int64_t ng = 0; ng < d.n_groups_logical; ++ng)
    for (int64_t kg = 0; kg < d.k_groups_logical; ++kg)
      copy_element(packed, kg * d.n_groups + ng, logical, ng * d.k_groups_logical + kg, elem_bytes);
  return Status::Ok();
}

} // namespace humming
