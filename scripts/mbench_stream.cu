// Bulk-copy (TMA) read bandwidth of a decode-shaped weight stream on the GPU machine, without any
// compute: one producer thread per block fills a ring of shared-memory stages with cp.async.bulk,
// one warp per "consumer" waits for each stage and hands it back at once. It tells how fast the
// sm90 backend's copies could feed its consumers, for a few ways of placing a tile's bytes.
//   nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 -I include scripts/mbench_stream.cu -o /tmp/ms && /tmp/ms
//
// Patterns (a weight of n_blocks x k_blocks blocks of `block` bytes; a tile is `cols` adjacent
// channel blocks; a stage is `atoms` K blocks of the tile):
//   kmajor: block (kb, nb) at (kb * n_blocks + nb): one copy of cols blocks per K block (layout 3);
//   nmajor: block (nb, kb) at (nb * k_blocks + kb): one copy of `atoms` blocks per channel block;
//   tile:   the tile's stages one after another (one copy per stage, as a tile-major layout would).
#include <cuda_runtime.h>

#include <cstdio>

#include "humming/backend/sm90/ptx.h"
#include "mbench_ring.cuh"

using namespace humming::sm90;

struct Cfg {
  int pattern; // 0 kmajor, 1 nmajor, 2 tile
  int n_blocks, k_blocks, block, cols, atoms, stages, consumers;
};

__global__ void __launch_bounds__(128 + 4 * 32, 1) stream(const char *w, Cfg c, int blocks, int *sink) {
  extern __shared__ __align__(1024) char smem[];
  const uint32_t ring = smem_addr(smem);
  const int stage_bytes = c.cols * c.atoms * c.block;
  const uint32_t bars = ring + c.stages * stage_bytes;
  if (threadIdx.x == 0) {
    for (int s = 0; s < c.stages; ++s) mbar_init(bars + 8 * s, 1), mbar_init(bars + 8 * (c.stages + s), c.consumers);
    mbar_init_fence();
  }
  __syncthreads();
  const int tiles = c.n_blocks / c.cols, k_stages = c.k_blocks / c.atoms;
  // Each block an equal share of the (tile, K stage) sequence, as the persistent stream-K plan
  // gives decode launches.
  const long units = long(tiles) * k_stages, u0 = units * blockIdx.x / blocks, u1 = units * (blockIdx.x + 1) / blocks;
  if (threadIdx.x == 0) {
    uint32_t s = 0, ph = 0;
    for (long u = u0; u < u1; ++u) {
      const long t = u / k_stages, ks = u % k_stages;
      mbar_wait(bars + 8 * (c.stages + s), ph ^ 1u);
      mbar_arrive_expect_tx(bars + 8 * s, stage_bytes);
      const uint32_t dst = ring + s * stage_bytes;
      const long nb0 = t * c.cols, kb0 = ks * c.atoms;
      if (c.pattern == 0) {
        for (int a = 0; a < c.atoms; ++a)
          bulk_copy(dst + a * c.cols * c.block, w + ((kb0 + a) * c.n_blocks + nb0) * c.block, c.cols * c.block,
                    bars + 8 * s);
      } else if (c.pattern == 1) {
        for (int j = 0; j < c.cols; ++j)
          bulk_copy(dst + j * c.atoms * c.block, w + ((nb0 + j) * c.k_blocks + kb0) * c.block, c.atoms * c.block,
                    bars + 8 * s);
      } else {
        bulk_copy(dst, w + (t * k_stages + ks) * stage_bytes, stage_bytes, bars + 8 * s);
      }
      if (++s == uint32_t(c.stages)) s = 0, ph ^= 1u;
    }
  } else if (threadIdx.x >= 128 && threadIdx.x < 128 + 32 * c.consumers && threadIdx.x % 32 == 0) {
    drain_stages(smem, bars, c.stages, stage_bytes, u1 - u0, sink);
  }
}

int main() {
  const long n = 28672, k = 8192;
  const int block = 64 * 64 / 2; // u4 layout-3 block
  const long bytes = n * k / 2;
  char *w, *flush;
  int *sink;
  cudaMalloc(&w, bytes);
  cudaMemset(w, 1, bytes);
  cudaMalloc(&flush, 256 << 20);
  cudaMalloc(&sink, 4);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const char *names[] = {"kmajor", "nmajor", "tile"};
  for (int flushw = 0; flushw < 2; ++flushw)
    for (int pattern = 0; pattern < 3; ++pattern)
      for (int cols : {2, 4})
        for (int atoms : {2, 4})
          for (int stages : {4, 8, 12}) {
            Cfg c{pattern, int(n / 64), int(k / 64), block, cols, atoms, stages, cols};
            const int smem = stages * cols * atoms * block + 2 * 8 * stages;
            if (smem > 227 * 1024) continue;
            cudaFuncSetAttribute(stream, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
            float best = 1e9f;
            for (int rep = 0; rep < 5; ++rep) {
              if (flushw)
                cudaMemset(flush, 0, 256 << 20);
              else
                read_all<<<528, 512>>>(reinterpret_cast<const int4 *>(flush), (256 << 20) / 16, sink);
              cudaEventRecord(e0);
              stream<<<132, 256, smem>>>(w, c, 132, sink);
              cudaEventRecord(e1);
              cudaEventSynchronize(e1);
              float ms;
              cudaEventElapsedTime(&ms, e0, e1);
              best = ms < best ? ms : best;
            }
            const cudaError_t err = cudaGetLastError();
            printf("%s flush %-6s cols %d atoms %d stages %2d (%3d KiB ring): %6.1f us  %5.2f TB/s %s\n",
                   flushw ? "write" : "read ", names[pattern], cols, atoms, stages, smem / 1024, best * 1000,
                   bytes / (best * 1e-3) / 1e12, err == cudaSuccess ? "" : cudaGetErrorString(err));
          }
  return 0;
}
