// Packed extents and the CPU side of packing (the GPU side is pack.cu; both use layout/*.h).
#include <string>

#include "humming/humming.h"
#include "humming/layout/generic.h"
#include "humming/layout/sm80.h"
#include "humming/layout/sm90.h"
#include "humming/layout/sm90_a8.h"

namespace humming {

const char *layout_name(int layout) {
  switch (layout) {
  case kLayoutGeneric:
    return "generic";
  case kLayoutSm80:
    return "sm80";
  case kLayoutSm90:
    return "sm90";
  case kLayoutSm90A8:
    return "sm90a8";
  default:
    return "unknown";
  }
}

bool known_layout(int layout) {
  return layout == kLayoutGeneric || layout == kLayoutSm80 || layout == kLayoutSm90 || layout == kLayoutSm90A8;
}

namespace {
int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }
} // namespace

Status packed_dims(int layout, const WeightFormat &fmt, int64_t n, int64_t k, PackedDims *out) {
  if (!known_layout(layout))
    return Status::Error("unknown weight layout id " + std::to_string(layout) +
                         "; this build knows layouts 1 (generic), 2 (sm80), 3 (sm90) and 4 (sm90a8)");
  if (n <= 0 || k <= 0)
    return Status::Error("weight extents must be positive, got n=" + std::to_string(n) + ", k=" + std::to_string(k));
  if (n > (int64_t{1} << 31) || k > (int64_t{1} << 31))
    return Status::Error("weight extents above 2^31 are not supported (n=" + std::to_string(n) +
                         ", k=" + std::to_string(k) + ")");
  const int bits = static_cast<int>(fmt.code.bits);
  int64_t align_k = layout_generic::kAlignK, align_n = layout_generic::kAlignN;
  if (layout == kLayoutSm80) {
    if (!layout_sm80::supports_bits(bits))
      return Status::Error("layout 2 (sm80) holds 4- and 8-bit codes; " + to_string(fmt.code) + " has " +
                           std::to_string(bits) + " bits (use layout 1, generic)");
    align_k = layout_sm80::kAlignK;
    align_n = layout_sm80::kAlignN;
  } else if (layout == kLayoutSm90) {
    if (!layout_sm90::supports_bits(bits))
      return Status::Error("layout 3 (sm90) holds 4- and 8-bit codes; " + to_string(fmt.code) + " has " +
                           std::to_string(bits) + " bits (use layout 1, generic)");
    align_k = layout_sm90::kAlignK;
    align_n = layout_sm90::kAlignN;
  } else if (layout == kLayoutSm90A8) {
    if (!layout_sm90_a8::supports_bits(bits))
      return Status::Error("layout 4 (sm90a8) holds 4-bit codes; " + to_string(fmt.code) + " has " +
                           std::to_string(bits) +
                           " bits (use layout 1, generic, which the 8-bit activation "
                           "kernels read for 8-bit codes)");
    align_k = layout_sm90_a8::kAlignK;
    align_n = layout_sm90_a8::kAlignN;
  }
  PackedDims d;
  d.n = n;
  d.k = k;
  const int64_t gk = fmt.group_k;
  const int64_t gn = fmt.group_n;
  // K pads to the layout's multiple and whole K groups, N to the layout's multiple and whole N groups.
  d.k_pad = round_up(k, gk > align_k ? gk : align_k);
  d.n_pad = round_up(n, gn > align_n ? gn : align_n);
  d.group_k = gk == 0 ? d.k_pad : gk;
  d.group_n = gn;
  d.k_groups = d.k_pad / d.group_k;
  d.n_groups = d.n_pad / d.group_n;
  d.k_groups_logical = gk == 0 ? 1 : ceil_div(k, gk);
  d.n_groups_logical = ceil_div(n, gn);
  d.words_per_row = d.k_pad * bits / 32;
  d.code_words = d.words_per_row * d.n_pad;
  *out = d;
  return Status::Ok();
}

uint32_t packed_code(int layout, const PackedDims &d, DType code, const uint32_t *packed, int64_t n, int64_t k) {
  const int bits = static_cast<int>(code.bits);
  if (layout == kLayoutSm80) return layout_sm80::code_at(packed, n, k, bits, d.k_pad / layout_sm80::kBlockK);
  if (layout == kLayoutSm90)
    return layout_sm90::code_at(packed, n, k, bits, d.n_pad / layout_sm90::kBlockN, layout_sm90::spread_fp4(code));
  if (layout == kLayoutSm90A8) return layout_sm90_a8::code_at(packed, d.n_pad, n, k, layout_sm90_a8::fp4_order(code));
  return layout_generic::code_at(packed + n * d.words_per_row, k, bits);
}

Status pack_codes_cpu(int layout, const WeightFormat &fmt, const PackedDims &d, const uint8_t *codes,
                      uint32_t *packed) {
  const int bits = static_cast<int>(fmt.code.bits);
  if (layout == kLayoutSm80) {
    const int64_t k_blocks = d.k_pad / layout_sm80::kBlockK;
    for (int64_t w = 0; w < d.code_words; ++w) packed[w] = layout_sm80::pack_word(codes, d.n, d.k, bits, k_blocks, w);
    return Status::Ok();
  }
  if (layout == kLayoutSm90) {
    const int64_t n_blocks = d.n_pad / layout_sm90::kBlockN;
    const bool spread = layout_sm90::spread_fp4(fmt.code);
    for (int64_t w = 0; w < d.code_words; ++w)
      packed[w] = layout_sm90::pack_word(codes, d.n, d.k, bits, n_blocks, w, spread);
    return Status::Ok();
  }
  if (layout != kLayoutGeneric && layout != kLayoutSm90A8)
    return Status::Error("unknown weight layout id " + std::to_string(layout));
  const bool chunks = layout == kLayoutSm90A8, fp4 = layout_sm90_a8::fp4_order(fmt.code);
  for (int64_t r = 0; r < d.n_pad; ++r)
    for (int64_t w = 0; w < d.words_per_row; ++w)
      packed[chunks ? layout_sm90_a8::word_index(d.n_pad, r, w) : r * d.words_per_row + w] =
          r >= d.n ? 0u
          : chunks ? layout_sm90_a8::pack_word(codes + r * d.k, d.k, w, fp4)
                   : layout_generic::pack_word(codes + r * d.k, d.k, bits, w);
  return Status::Ok();
}

Status unpack_codes_cpu(int layout, const WeightFormat &fmt, const PackedDims &d, const uint32_t *packed,
                        uint8_t *codes) {
  if (!known_layout(layout)) return Status::Error("unknown weight layout id " + std::to_string(layout));
  for (int64_t r = 0; r < d.n; ++r)
    for (int64_t c = 0; c < d.k; ++c)
      codes[r * d.k + c] = static_cast<uint8_t>(packed_code(layout, d, fmt.code, packed, r, c));
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
