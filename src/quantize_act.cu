// Activation quantization on the GPU: one block per (token, K group); the block reduces amax, then
// every thread encodes its share with the shared arithmetic of numeric/act_quant.h.
#include <cuda_runtime.h>

#include <string>

#include "humming/humming.h"
#include "humming/numeric/act_quant.h"

namespace humming {
namespace {

constexpr int kThreads = 128;

__global__ void quantize_act_kernel(ActFormat fmt, DType x_t, const void *x, int64_t k, int64_t ldx, int64_t group,
                                    int64_t cols, uint8_t *codes, float *scales) {
  const int64_t r = blockIdx.y, g = blockIdx.x;
  const int64_t begin = g * group, end = min(k, begin + group);
  const void *row = static_cast<const uint8_t *>(x) + r * ldx * x_t.storage_bytes();
  float amax = 0.0f;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) amax = fmaxf(amax, fabsf(load_element(x_t, row, i)));
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = amax;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + s]);
    __syncthreads();
  }
  const float scale = act_scale_from_amax(fmt.type, partial[0]);
  if (threadIdx.x == 0) scales[r * cols + g] = scale;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads)
    quantize_act_slice(fmt.type, x_t, row, i, i + 1, scale, codes + r * k);
}

} // namespace

Status quantize_act_cuda(const ActFormat &fmt, DType x_type, const void *x, int64_t m, int64_t k, int64_t ldx,
                         void *codes, float *scales, void *stream) {
  if (fmt.granularity == ActScale::kNone)
    return Status::Error("activation format " + to_string(fmt) +
                         " is not quantized; quantize_act takes e4m3, e5m2 or i8 with -pt or -g{K}");
  if (!(x_type == dtypes::f32 || x_type == dtypes::f16 || x_type == dtypes::bf16))
    return Status::Error("activations to quantize must be f32, f16 or bf16, not " + to_string(x_type));
  if (m < 0 || k <= 0 || ldx < k) return Status::Error("activation extents must be m >= 0, k > 0 and ldx >= k");
  if (m > 65535)
    return Status::Error("quantize_act on the GPU takes at most 65535 rows at once, got " + std::to_string(m));
  if (m == 0) return Status::Ok();
  const int64_t group = act_group_extent(fmt, k);
  const int64_t cols = (k + group - 1) / group;
  quantize_act_kernel<<<dim3(static_cast<unsigned>(cols), static_cast<unsigned>(m)), kThreads, 0,
                        static_cast<cudaStream_t>(stream)>>>(fmt, x_type, x, k, ldx, group, cols,
                                                             static_cast<uint8_t *>(codes), scales);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return Status::Error(std::string("quantize_act kernel failed to launch: ") + cudaGetErrorString(e));
  return Status::Ok();
}

} // namespace humming
