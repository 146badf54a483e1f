// The consumer warpgroups' main loop of the sm90 weight-only kernel (kernel/sm90_dense.cuh): each
// consumer thread's registers (the tile's sums, the group sums, two sets of fragments) and how a
// warpgroup walks the stages of one segment: wait for a stage and build its fragments (fetch),
// issue its WGMMAs as one group (issue), add the retired group's sums into the tile's (retire),
// and hand the stage back; either with one group in flight while the next stage's fragments are
// built (advance), or, where kQueue, with the next stage's group queued behind the running one
// before each wait (queue_next).
#pragma once

#include <cstdint>
#include <type_traits>

#include "humming/backend/sm90/pipeline.h"
#include "humming/backend/sm90/probe.h"
#include "humming/backend/sm90/ptx.h"

namespace humming {
namespace sm90 {

// K: the kernel (sm90::Dense): its tile (kTileM tokens, kAcc sums a thread in each of a
//    warpgroup's kBlocks 64-channel blocks, which are stage columns column(cw, b) kBlockStride
//    channels apart, kSteps K steps of 16 per stage, BK, kGroupK and kSets
//    scale groups a stage), its ring (kStages, kStageBytes,
//    kAtomBytes per activation box, RingPos), its operands (kBf16) and fragments (Frags:
//    backend/sm90/stage_fragments.h), and its rules kSumScales (sums per scale group), kQueue and
//    kStepwise (one K step per group: mainloop_stepwise).
template <class K> struct Mainloops {
  static constexpr int kAcc = K::kAcc, kSteps = K::kSteps, kSets = K::kSets, kStages = K::kStages;
  static constexpr int kStageBytes = K::kStageBytes, kAtomBytes = K::kAtomBytes, BM = K::kTileM, BK = K::BK;
  static constexpr int GroupK = K::kGroupK, kBlocks = K::kBlocks;
  static constexpr bool kBf16 = K::kBf16, kSumScales = K::kSumScales, kQueue = K::kQueue, kStepwise = K::kStepwise;
  // K steps of fragments a set holds: a stage's, or with kStepwise one step's.
  static constexpr int kSetSteps = kStepwise ? 1 : kSteps;
  static_assert(!(kStepwise && (kQueue || kSumScales)), "the stepwise loop sums straight into the tile's sums");
  using RingPos = typename K::RingPos;
  using Frags = typename K::Frags;

  // Per consumer thread: the sums of its tile (acc, one row per 64-channel block of its warpgroup)
  // and, with kSumScales (one block only), the current stage's sums per scale group (part; with
  // kQueue one set per fragment set, as two stages are in flight), with the fragments of each block
  // and the scales of two stages (the one the tensor cores run and the next), or with kStepwise
  // the fragments of two K steps.
  struct Regs {
    float acc[kBlocks][kAcc];
    float part[kQueue ? 2 : 1][kSumScales ? kSets : 1][kSumScales ? kAcc : 1];
    uint32_t af[2][kBlocks][kSetSteps][4];
    float sc[2][kSets][2];

    // The sums as one array (the fix-ups and the gated activation take them whole).
    __device__ __forceinline__ float (&flat())
        [kBlocks * kAcc] { return *reinterpret_cast<float (*)[kBlocks * kAcc]>(&acc[0][0]); }
  };
  static_assert(kBlocks == 1 || !kSumScales, "group sums in one-block tiles only");

  // Per-segment zero points of each block (stage_fragments.h: the thread's two channels of it).
  struct Zeros {
    uint32_t bias[kBlocks][2];
    float zero[kBlocks][2];
  };

  // Waits until the producer has filled stage `pos`.
  static __device__ __forceinline__ void wait_full(uint32_t bars, RingPos pos) {
    const uint32_t full = ring_bar<kStages>(bars, 0, pos.stage), parity = pos.phase;
    Probe::ring([=] { mbar_wait(full, parity); });
  }

  // The WGMMA descriptor of stage `stage`'s activations in the 128-byte-swizzled ring, and of K
  // step `step`'s inside it.
  static __device__ __forceinline__ uint64_t stage_desc(uint32_t ring, int stage) {
    return desc_sw128(ring) + desc_bytes(stage * kStageBytes);
  }
  static __device__ __forceinline__ uint64_t step_desc(uint64_t stage, int step) {
    return stage + (step / 4) * (kAtomBytes >> 4) + (step % 4) * 2;
  }

  // Waits for stage `pos` and builds its fragments into set `B`.
  // `cw`, `t`, `col`: the thread's warpgroup, its thread in it and its first channel of the
  // warpgroup's first block inside the tile (block b's: kBlockStride b on).
  template <int B>
  static __device__ __forceinline__ void fetch(const char *ring_ptr, uint32_t bars, RingPos pos, int cw, int t, int col,
                                               const Zeros &z, Regs &r) {
    wait_full(bars, pos);
#pragma unroll
    for (int b = 0; b < kBlocks; ++b)
      Frags::load(ring_ptr + pos.stage * kStageBytes, K::column(cw, b), t, col + K::kBlockStride * b, z.bias[b],
                  z.zero[b], r.af[B][b], r.sc[B]);
  }

  // Issues the WGMMAs of stage `pos` from fragment set `B` as one group: into the group sums (each
  // group's first K step starts its sum afresh) or straight into the tile's sums. The fragments
  // and sums are final before the fence (the compiler may not sink their writes past it).
  // Pending: a group of the same sums is still in flight (kQueue), whose sums no ordinary
  // instruction may touch meanwhile, so they are not fenced here (a fence of the registers an
  // asynchronous WGMMA writes makes ptxas wait for it).
  template <int B, bool Pending = false>
  static __device__ __forceinline__ void issue(uint32_t ring, RingPos pos, Regs &r) {
    constexpr int P = kQueue ? B : 0; // the group sums this stage goes into
#pragma unroll
    for (int b = 0; b < kBlocks; ++b)
#pragma unroll
      for (int step = 0; step < kSteps; ++step) fence_regs(r.af[B][b][step]);
    if constexpr (kSumScales) {
#pragma unroll
      for (int g = 0; g < kSets; ++g) fence_regs(r.part[P][g]);
    } else if constexpr (!Pending) {
#pragma unroll
      for (int b = 0; b < kBlocks; ++b) fence_regs(r.acc[b]);
    }
    wgmma_fence();
    const uint64_t desc = stage_desc(ring, pos.stage);
#pragma unroll
    for (int step = 0; step < kSteps; ++step) {
      const uint64_t d = step_desc(desc, step);
      if constexpr (kSumScales) {
        constexpr int kSpan = GroupK < BK ? GroupK : BK; // inputs of one group inside the stage
        Wgmma<BM, kBf16>::run(r.part[P][Frags::scale_row(step)], r.af[B][0][step], d, (step * 16) % kSpan == 0 ? 0 : 1);
      } else {
        // Every block's WGMMA of this K step reads the same activations (descriptor d).
#pragma unroll
        for (int b = 0; b < kBlocks; ++b) Wgmma<BM, kBf16>::run(r.acc[b], r.af[B][b][step], d, 1);
      }
    }
    wgmma_commit();
  }

  // Adds the group sums of the retired stage (set B) into the tile's sums (kSumScales), or keeps
  // the compiler from moving the tile's sums across the wait (FenceAcc: no group in flight).
  template <int B, bool FenceAcc> static __device__ __forceinline__ void retire(Regs &r) {
    constexpr int P = kQueue ? B : 0;
    if constexpr (kSumScales) {
#pragma unroll
      for (int g = 0; g < kSets; ++g) {
        fence_regs(r.part[P][g]);
#pragma unroll
        for (int i = 0; i < kAcc; ++i) r.acc[0][i] = fmaf(r.part[P][g][i], r.sc[B][g][(i % 4) / 2], r.acc[0][i]);
      }
    } else if constexpr (FenceAcc) {
#pragma unroll
      for (int b = 0; b < kBlocks; ++b) fence_regs(r.acc[b]);
    }
  }

  // Completes the stage in flight (`cur`, fragment set B) and starts the next one, if any: builds
  // the next stage's fragments into set 1 - B while the tensor cores run, waits for them, adds the
  // group sums into the tile's sums, hands the stage back and issues the next. True at the end.
  template <int B>
  static __device__ __forceinline__ bool advance(uint32_t ring, const char *ring_ptr, uint32_t bars, RingPos &cur,
                                                 bool more, int cw, int t, int col, const Zeros &z, Regs &r) {
    RingPos next = cur;
    next.advance();
    if (more) fetch<1 - B>(ring_ptr, bars, next, cw, t, col, z, r);
    wgmma_wait<0>();
    retire<B, true>(r);
    release_stage<kStages>(bars, cur.stage);
    cur = next;
    if (more) issue<1 - B>(ring, cur, r);
    return !more;
  }

  // kQueue: with the stage `cur` (set B) in flight, builds the next stage's fragments into set
  // 1 - B, queues its WGMMAs behind the running ones, then waits for `cur` alone, adds its group
  // sums and hands it back; the tensor cores go on from one stage to the next meanwhile. Every
  // call leaves one group in flight, so ptxas sees the same state on every path.
  template <int B>
  static __device__ __forceinline__ void queue_next(uint32_t ring, const char *ring_ptr, uint32_t bars, RingPos &cur,
                                                    int cw, int t, int col, const Zeros &z, Regs &r) {
    RingPos next = cur;
    next.advance();
    fetch<1 - B>(ring_ptr, bars, next, cw, t, col, z, r);
    issue<1 - B, true>(ring, next, r);
    wgmma_wait<1>();
    retire<B, false>(r);
    release_stage<kStages>(bars, cur.stage);
    cur = next;
  }

  // kStepwise: the `n` stages of one segment, each K step's WGMMAs a group of their own. A thread
  // builds a step's fragments while the step before runs, then issues it and waits for the one
  // before that, so that two sets of one step's fragments (8 registers a block) are all it keeps
  // beside the sums: the tiles of two 64-channel blocks (kBlocks, 2 x kAcc sums) have no room for
  // a stage's. A stage goes back once the group of its last step has retired, which the next
  // stage's first wait tells.
  static __device__ __forceinline__ void mainloop_stepwise(uint32_t ring, const char *ring_ptr, uint32_t bars,
                                                           RingPos &pos, int64_t n, int cw, int t, int col,
                                                           const Zeros &z, Regs &r) {
#pragma unroll
    for (int b = 0; b < kBlocks; ++b) {
#pragma unroll
      for (int i = 0; i < kAcc; ++i) r.acc[b][i] = 0.0f;
      fence_regs(r.acc[b]);
    }
    int prev = -1; // the stage whose last group may still run
    for (int64_t j = 0; j < n; ++j) {
      wait_full(bars, pos);
      const char *stage = ring_ptr + pos.stage * kStageBytes;
      const uint64_t desc = stage_desc(ring, pos.stage);
#pragma unroll
      for (int at = 0; at < K::kKAtoms; ++at) {
        uint32_t words[kBlocks][K::kWords];
#pragma unroll
        for (int b = 0; b < kBlocks; ++b) Frags::load_words(stage, at, K::column(cw, b), t, words[b]);
#pragma unroll
        for (int sa = 0; sa < 4; ++sa) {
          const int step = at * 4 + sa, s = step % 2; // kSteps is even: set s stays fixed per step
#pragma unroll
          for (int b = 0; b < kBlocks; ++b) {
            Frags::convert_step(stage, step, col + K::kBlockStride * b, z.bias[b], z.zero[b], words[b], r.af[s][b][0]);
            fence_regs(r.af[s][b][0]);
          }
          wgmma_fence();
          const uint64_t d = step_desc(desc, step);
#pragma unroll
          for (int b = 0; b < kBlocks; ++b) Wgmma<BM, kBf16>::run(r.acc[b], r.af[s][b][0], d, 1);
          wgmma_commit();
          wgmma_wait<1>();
          if (step == 0 && prev >= 0) release_stage<kStages>(bars, prev);
        }
      }
      prev = pos.stage;
      pos.advance();
    }
    wgmma_wait<0>();
    if (prev >= 0) release_stage<kStages>(bars, prev);
#pragma unroll
    for (int b = 0; b < kBlocks; ++b) fence_regs(r.acc[b]);
  }

  // The `n` stages of one segment from ring position `pos` (left one past the last) into r.acc.
  static __device__ __forceinline__ void mainloop(uint32_t ring, const char *ring_ptr, uint32_t bars, RingPos &pos,
                                                  int64_t n, int cw, int t, int col, const Zeros &z, Regs &r) {
    if constexpr (kStepwise)
      mainloop_stepwise(ring, ring_ptr, bars, pos, n, cw, t, col, z, r);
    else
      mainloop_staged(ring, ring_ptr, bars, pos, n, cw, t, col, z, r);
  }

  // The same, a stage's K steps in one group.
  static __device__ __forceinline__ void mainloop_staged(uint32_t ring, const char *ring_ptr, uint32_t bars,
                                                         RingPos &pos, int64_t n, int cw, int t, int col,
                                                         const Zeros &z, Regs &r) {
#pragma unroll
    for (int b = 0; b < kBlocks; ++b)
#pragma unroll
      for (int i = 0; i < kAcc; ++i) r.acc[b][i] = 0.0f;
    fetch<0>(ring_ptr, bars, pos, cw, t, col, z, r);
    issue<0>(ring, pos, r);
    if constexpr (kQueue) {
      // Stage j goes into set j % 2; two stages per trip so that each set has fixed registers.
      int64_t j = 1;
      for (; j + 1 < n; j += 2) {
        queue_next<0>(ring, ring_ptr, bars, pos, cw, t, col, z, r);
        queue_next<1>(ring, ring_ptr, bars, pos, cw, t, col, z, r);
      }
      const auto finish = [&](auto set) {
        constexpr int B = decltype(set)::value;
        wgmma_wait<0>();
        retire<B, true>(r);
        release_stage<kStages>(bars, pos.stage);
        pos.advance();
      };
      if (j < n) {
        queue_next<0>(ring, ring_ptr, bars, pos, cw, t, col, z, r);
        finish(std::integral_constant<int, 1>{});
      } else {
        finish(std::integral_constant<int, 0>{});
      }
    } else {
      // Two stages per trip so that each fragment set has fixed registers.
      for (int64_t j = 1;; j += 2) {
        if (advance<0>(ring, ring_ptr, bars, pos, j < n, cw, t, col, z, r)) break;
        if (advance<1>(ring, ring_ptr, bars, pos, j + 1 < n, cw, t, col, z, r)) break;
      }
    }
  }
};

} // namespace sm90
} // namespace humming
