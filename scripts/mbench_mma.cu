// Tensor-core issue rates on the GPU machine, for choosing decode tiles: cycles per SM for one
// WGMMA m64nNk16 with a register A operand (the sm90 backend's instruction) and for one mma.sync
// m16n8k16 (the sm80 backend's), at several warpgroup / warp counts per SM.
// Build and run on the GPU machine:
//   nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 -I include scripts/mbench_mma.cu -o /tmp/mbench &&
//   /tmp/mbench
#include <cuda_runtime.h>

#include <cstdio>

#include "humming/backend/sm80/ptx.h"
#include "humming/backend/sm90/ptx.h"

using namespace humming;

constexpr int kIters = 512;

// Each warpgroup: kIters groups of `Chain` WGMMAs into one accumulator (the mainloop's k steps),
// waiting after each group (Wait0) or only at the end.
template <int N, int Chain, bool Wait0>
__global__ void __launch_bounds__(512, 1) wgmma_rate(long long *cycles, float *sink) {
  extern __shared__ __align__(1024) char smem[];
  for (int i = threadIdx.x; i < 16 * 1024 / 4; i += blockDim.x) reinterpret_cast<uint32_t *>(smem)[i] = 0x3F803F80u;
  __syncthreads();
  const uint64_t desc = sm90::desc_sw128(sm90::smem_addr(smem));
  uint32_t a[4] = {0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u};
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = 0.0f;
  const long long t0 = clock64();
  for (int it = 0; it < kIters; ++it) {
    if (Wait0) sm90::fence_regs(a); // (writing A while a group reads it would serialize)
    sm90::wgmma_fence();
#pragma unroll
    for (int c = 0; c < Chain; ++c) sm90::Wgmma<N, true>::run(d, a, desc + 2 * (c % 4), 1);
    sm90::wgmma_commit();
    if (Wait0) sm90::wgmma_wait<0>();
  }
  sm90::wgmma_wait<0>();
  sm90::fence_regs(d);
  __syncthreads();
  const long long t1 = clock64();
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
  float s = 0.0f;
  for (int i = 0; i < N / 2; ++i) s += d[i];
  if (s == 12345.0f) sink[threadIdx.x] = s;
}

// Each warp: kIters x 8 mma.sync m16n8k16 over Acc independent accumulators.
template <int Acc> __global__ void mma_rate(long long *cycles, float *sink) {
  uint32_t a[4] = {0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u};
  uint32_t b[2] = {0x3F803F80u, 0x3F803F80u};
  float d[Acc][4] = {};
  const long long t0 = clock64();
  for (int it = 0; it < kIters; ++it) {
#pragma unroll
    for (int c = 0; c < 8; ++c) sm80::mma_16816<true>(d[c % Acc], a, b[0], b[1]);
  }
  __syncthreads();
  const long long t1 = clock64();
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
  float s = 0.0f;
  for (int j = 0; j < Acc; ++j) s += d[j][0] + d[j][1] + d[j][2] + d[j][3];
  if (s == 12345.0f) sink[threadIdx.x] = s;
}

template <class F> double per_sm_cycles(F kernel, int threads, int smem, double ops_per_block) {
  long long *cycles;
  float *sink;
  cudaMalloc(&cycles, 132 * sizeof(long long));
  cudaMalloc(&sink, 1024 * sizeof(float));
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  kernel<<<132, threads, smem>>>(cycles, sink);
  kernel<<<132, threads, smem>>>(cycles, sink);
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    printf("error %s\n", cudaGetErrorString(e));
    return -1;
  }
  long long h[132], mx = 0;
  cudaMemcpy(h, cycles, sizeof(h), cudaMemcpyDeviceToHost);
  for (long long c : h) mx = c > mx ? c : mx;
  cudaFree(cycles);
  cudaFree(sink);
  return static_cast<double>(mx) / ops_per_block;
}

template <int N, int Chain, bool Wait0> void wg(int wgs) {
  const double c = per_sm_cycles(wgmma_rate<N, Chain, Wait0>, 128 * wgs, 16 * 1024, double(wgs) * kIters * Chain);
  printf("wgmma m64n%dk16 RS  chain %d %-9s x%d warpgroups: %6.1f cycles per wgmma per SM (%5.1f per 1024 weights)\n",
         N, Chain, Wait0 ? "wait<0>" : "no wait", wgs, c, c);
}

template <int Acc> void mm(int warps) {
  const double c = per_sm_cycles(mma_rate<Acc>, 32 * warps, 0, double(warps) * kIters * 8);
  printf("mma.sync m16n8k16 acc %d x%2d warps: %6.1f cycles per mma per SM (%5.1f per 1024 weights)\n", Acc, warps, c,
         4 * c);
}

int main() {
  for (int w : {1, 2, 4}) {
    wg<8, 4, true>(w);
    wg<8, 8, true>(w);
    wg<8, 16, true>(w);
    wg<16, 8, true>(w);
    wg<32, 8, true>(w);
    wg<64, 8, true>(w);
    wg<128, 8, true>(w);
  }
  for (int w : {4, 8, 16}) {
    mm<1>(w);
    mm<4>(w);
  }
  return 0;
}
