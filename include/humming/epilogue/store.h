// Output stores shared by the tensor-core backends: bias, rounding to the output type, and pairs
// of adjacent channels stored as one access where the address allows it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "humming/humming.h"
#include "humming/numeric/fast_dequant.h"

namespace humming {
namespace epilogue {

// Output and bias elements with the hardware conversions (cvt.rn: ties to even, overflow to
// infinity, subnormals kept), the rounding encode() in format/dtype.h spells out in software;
// that general path per element made the epilogue thousands of instructions of cold code.
// OutId: DType id of the output (f16, bf16 or f32).
template <uint32_t OutId> __device__ __forceinline__ float load_out(const void *base, int64_t i) {
  if constexpr (DType::from_id(OutId).bits == 32)
    return static_cast<const float *>(base)[i];
  else
    return numeric::Operand<OutId == dtypes::bf16.id()>::to_float(static_cast<const uint16_t *>(base)[i]);
}

// Output elements i and i + 1, where element i is aligned for the pair (one 32-bit store, 64-bit for f32).
template <uint32_t OutId> __device__ __forceinline__ void store_out_pair_aligned(void *base, int64_t i, float2 v) {
  if constexpr (DType::from_id(OutId).bits == 32)
    *reinterpret_cast<float2 *>(static_cast<float *>(base) + i) = v;
  else
    *reinterpret_cast<uint32_t *>(static_cast<uint16_t *>(base) + i) =
        numeric::Operand<OutId == dtypes::bf16.id()>::pair(v.x, v.y);
}

template <uint32_t OutId> __device__ __forceinline__ void store_out_pair(void *base, int64_t i, float2 v, bool both) {
  constexpr int kBytes = static_cast<int>(DType::from_id(OutId).bits) / 8;
  if (both && (reinterpret_cast<uintptr_t>(base) + i * kBytes) % (2 * kBytes) == 0) {
    store_out_pair_aligned<OutId>(base, i, v);
  } else if constexpr (kBytes == 4) {
    float *o = static_cast<float *>(base) + i;
    o[0] = v.x;
    if (both) o[1] = v.y;
  } else {
    const uint32_t w = numeric::Operand<OutId == dtypes::bf16.id()>::pair(v.x, v.y);
    uint16_t *o = static_cast<uint16_t *>(base) + i;
    o[0] = static_cast<uint16_t>(w);
    if (both) o[1] = static_cast<uint16_t>(w >> 16);
  }
}

// `v` rounded to the output type (as a store of it would round it) and back: exact in fp32.
template <uint32_t OutId> __device__ __forceinline__ float round_out(float v) {
  using Op = numeric::Operand<OutId == dtypes::bf16.id()>;
  if constexpr (DType::from_id(OutId).bits == 32)
    return v;
  else
    return Op::to_float2(Op::pair(v, v)).x;
}

// Output channels n and n + 1 of row m of an output of `cols` columns (n < cols): bias added,
// rounded to the output type, one store where the address allows it (the usual case: even ldo,
// aligned output).
template <uint32_t OutId>
__device__ __forceinline__ void write_pair(const GemmArgs &a, int64_t m, int64_t n, float2 v, int64_t cols) {
  const bool both = n + 1 < cols;
  if (a.bias != nullptr) {
    v.x += load_out<OutId>(a.bias, n);
    if (both) v.y += load_out<OutId>(a.bias, n + 1);
  }
  store_out_pair<OutId>(a.out, m * a.ldo + n, v, both);
}

// The same for an output of the problem's n columns.
template <uint32_t OutId>
__device__ __forceinline__ void write_pair(const GemmArgs &a, int64_t m, int64_t n, float2 v) {
  write_pair<OutId>(a, m, n, v, a.dims.n);
}

// Factors of the rows of a thread whose sums hold tokens m and m + 8 (the WGMMA fragment with the
// tokens on M): `global` times each token's fp32 activation scale with TokenScales (0 past a.m),
// else `global`.
template <bool TokenScales>
__device__ __forceinline__ void token_row_factors(const GemmArgs &a, int64_t m, float global, float (&ts)[2]) {
  ts[0] = ts[1] = global;
  if constexpr (TokenScales)
#pragma unroll
    for (int h = 0; h < 2; ++h) ts[h] = m + 8 * h < a.m ? global * a.a_scales[(m + 8 * h) * a.a_scale_cols] : 0.0f;
}

// Factors of the rows of a thread whose sums hold channels n and n + 8 (the WGMMA fragment with the
// channels on M): the global scale (1 without one) times, with PerChannel, each channel's scale from
// `scales` (ScaleId: their DType id; 0 past n_pad); without, the sums carry the weight's scales
// already (K groups or blocks) and only the global scale is left.
template <uint32_t ScaleId, bool PerChannel>
__device__ __forceinline__ void channel_row_factors(const GemmArgs &a, const void *scales, int64_t n, float (&f)[2]) {
  const float global = a.global_scale != nullptr ? *a.global_scale : 1.0f;
  f[0] = f[1] = global;
  if constexpr (PerChannel)
#pragma unroll
    for (int h = 0; h < 2; ++h) f[h] = n + 8 * h < a.dims.n_pad ? global * load_out<ScaleId>(scales, n + 8 * h) : 0.0f;
}

// The weight's per-channel scales (`scales`: a.scales, or a grouped GEMM's expert's) of channels c
// and c + 1 (ScaleId: their DType id; 0 past n_pad), or 1 where ScaleId is 0 (no per-channel scales).
template <uint32_t ScaleId>
__device__ __forceinline__ void channel_pair_factors(const GemmArgs &a, const void *scales, int64_t c, float (&f)[2]) {
  f[0] = f[1] = 1.0f;
  if constexpr (ScaleId != 0)
#pragma unroll
    for (int e = 0; e < 2; ++e) f[e] = c + e < a.dims.n_pad ? load_out<ScaleId>(scales, c + e) : 0.0f;
}

} // namespace epilogue
} // namespace humming
