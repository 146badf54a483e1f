// The GPU side of packing and unpacking: one thread per output element, the same index math as
// the CPU side (layout/*.h).
#include <cuda_runtime.h>

#include <string>

#include "humming/humming.h"
#include "humming/layout/generic.h"
#include "humming/layout/sm80.h"
#include "humming/layout/sm90.h"
#include "humming/layout/sm90_a8.h"

namespace humming {
namespace {

constexpr int kThreads = 256;

__global__ void pack_codes_generic_kernel(PackedDims d, int bits, const uint8_t *codes, uint32_t *packed) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= d.code_words) return;
  const int64_t r = i / d.words_per_row, w = i % d.words_per_row;
  packed[i] = r < d.n ? layout_generic::pack_word(codes + r * d.k, d.k, bits, w) : 0u;
}

__global__ void pack_codes_sm80_kernel(PackedDims d, int bits, const uint8_t *codes, uint32_t *packed) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= d.code_words) return;
  packed[i] = layout_sm80::pack_word(codes, d.n, d.k, bits, d.k_pad / layout_sm80::kBlockK, i);
}

// `spread`: layout_sm90::spread_fp4 of the code type (e2m1 spreads its bits over the word).
__global__ void pack_codes_sm90_kernel(PackedDims d, int bits, bool spread, const uint8_t *codes, uint32_t *packed) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= d.code_words) return;
  packed[i] = layout_sm90::pack_word(codes, d.n, d.k, bits, d.n_pad / layout_sm90::kBlockN, i, spread);
}

// `fp4`: layout_sm90_a8::fp4_order of the code type (e2m1 spreads its bits over the word).
__global__ void pack_codes_sm90_a8_kernel(PackedDims d, bool fp4, const uint8_t *codes, uint32_t *packed) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= d.code_words) return;
  int64_t r, w;
  layout_sm90_a8::word_place(d.n_pad, i, r, w);
  packed[i] = r < d.n ? layout_sm90_a8::pack_word(codes + r * d.k, d.k, w, fp4) : 0u;
}

__global__ void unpack_codes_sm90_a8_kernel(PackedDims d, bool fp4, const uint32_t *packed, uint8_t *codes) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= d.n * d.k) return;
  const int64_t r = i / d.k, c = i % d.k;
  codes[i] = static_cast<uint8_t>(layout_sm90_a8::code_at(packed, d.n_pad, r, c, fp4));
}

__global__ void unpack_codes_sm90_kernel(PackedDims d, int bits, bool spread, const uint32_t *packed, uint8_t *codes) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= d.n * d.k) return;
  codes[i] = static_cast<uint8_t>(
      layout_sm90::code_at(packed, i / d.k, i % d.k, bits, d.n_pad / layout_sm90::kBlockN, spread));
}

__global__ void unpack_codes_sm80_kernel(PackedDims d, int bits, const uint32_t *packed, uint8_t *codes) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= d.n * d.k) return;
  codes[i] = static_cast<uint8_t>(layout_sm80::code_at(packed, i / d.k, i % d.k, bits, d.k_pad / layout_sm80::kBlockK));
}

__global__ void unpack_codes_generic_kernel(PackedDims d, int bits, const uint32_t *packed, uint8_t *codes) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= d.n * d.k) return;
  const int64_t r = i / d.k, c = i % d.k;
  codes[i] = static_cast<uint8_t>(layout_generic::code_at(packed + r * d.words_per_row, c, bits));
}

__global__ void pack_groups_kernel(PackedDims d, int bytes, const void *logical, void *packed) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= d.k_groups * d.n_groups) return;
  const int64_t kg = i / d.n_groups, ng = i % d.n_groups;
  copy_element(logical, group_source_index(kg, ng, d.k_groups_logical, d.n_groups_logical), packed, i, bytes);
}

