// The generic backend with the dense scheduler: plain CUDA, fp32 accumulation, any format.
//
// It is the fallback for formats without a fast instance and the second oracle for fast kernels,
// so it favours obviously-correct code over speed: each block stages one K slice of dequantized
// activations and weights in shared memory as fp32 and every thread accumulates a 2 x 4 patch of
// the output tile with fused multiply-adds.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "humming/humming.h"
#include "humming/numeric/dequant.h"
#include "humming/scheduler/dense.h"

namespace humming {
namespace generic {

constexpr int kBlockM = 32;   // output rows per block
constexpr int kBlockN = 64;   // output channels per block
constexpr int kBlockK = 32;   // inputs staged per step
constexpr int kThreads = 256; // 16 x 16 threads, each 2 rows x 4 channels
constexpr int kThreadRows = 2;
constexpr int kThreadCols = 4;

// ActId:   DType id of the activation storage (bf16, f16, e4m3, e5m2, i8); its scales are runtime.
// CodeId:  DType id of the weight codes (any width from 1 to 8 bits).
// ScaleId: DType id of the weight scales, 0 when the codes are not scaled.
// Zero:    ZeroKind of the weight's zero points.
// OutId:   DType id of the output (f16, bf16, f32).
template <uint32_t ActId, uint32_t CodeId, uint32_t ScaleId, int Zero, uint32_t OutId>
__global__ void __launch_bounds__(kThreads) dense_kernel(GemmArgs args) {
  constexpr DType act_t = DType::from_id(ActId);
  constexpr DType code_t = DType::from_id(CodeId);
  constexpr DType scale_t = DType::from_id(ScaleId);
  constexpr DType out_t = DType::from_id(OutId);
  // +1 column breaks the bank conflicts of the transposed stores.
  __shared__ float a_tile[kBlockK][kBlockM + 1];
  __shared__ float w_tile[kBlockK][kBlockN + 1];

  const DenseTile tile = dense_tile(blockIdx.x, blockIdx.y, kBlockM, kBlockN);
  const int64_t m_total = args.m, n_total = args.dims.n, k_total = args.dims.k;
  const int64_t act_group = act_group_extent(args.fmt.act, k_total);
  const float global = global_scale_value(args);
  const int tid = threadIdx.x;
  const int row0 = (tid / 16) * kThreadRows;
  const int col0 = (tid % 16) * kThreadCols;

  float acc[kThreadRows][kThreadCols] = {};
  for (int64_t k0 = 0; k0 < k_total; k0 += kBlockK) {
    for (int i = tid; i < kBlockM * kBlockK; i += kThreads) {
      const int r = i / kBlockK, c = i % kBlockK;
      const int64_t m = tile.m0 + r, k = k0 + c;
      a_tile[c][r] = (m < m_total && k < k_total) ? act_value(args, act_t, act_group, m, k) : 0.0f;
    }
    for (int i = tid; i < kBlockN * kBlockK; i += kThreads) {
      const int r = i / kBlockK, c = i % kBlockK;
      const int64_t n = tile.n0 + r, k = k0 + c;
      w_tile[c][r] =
          (n < n_total && k < k_total) ? weight_value_generic(args, code_t, scale_t, Zero, global, n, k) : 0.0f;
    }
    __syncthreads();
#pragma unroll 4
    for (int kk = 0; kk < kBlockK; ++kk) {
      float a[kThreadRows], w[kThreadCols];
#pragma unroll
      for (int r = 0; r < kThreadRows; ++r) a[r] = a_tile[kk][row0 + r];
#pragma unroll
      for (int c = 0; c < kThreadCols; ++c) w[c] = w_tile[kk][col0 + c];
#pragma unroll
      for (int r = 0; r < kThreadRows; ++r)
#pragma unroll
        for (int c = 0; c < kThreadCols; ++c) acc[r][c] = fmaf(a[r], w[c], acc[r][c]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < kThreadRows; ++r) {
    const int64_t m = tile.m0 + row0 + r;
    if (m >= m_total) continue;
#pragma unroll
    for (int c = 0; c < kThreadCols; ++c) {
      const int64_t n = tile.n0 + col0 + c;
      if (n >= n_total) continue;
      float v = acc[r][c];
      if (args.bias != nullptr) v += load_element(out_t, args.bias, n);
      store_element(out_t, args.out, m * args.ldo + n, v);
    }
  }
}

template <uint32_t ActId, uint32_t CodeId, uint32_t ScaleId, int Zero, uint32_t OutId>
Status can_implement(const GemmArgs &args) {
  if (args.layout != kLayoutGeneric)
    return Status::Error(std::string("the generic backend reads weights packed for layout 1 (generic), not layout ") +
                         std::to_string(args.layout) + " (" + layout_name(args.layout) + ")");
  if (dense_grid_rows(args.m, kBlockM) > kMaxGridRows)
    return Status::Error("m=" + std::to_string(args.m) + " needs more than " + std::to_string(kMaxGridRows) +
                         " row tiles of " + std::to_string(kBlockM) + "; the generic backend takes m up to " +
                         std::to_string(static_cast<int64_t>(kMaxGridRows) * kBlockM));
  return Status::Ok();
}

template <uint32_t ActId, uint32_t CodeId, uint32_t ScaleId, int Zero, uint32_t OutId>
size_t workspace_bytes(const GemmArgs &) {
  return 0;
}

// Loads the kernel (its attributes are read, which needs it loaded).
template <uint32_t ActId, uint32_t CodeId, uint32_t ScaleId, int Zero, uint32_t OutId> Status prepare() {
  cudaFuncAttributes attr;
  const cudaError_t e = cudaFuncGetAttributes(&attr, dense_kernel<ActId, CodeId, ScaleId, Zero, OutId>);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status::Error(std::string("loading the generic kernel failed: ") + cudaGetErrorString(e));
  }
  return Status::Ok();
}

template <uint32_t ActId, uint32_t CodeId, uint32_t ScaleId, int Zero, uint32_t OutId>
Status launch(const GemmArgs &args, void *stream) {
  if (args.m == 0) return Status::Ok();
  const dim3 grid(static_cast<unsigned>(dense_grid_cols(args.dims.n, kBlockN)),
                  static_cast<unsigned>(dense_grid_rows(args.m, kBlockM)));
  dense_kernel<ActId, CodeId, ScaleId, Zero, OutId><<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(args);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return Status::Error(std::string("generic kernel failed to launch: ") + cudaGetErrorString(e));
  return Status::Ok();
}

} // namespace generic
} // namespace humming
