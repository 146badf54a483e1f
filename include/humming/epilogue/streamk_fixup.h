// The deterministic stream-K fix-up (scheduler/streamk.h) for kernels whose threads hold a
// tile's fp32 sums in registers in a fixed order: each contributor stores its partial to its own
// workspace slot and counts itself on the tile's counter; the last to count adds every slot in
// block order, so the sum order never depends on which block finishes last.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "humming/scheduler/streamk.h"

namespace humming {
namespace epilogue {

// Vals:    sums per thread.
// Threads: threads of the group that holds the tile (`thread` is this one's index in it); slot
//          element i * Threads + thread is this thread's sum i, so the stores and loads coalesce.
// `sync` is a barrier over the group; `flag` a shared word. Returns true in the last contributor,
// whose `acc` then holds the whole tile's sums (the tile's counter is back at zero); false in the
// others, which have nothing more to do for this tile.
template <int Vals, int Threads, class Sync>
__device__ __forceinline__ bool streamk_fixup(const StreamKPlan &plan, void *workspace, int64_t block, int64_t sk_tile,
                                              int thread, float (&acc)[Vals], volatile int *flag, Sync sync) {
  constexpr int64_t kSlot = static_cast<int64_t>(Vals) * Threads;
  float *partials = streamk_partials(workspace);
  int *counters = streamk_counters(workspace);
  float *mine = partials + plan.partial_slot(block, sk_tile) * kSlot;
#pragma unroll
  for (int i = 0; i < Vals; ++i) __stcg(mine + i * Threads + thread, acc[i]);
  const int64_t first_block = plan.sk_owner(sk_tile * plan.units);
  const int64_t last_block = plan.sk_owner(sk_tile * plan.units + plan.units - 1);
  // One release by one thread after the barrier orders every thread's stores (cumulativity); the
  // last contributor acquires the others' partials the same way.
  sync();
  if (thread == 0) {
    __threadfence();
    const bool last = atomicAdd(counters + sk_tile, 1) == static_cast<int>(last_block - first_block);
    if (last) __threadfence();
    *flag = last;
  }
  sync();
  const bool last = *flag != 0;
  sync(); // the flag is read before the next tile's fix-up writes it
  if (!last) return false;
  const float *first = partials + plan.partial_slot(first_block, sk_tile) * kSlot;
#pragma unroll
  for (int i = 0; i < Vals; ++i) acc[i] = __ldcg(first + i * Threads + thread);
  // Every later contributor starts inside the tile, so its partial is in its first slot, 2b.
#pragma unroll 1
  for (int64_t b = first_block + 1; b <= last_block; ++b) {
    const float *slot = partials + 2 * b * kSlot;
#pragma unroll
    for (int i = 0; i < Vals; ++i) acc[i] += __ldcg(slot + i * Threads + thread);
  }
  if (thread == 0) counters[sk_tile] = 0; // ready for the next launch
  return true;
}

} // namespace epilogue
} // namespace humming
