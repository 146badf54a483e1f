// The deterministic stream-K fix-up (scheduler/streamk.h) for kernels whose threads hold a
// tile's fp32 sums in registers in a fixed order. Two schemes, both adding the partials in block
// order from the tile's first contributor, so the sum order never depends on which block finishes
// last and results are bitwise identical run to run:
// * streamk_fixup (the persistent sm90 kernels, whose blocks are all resident): the first
//   contributor finishes the tile; the others store their partials and count themselves, and it
//   waits for their count (each thread's sums in turn in a slot);
// * streamk_fixup_pairs (the sm80 kernels, whose launches need not be resident at once, so no
//   block may wait for another): each contributor stores its partial and counts itself, and the
//   last to count adds them all (row-major pairs of adjacent channels in a slot).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "humming/humming.h"
#include "humming/scheduler/streamk.h"

namespace humming {
namespace epilogue {

// Counts this block's partial of stream-K tile `t` on the tile's counter, once every thread of the
// group that holds the tile has stored its part (`sync` is a barrier over that group, `leader` one
// thread of it): one release by one thread after the barrier orders every thread's stores
// (cumulativity), and the last contributor acquires the others' partials the same way. The
// leader's verdict reaches the group through the shared word `flag`. True in the last contributor.
template <class Flag, class Sync>
__device__ __forceinline__ bool count_partial(int *counters, int64_t t, int64_t first_block, int64_t last_block,
                                              bool leader, Flag *flag, Sync sync) {
  sync();
  if (leader) {
    __threadfence();
    const bool last = atomicAdd(counters + t, 1) == static_cast<int>(last_block - first_block);
    if (last) __threadfence();
    *flag = last;
  }
  sync();
  return *flag != 0;
}

// A release add of one to a tile's counter (gpu scope): the thread's earlier writes, and those of
// every thread that met it at a barrier since, reach whoever acquires the sum. No value returns,
// so nothing waits for the round trip.
__device__ __forceinline__ void release_count(int *counter) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(counter) : "memory");
}

// The counter's value (gpu scope, acquire: later reads see what the releases before it ordered).
__device__ __forceinline__ int acquire_count(const int *counter) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(counter) : "memory");
  return v;
}

// Vals:    sums per thread.
// Threads: threads of the group that holds the tile (`thread` is this one's index in it); slot
//          element i * Threads + thread is this thread's sum i, so the stores and loads coalesce.
// `sync` is a barrier over the group.
// The tile's first contributor (the owner of its first unit) finishes it: every other contributor
// stores its partial, counts itself on the tile's counter and goes on; the first waits until all
// of them have counted and adds their partials to its own sums, in block order. Why the first: a
// block's share is contiguous units, so the first contributor's part of the tile is the last
// segment of its share, while every later contributor's part is the first segment of its own (or,
// for a tile spread over three blocks or more, a middle block's whole share). The partials the
// first waits for are therefore written early, and the one wait of a block is at its end: the
// contributors before it no longer stall mid-share on a fence and an atomic whose result they
// waited for, and the finisher no longer stores its own partial, counts, and reads it back (H100,
// session 49, probe_sm90.sh: 2.0-2.5 us a block for that at m = 1). Blocks wait only for later
// blocks, and the plan never launches more blocks than multiprocessors (one resident block each),
// so every block waited for runs. The sum order is the one the last-to-count scheme used (block
// order from the first), so results are bitwise what they were, and identical run to run.
// Returns true in the first contributor, whose `acc` then holds the whole tile's sums (the tile's
// counter is back at zero); false in the others, which have nothing more to do for this tile.
template <int Vals, int Threads, class Sync>
__device__ __forceinline__ bool streamk_fixup(const StreamKPlan &plan, void *workspace, int64_t block, int64_t sk_tile,
                                              int thread, float (&acc)[Vals], Sync sync) {
  constexpr int64_t kSlot = static_cast<int64_t>(Vals) * Threads;
  float *partials = streamk_partials(workspace);
  int *counter = streamk_counters(workspace) + sk_tile;
  const int64_t first_block = plan.sk_owner(sk_tile * plan.units);
  if (block != first_block) {
    // A later contributor starts inside the tile, so its partial goes to its first slot, 2b.
    float *mine = partials + 2 * block * kSlot;
#pragma unroll
    for (int i = 0; i < Vals; ++i) __stcg(mine + i * Threads + thread, acc[i]);
    sync(); // every thread's stores before the release
    if (thread == 0) release_count(counter);
    return false;
  }
  const int64_t last_block = plan.sk_owner(sk_tile * plan.units + plan.units - 1);
  if (thread == 0) {
    const int others = static_cast<int>(last_block - first_block);
    while (acquire_count(counter) != others) {
    }
    *counter = 0; // ready for the next launch (every contributor has counted)
  }
  sync(); // the partials are read after the acquire
  // The loads of kBatch contributors go out together and the adds follow in block order (a slot
  // past the last contributor reads as -0, which leaves every sum unchanged, zeros' signs too): one
  // contributor per trip left an L2 round trip per contributor exposed, 13 in a row for a decode
  // tile spread over 14 blocks.
  constexpr int kBatch = Vals >= 32 ? 1 : (32 / Vals < 8 ? 32 / Vals : 8);
#pragma unroll 1
  for (int64_t b = first_block + 1; b <= last_block; b += kBatch) {
    float v[kBatch][Vals];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const float *slot = partials + 2 * (b + j) * kSlot;
#pragma unroll
      for (int i = 0; i < Vals; ++i) v[j][i] = b + j <= last_block ? __ldcg(slot + i * Threads + thread) : -0.0f;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
#pragma unroll
      for (int i = 0; i < Vals; ++i) acc[i] += v[j][i];
  }
  return true;
}

