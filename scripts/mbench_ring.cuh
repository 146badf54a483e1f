// What the copy-only micro-benchmarks (scripts/mbench_stream.cu, scripts/mbench_rows.cu) share: the
// consumer side of their rings, and the read that leaves L2 full of clean lines between timings.
#pragma once

#include <cstdint>

#include "humming/backend/sm90/ptx.h"

// A consumer warp's lane 0 of a ring of `stages` stages of `stage_bytes` bytes at `smem` (full
// barriers at `bars`, empty ones after them): waits for each of `count` stages and hands it back at
// once, touching one byte of it so that the wait cannot be elided.
__device__ __forceinline__ void drain_stages(const char *smem, uint32_t bars, int stages, int stage_bytes, long count,
                                             int *sink) {
  uint32_t s = 0, ph = 0;
  int acc = 0;
  for (long u = 0; u < count; ++u) {
    humming::sm90::mbar_wait(bars + 8 * s, ph);
    acc += smem[s * stage_bytes + threadIdx.x];
    humming::sm90::mbar_arrive(bars + 8 * (stages + s));
    if (++s == uint32_t(stages)) s = 0, ph ^= 1u;
  }
  if (acc == 123456) *sink = acc;
}

// Reads a buffer larger than L2, leaving it full of clean lines.
__global__ void read_all(const int4 *p, long n, int *sink) {
  int acc = 0;
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n; i += long(gridDim.x) * blockDim.x) acc ^= p[i].x;
  if (acc == 123456) *sink = acc;
}