__global__ void unpack_groups_kernel(PackedDims d, int bytes, const void *packed, void *logical) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= d.k_groups_logical * d.n_groups_logical) return;
  const int64_t ng = i / d.k_groups_logical, kg = i % d.k_groups_logical;
  copy_element(packed, kg * d.n_groups + ng, logical, i, bytes);
}

unsigned blocks_for(int64_t count) { return static_cast<unsigned>((count + kThreads - 1) / kThreads); }

Status launched(const char *what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return Status::Error(std::string(what) + " failed to launch: " + cudaGetErrorString(e));
  return Status::Ok();
}

} // namespace

Status pack_codes_cuda(int layout, const WeightFormat &fmt, const PackedDims &d, const uint8_t *codes, uint32_t *packed,
                       void *stream) {
  if (!known_layout(layout)) return Status::Error("unknown weight layout id " + std::to_string(layout));
  if (d.code_words == 0) return Status::Ok();
  if (layout == kLayoutSm90A8) {
    pack_codes_sm90_a8_kernel<<<blocks_for(d.code_words), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        d, layout_sm90_a8::fp4_order(fmt.code), codes, packed);
    return launched("packing codes on the GPU");
  }
  if (layout == kLayoutSm90) {
    pack_codes_sm90_kernel<<<blocks_for(d.code_words), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        d, static_cast<int>(fmt.code.bits), layout_sm90::spread_fp4(fmt.code), codes, packed);
    return launched("packing codes on the GPU");
  }
  if (layout == kLayoutSm80) {
    pack_codes_sm80_kernel<<<blocks_for(d.code_words), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        d, static_cast<int>(fmt.code.bits), codes, packed);
    return launched("packing codes on the GPU");
  }
  pack_codes_generic_kernel<<<blocks_for(d.code_words), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      d, static_cast<int>(fmt.code.bits), codes, packed);
  return launched("packing codes on the GPU");
}

Status unpack_codes_cuda(int layout, const WeightFormat &fmt, const PackedDims &d, const uint32_t *packed,
                         uint8_t *codes, void *stream) {
  if (!known_layout(layout)) return Status::Error("unknown weight layout id " + std::to_string(layout));
  if (d.n * d.k == 0) return Status::Ok();
  if (layout == kLayoutSm90A8) {
    unpack_codes_sm90_a8_kernel<<<blocks_for(d.n * d.k), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        d, layout_sm90_a8::fp4_order(fmt.code), packed, codes);
    return launched("unpacking codes on the GPU");
  }
  if (layout == kLayoutSm90) {
    unpack_codes_sm90_kernel<<<blocks_for(d.n * d.k), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        d, static_cast<int>(fmt.code.bits), layout_sm90::spread_fp4(fmt.code), packed, codes);
    return launched("unpacking codes on the GPU");
  }
  if (layout == kLayoutSm80) {
    unpack_codes_sm80_kernel<<<blocks_for(d.n * d.k), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        d, static_cast<int>(fmt.code.bits), packed, codes);
    return launched("unpacking codes on the GPU");
  }
  unpack_codes_generic_kernel<<<blocks_for(d.n * d.k), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      d, static_cast<int>(fmt.code.bits), packed, codes);
  return launched("unpacking codes on the GPU");
}

Status pack_groups_cuda(const PackedDims &d, int elem_bytes, const void *logical, void *packed, void *stream) {
  const int64_t count = d.k_groups * d.n_groups;
  if (count == 0) return Status::Ok();
  pack_groups_kernel<<<blocks_for(count), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(d, elem_bytes, logical,
                                                                                            packed);
  return launched("packing scales on the GPU");
}

Status unpack_groups_cuda(const PackedDims &d, int elem_bytes, const void *packed, void *logical, void *stream) {
  const int64_t count = d.k_groups_logical * d.n_groups_logical;
  if (count == 0) return Status::Ok();
  unpack_groups_kernel<<<blocks_for(count), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(d, elem_bytes, packed,
                                                                                              logical);
  return launched("unpacking scales on the GPU");
}

} // namespace humming