// The fix-up of a tile whose K is split into `shares` fixed shares, one per unit of work (the
// grouped kernels' K split, scheduler/moe.h grouped_k_shares): share s of tile t stores its
// partial to slot t x shares + s and counts itself on the tile's counter; the last to count adds
// the slots in share order (its own read back too), so the sum's order never depends on which
// share ends last. Vals / Threads / thread / acc / flag / sync as in streamk_fixup. The workspace
// holds kStreamKCounters counters (t must be below that) and then the slots. True in the last
// contributor, whose `acc` then holds the tile's sums (the counter is back at zero).
template <int Vals, int Threads, class Sync>
__device__ __forceinline__ bool split_fixup(void *workspace, int64_t t, int64_t share, int64_t shares, int thread,
                                            float (&acc)[Vals], volatile int *flag, Sync sync) {
  constexpr int64_t kSlot = static_cast<int64_t>(Vals) * Threads;
  float *partials = streamk_partials(workspace) + t * shares * kSlot;
  int *counters = streamk_counters(workspace);
#pragma unroll
  for (int i = 0; i < Vals; ++i) __stcg(partials + share * kSlot + i * Threads + thread, acc[i]);
  const bool last = count_partial(counters, t, 0, shares - 1, thread == 0, flag, sync);
  sync(); // the flag is read before the next tile's fix-up writes it
  if (!last) return false;
#pragma unroll
  for (int i = 0; i < Vals; ++i) acc[i] = __ldcg(partials + i * Threads + thread);
#pragma unroll 1
  for (int64_t s = 1; s < shares; ++s) {
    float v[Vals];
#pragma unroll
    for (int i = 0; i < Vals; ++i) v[i] = __ldcg(partials + s * kSlot + i * Threads + thread);
#pragma unroll
    for (int i = 0; i < Vals; ++i) acc[i] += v[i];
  }
  if (thread == 0) counters[t] = 0; // ready for the next launch
  return true;
}

