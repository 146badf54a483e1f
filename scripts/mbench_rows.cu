// Read bandwidth of the W4A8 decode kernels' weight stream on the GPU machine, without compute:
// each block's producer thread fills a ring of BN x 64-byte stages (the box the sm90 8-bit
// activation kernels copy per stage of 4-bit codes, in the 64-byte swizzle) by TMA through a 2-D
// tensor map, and BN / 64 "consumer" warps wait for each stage and hand it back at once. It tells
// whether the place of a stage's bytes in memory, not the kernel, caps the decode pace.
//   nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 -I include scripts/mbench_rows.cu -o /tmp/mr && /tmp/mr
//
// Placements of an n x k weight of 4-bit codes (k / 2 bytes a channel), a stage = K tile ks
// (128 inputs, 64 bytes a channel) of the BN channels of tile t:
//   rows:   the generic row order (layout 4 today): row c holds channel c's k / 2 bytes, so a stage
//           is BN pieces of 64 bytes, k / 2 bytes apart;
//   kmajor: K tile ks of every channel together ([k / 128][n][64 bytes]): a stage is BN x 64
//           contiguous bytes, the tiles of one K tile side by side;
//   nmajor: each 64-channel block's K tiles together ([n / 64][k / 128][64][64 bytes]): a stage is
//           BN / 64 runs of 4 KiB, one box each, and a block's stages follow one another.
// Each with the tensor map's L2 promotion none, 128 or 256 bytes (the kernels use 256).
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdio>

#include "humming/backend/sm90/ptx.h"
#include "mbench_ring.cuh"

using namespace humming::sm90;

struct Cfg {
  int pattern; // 0 rows, 1 kmajor, 2 nmajor
  int n, k, bn, stages;
};

__global__ void __launch_bounds__(128 + 4 * 32, 1)
    stream(const __grid_constant__ CUtensorMap map, Cfg c, int blocks, int *sink) {
  extern __shared__ __align__(1024) char smem[];
  const uint32_t ring = smem_addr(smem);
  const int stage_bytes = c.bn * 64, warps = c.bn / 64;
  const uint32_t bars = ring + c.stages * stage_bytes;
  if (threadIdx.x == 0) {
    for (int s = 0; s < c.stages; ++s) mbar_init(bars + 8 * s, 1), mbar_init(bars + 8 * (c.stages + s), warps);
    mbar_init_fence();
  }
  __syncthreads();
  const int tiles = c.n / c.bn, k_tiles = c.k / 128;
  // Each block an equal share of the (tile, K tile) sequence, as the persistent stream-K plan gives
  // decode launches.
  const long units = long(tiles) * k_tiles, u0 = units * blockIdx.x / blocks, u1 = units * (blockIdx.x + 1) / blocks;
  if (threadIdx.x == 0) {
    prefetch_tensor_map(&map);
    uint32_t s = 0, ph = 0;
    for (long u = u0; u < u1; ++u) {
      const int t = static_cast<int>(u / k_tiles), ks = static_cast<int>(u % k_tiles);
      mbar_wait(bars + 8 * (c.stages + s), ph ^ 1u);
      mbar_arrive_expect_tx(bars + 8 * s, stage_bytes);
      const uint32_t dst = ring + s * stage_bytes;
      if (c.pattern == 0) {
        tensor_copy_2d(dst, &map, ks * 64, t * c.bn, bars + 8 * s);
      } else if (c.pattern == 1) {
        tensor_copy_2d(dst, &map, 0, ks * c.n + t * c.bn, bars + 8 * s);
      } else {
        for (int j = 0; j < warps; ++j)
          tensor_copy_2d(dst + j * 4096, &map, 0, ((t * warps + j) * k_tiles + ks) * 64, bars + 8 * s);
      }
      if (++s == uint32_t(c.stages)) s = 0, ph ^= 1u;
    }
  } else if (threadIdx.x >= 128 && threadIdx.x < 128 + 32 * warps && threadIdx.x % 32 == 0) {
    drain_stages(smem, bars, c.stages, stage_bytes, u1 - u0, sink);
  }
}

int main() {
  void *fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q);
  const auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  printf("%s, %d SMs\n", prop.name, sms);
  char *w, *flush;
  int *sink;
  const long max_bytes = 57344L * 8192 / 2;
  cudaMalloc(&w, max_bytes);
  cudaMemset(w, 1, max_bytes);
  cudaMalloc(&flush, 256 << 20);
  cudaMalloc(&sink, 4);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const char *names[] = {"rows", "kmajor", "nmajor"};
  const CUtensorMapL2promotion promos[] = {CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B};
  const int promo_bytes[] = {0, 128, 256};
  const int shapes[][2] = {{28672, 8192}, {8192, 8192}, {8192, 28672}, {57344, 8192}};
  for (const auto &sh : shapes)
    for (int bn : {128, 256})
      for (int stages : {6, 10})
        for (int pattern = 0; pattern < 3; ++pattern)
          for (int pr = 0; pr < 3; ++pr) {
            if (pattern != 0 && pr != 2) continue; // contiguous stages: the promotion hardly matters
            const int n = sh[0], k = sh[1];
            const long bytes = long(n) * k / 2;
            CUtensorMap map;
            cuuint64_t dims[2], strides[1];
            cuuint32_t box[2], es[2] = {1, 1};
            if (pattern == 0) {
              dims[0] = k / 2, dims[1] = n, strides[0] = k / 2, box[0] = 64, box[1] = bn;
            } else {
              dims[0] = 64, dims[1] = bytes / 64, strides[0] = 64, box[0] = 64, box[1] = pattern == 1 ? bn : 64;
            }
            const CUresult r =
                encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, w, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                       CU_TENSOR_MAP_SWIZZLE_64B, promos[pr], CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
            if (r != CUDA_SUCCESS) {
              printf("encode failed %d\n", int(r));
              continue;
            }
            Cfg c{pattern, n, k, bn, stages};
            const int smem = stages * bn * 64 + 2 * 8 * stages;
            cudaFuncSetAttribute(stream, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
            float best = 1e9f, total = 0;
            const int reps = 7;
            for (int rep = 0; rep < reps; ++rep) {
              read_all<<<4 * sms, 512>>>(reinterpret_cast<const int4 *>(flush), (256 << 20) / 16, sink);
              cudaEventRecord(e0);
              stream<<<sms, 256, smem>>>(map, c, sms, sink);
              cudaEventRecord(e1);
              cudaEventSynchronize(e1);
              float ms;
              cudaEventElapsedTime(&ms, e0, e1);
              best = ms < best ? ms : best;
              total += ms;
            }
            const cudaError_t err = cudaGetLastError();
            printf("%5d x %5d  bn %3d stages %2d  %-6s promo %3d: best %6.1f us (%4.2f TB/s), mean %6.1f us %s\n", n, k,
                   bn, stages, names[pattern], promo_bytes[pr], best * 1000, bytes / (best * 1e-3) / 1e12,
                   total / reps * 1000, err == cudaSuccess ? "" : cudaGetErrorString(err));
          }
  return 0;
}
