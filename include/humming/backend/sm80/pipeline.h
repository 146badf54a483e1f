// The block-level loop of the sm80 family's kernels (kernel/sm80_dense.cuh,
// kernel/sm80_a8_dense.cuh): the block's segments of the stream-K plan, and each segment's
// cp.async pipeline over a ring of stage buffers.
#pragma once

#include <cstdint>

#include "humming/backend/sm80/ptx.h"
#include "humming/scheduler/streamk.h"

namespace humming {
namespace sm80 {

// A block's dynamic shared memory: its stage buffers (smem_bytes), then the shared area of
// block_segments_shared (the fix-up's flag word, the segment count, kMaxSegments records).
constexpr int block_smem_total(int smem_bytes) {
  return smem_bytes + 16 + kMaxSegments * static_cast<int>(sizeof(Segment));
}

// The block's segments (scheduler/streamk.h), worked out once by thread 0 into the shared area at
// `area` (a word at byte 4, the kMaxSegments records from byte 16; byte 0 is the fix-up's flag)
// and read back by every thread. Returns their number; `segs` points at them.
__device__ __forceinline__ int block_segments_shared(const StreamKPlan &plan, char *area, Segment *&segs) {
  segs = reinterpret_cast<Segment *>(area + 16);
  int *seg_count = reinterpret_cast<int *>(area + 4);
  if (threadIdx.x == 0) *seg_count = block_segments(plan, blockIdx.x, segs);
  __syncthreads();
  return *seg_count;
}

// One segment's pipeline over K tiles [kt_begin, kt_end): Stages buffers of StageBytes from
// `smem` (shared address smem_base), Stages - 1 of them filled ahead. load(dst, kt) issues the
// cp.async copies of K tile kt into the buffer at shared address dst; compute(stage) runs the
// math of the buffer at `stage` once its copies have landed. Returns the buffer of the last K
// tile computed (smem where the segment has none); copies may still be in flight on return.
// Stages: ring depth (at least 2). StageBytes: bytes of one buffer.
template <int Stages, int StageBytes, class Load, class Compute>
__device__ __forceinline__ char *cp_async_ring(char *smem, uint32_t smem_base, int kt_begin, int kt_end, Load load,
                                               Compute compute) {
  // Prologue: fill Stages - 1 stages (rolled: the copy paths would be inlined per stage).
#pragma unroll 1
  for (int s = 0; s < Stages - 1; ++s) {
    if (kt_begin + s < kt_end) load(smem_base + s * StageBytes, kt_begin + s);
    cp_async_commit();
  }
  int slot = 0; // stage buffer of K tile kt; the load goes to the one before it
  char *stage = smem;
  for (int kt = kt_begin; kt < kt_end; ++kt) {
    cp_async_wait<Stages - 2>();
    __syncthreads();
    {
      const int next = kt + Stages - 1;
      const int next_slot = slot == 0 ? Stages - 1 : slot - 1;
      if (next < kt_end) load(smem_base + next_slot * StageBytes, next);
      cp_async_commit();
    }
    stage = smem + slot * StageBytes;
    slot = slot == Stages - 1 ? 0 : slot + 1;
    compute(stage);
  }
  return stage;
}

} // namespace sm80
} // namespace humming