// The same fix-up for kernels whose lanes hold a tile's sums as pairs of adjacent channels, and
// whose whole block holds one tile (the sm80 backend). A contributor's slot holds the tile's
// existing rows (at most BM) x BN sums row-major, so that a pair moves as one 8-byte access. The
// last contributor writes the tile from the partials alone (its own among them), in block order.
// Only the first contributor's slot needs the plan's 64-bit division; every later one owns slot 2b
// (it starts inside the tile). FixPairs of a lane's pairs at a time: their loads from one block are
// issued together (a pair at a time leaves the loads' latency exposed, 30 us more on an sm80 t64
// launch), in few registers (all 16 of a decode tile made some of them spill). Rolled: this runs
// once per tile.
// Pairs:    pairs a lane holds (a multiple of FixPairs).
// BM, BN:   rows and channels of a tile.
// FixPairs: pairs the last contributor sums at a time.
// `tile` is the plan's tile index, (m0, n0) its first row and channel; `active` says whether this
// thread holds sums (K-slice warps past the first do not). `each(f)` calls f(m, n, v) for every pair
// of this thread (row m, channels n and n + 1, sums v(), read only for rows that exist); `pair(q, m, n)` sets the row
// and first channel of its pair q (the order of `each`); `write(m, n, v)` stores a finished pair. `flag` is a shared
// word. Returns true in the last contributor, which has written the tile.
template <int Pairs, int BM, int BN, int FixPairs, class Each, class PairAt, class Write>
__device__ __forceinline__ bool streamk_fixup_pairs(const GemmArgs &a, const StreamKPlan &plan, int tile, int64_t m0,
                                                    int64_t n0, bool active, int *flag, Each each, PairAt pair,
                                                    Write write) {
  static_assert(Pairs % FixPairs == 0, "whole batches of pairs");
  const int64_t t = tile - plan.dp_tiles();
  const int64_t rows = a.m < BM ? a.m : BM; // rows of a slot
  const int64_t slot_floats = rows * BN;
  float *partials = streamk_partials(a.workspace);
  int *counters = streamk_counters(a.workspace);
  if (active) {
    float *mine = partials + plan.partial_slot(blockIdx.x, t) * slot_floats;
    each([&](int64_t m, int64_t n, auto v) {
      if (m < a.m) __stcg(reinterpret_cast<float2 *>(mine + (m - m0) * BN + (n - n0)), v());
    });
  }
  const int64_t first_block = plan.sk_owner(t * plan.units);
  const int64_t last_block = plan.sk_owner(t * plan.units + plan.units - 1);
  if (!count_partial(counters, t, first_block, last_block, threadIdx.x == 0, flag, [] { __syncthreads(); }))
    return false;
  if (active) {
    const float *first = partials + plan.partial_slot(first_block, t) * slot_floats;
#pragma unroll 1
    for (int q = 0; q < Pairs / FixPairs; ++q) {
      float2 sum[FixPairs];
      int64_t offset[FixPairs];
      bool inside[FixPairs];
#pragma unroll
      for (int e = 0; e < FixPairs; ++e) {
        int64_t m, n;
        pair(q * FixPairs + e, m, n);
        inside[e] = m < a.m; // rows of the slot (every channel of the tile has one)
        offset[e] = (m - m0) * BN + (n - n0);
        sum[e] = inside[e] ? __ldcg(reinterpret_cast<const float2 *>(first + offset[e])) : make_float2(0.0f, 0.0f);
      }
#pragma unroll 1
      for (int64_t b = first_block + 1; b <= last_block; ++b) {
        const float *slot = partials + 2 * b * slot_floats;
#pragma unroll
        for (int e = 0; e < FixPairs; ++e)
          if (inside[e]) {
            const float2 v = __ldcg(reinterpret_cast<const float2 *>(slot + offset[e]));
            sum[e].x += v.x, sum[e].y += v.y;
          }
      }
#pragma unroll
      for (int e = 0; e < FixPairs; ++e) {
        int64_t m, n;
        pair(q * FixPairs + e, m, n);
        if (m < a.m && n < a.dims.n) write(m, n, sum[e]);
      }
    }
  }
  if (threadIdx.x == 0) counters[t] = 0; // ready for the next launch
  return true;
}

} // namespace epilogue
} // namespace humming
