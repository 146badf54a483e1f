// The consumer warpgroups' main loops of the sm90 8-bit activation kernel
// (kernel/sm90_a8_dense.cuh): how a warpgroup walks the stages of one segment, in which order it
// waits for a stage, fetches its fragments, issues its group, retires it and adds its sums, for
// each kind of sums the kernel keeps (fp32 stage sums promoted every stage, with or without a
// second set in flight or a fetch ahead; exact s32 sums kept for the whole segment).
#pragma once

#include <cstdint>
#include <type_traits>

#include "humming/backend/sm90/a8_stage_steps.h"
#include "humming/backend/sm90/pipeline.h"
#include "humming/backend/sm90/ptx.h"

namespace humming {
namespace sm90 {

// K: the kernel (sm90::DenseA8), whose per-stage steps A8StageSteps<K> takes: fetch (wait for a
//    stage and, with 4-bit codes, read this thread's fragments of it), issue_stage<Fresh> (one
//    group of a stage's k32 steps into a set of sums) and promote (a retired stage's fp32 sums
//    added into the tile's, with its scales, and the stage handed back); its ring (kStages,
//    RingPos), its sums (kAcc per thread, Sum) and fragments (Frags), and kBatch, the stages per
//    batch of mainloop_promoted.
template <class K> struct A8Mainloops {
  static constexpr int kAcc = K::kAcc, Batch = K::kBatch, kPromote = K::kPromoteStages;
  using RingPos = typename K::RingPos;
  using Frags = typename K::Frags;
  using Sum = typename K::Sum;
  // The per-stage steps (backend/sm90/a8_stage_steps.h).
  using Steps = A8StageSteps<K>;

  template <class T> static __device__ __forceinline__ void zero(T (&v)[kAcc]) {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) v[i] = T(0);
  }

  // A retired stage `at`: at the end of a promotion window its sums `part` are added into acc and
  // the stage given back (Steps::promote), else the stage is only given back.
  static __device__ __forceinline__ void retire(bool add, const char *ring_ptr, uint32_t bars, RingPos at, int wblock,
                                                int col, int lane, float (&part)[kAcc], float (&acc)[kAcc]) {
    if (add)
      Steps::promote(ring_ptr, bars, at, wblock, col, lane, part, acc);
    else
      release_stage<K::kStages>(bars, at.stage);
  }

  // step(set) for sets First, 1 - First, First, ... until it returns true: each call's set a
  // compile-time constant, so that each set of sums or fragments stays in fixed registers (the
  // loops that keep two sets take two stages per trip this way).
  template <int First, class Step> static __device__ __forceinline__ void alternate(Step &step) {
    while (!step(std::integral_constant<int, First>()) && !step(std::integral_constant<int, 1 - First>())) {
    }
  }

  // 8-bit floats: the `n` stages of one segment from ring position `pos` (left one past the last)
  // into acc, each stage's sums (its four k32 steps, 128 inputs) made in fresh registers and then
  // added into acc in fp32 (promote). The FP8 tensor cores keep fewer mantissa bits in their
  // running sum than fp32 (measured on the H200: one long segment of 4224 inputs summed 85.8 as
  // 85.4), so the per-channel mode promotes every stage too, as cuBLASLt does without its
  // fast-accumulation flag. Stages go in batches of Batch: each stage's group is issued as soon as
  // it is fetched (with 4-bit codes, loading the fragments of the next stage of the batch overlaps
  // the group before), and the batch's groups retire together before they are added; the other
  // consumer warpgroups keep the tensor cores busy meanwhile. (Fetching the next batch's fragments
  // before this batch retires, into a second set, gained nothing at decode and cost 8% at m = 8192
  // in the 128-token tile in session 11; in session 20, one stage per batch, it gained 4-5 % there,
  // with lookups and with bit moves alike; since session 45 such tiles also keep a group in flight:
  // mainloop_inflight, DenseA8::kInflight.) Tiles whose registers hold a second set of stage sums
  // take mainloop_overlapped instead.
  static __device__ __forceinline__ void mainloop_promoted(uint32_t ring, char *ring_ptr, uint32_t bars, RingPos &pos,
                                                           int64_t n, int cw, int wblock, int col, int t,
                                                           float (&acc)[kAcc]) {
    const int lane = t % 32;
    zero(acc);
    float part[Batch][kAcc];
    Frags af[Batch];
    // Defined once here, before any group, in tiles of 32 tokens and more: a short last batch
    // leaves sets unissued, and where their registers were first written inside the loop, ptxas
    // serialized every WGMMA of the 32-token batch-2 tiles (warning C7515, CUDA 13.0). Measured on
    // the H200 (session 18, e2m1gc x e4m3-pt, 4 layers at m = 16..64): t32 batch 2 4-12 % faster
    // with it; t16 batch 2, never serialized, took 2-9 % longer with it than without (in the
    // corpus sweep before), so it goes without.
    if constexpr (Batch > 1 && kAcc >= 16)
#pragma unroll
      for (int b = 0; b < Batch; ++b)
#pragma unroll
        for (int i = 0; i < kAcc; ++i) part[b][i] = 0.0f;
    for (int64_t j = 0; j < n; j += Batch) {
      const int64_t count = n - j < Batch ? n - j : Batch; // a short last batch
      // Windows of K::kPromoteBatches batches: their sums start afresh in the first and are added
      // after the last (or the segment's last batch); the stages in between go back as their
      // groups retire.
      const int64_t w = j / Batch;
      constexpr int P = K::kPromoteBatches;
      const bool fresh = w % P == 0, add = (w + 1) % P == 0 || j + Batch >= n;
      RingPos at = pos;
#pragma unroll
      for (int b = 0; b < Batch; ++b, at.advance())
        if (b < count) {
          Steps::fetch(ring_ptr, bars, at, cw, t, af[b]);
          Steps::issue_stage(ring, at, cw, af[b], part[b], fresh);
        }
      wgmma_wait<0>();
#pragma unroll
      for (int b = 0; b < Batch; ++b)
        if (b < count) {
          retire(add, ring_ptr, bars, pos, wblock, col, lane, part[b], acc);
          pos.advance();
        }
    }
  }

  // The codes of the main loops that keep two fragment sets (mainloop_inflight, mainloop_int): with
  // K::kCodesAhead, two sets, the next stage's read a trip ahead of its conversion while this one's
  // are converted; else unused (each stage read and converted in a row).
  using Codes = typename Steps::Codes;
  static constexpr bool kAhead = K::kCodesAhead;
  using AheadCodes = Codes[2];

  // Waits for the stage after `at` and reads this thread's codes of it into `c`.
  static __device__ __forceinline__ void read_after(const char *ring_ptr, uint32_t bars, RingPos at, int cw, int t,
                                                    Codes &c) {
    at.advance();
    Steps::wait_stage(bars, at);
    Steps::load_codes(ring_ptr, at, cw, t, c);
  }

  // The first stage `pos` of a segment of `n` stages (n > 0) into fragment set 0; ahead, the next
  // stage's codes into codes[1], which the second trip converts.
  static __device__ __forceinline__ void first_fragments(const char *ring_ptr, uint32_t bars, RingPos pos, int64_t n,
                                                         int cw, int t, Frags (&af)[2], AheadCodes &codes) {
    Steps::fetch(ring_ptr, bars, pos, cw, t, af[0]);
    if (kAhead && n > 1) read_after(ring_ptr, bars, pos, cw, t, codes[1]);
  }

  // Stage `pos` (the next to issue; `prev`, the stage just issued from set S, is the one before it;
  // `more`: a stage follows `pos` in the segment) into fragment set 1 - S. With kCodesAhead its
  // codes are in codes[1 - S], and the next stage's go to codes[S] before the conversion: past the
  // segment's last stage, `pos`'s codes again (its stage has arrived and is held), so that the read
  // stays unconditional and the compiler keeps it ahead of the conversion (with a branch around
  // it, ptxas sank the read below the conversion).
  template <int S>
  static __device__ __forceinline__ void next_fragments(const char *ring_ptr, uint32_t bars, RingPos pos, RingPos prev,
                                                        bool more, int cw, int t, Frags (&af)[2], AheadCodes &codes) {
    if constexpr (kAhead) {
      read_after(ring_ptr, bars, more ? pos : prev, cw, t, codes[S]);
      Steps::convert_codes(codes[1 - S], af[1 - S]);
    } else {
      Steps::fetch(ring_ptr, bars, pos, cw, t, af[1 - S]);
    }
  }

  // mainloop_promoted's one stage per batch for 4-bit codes in register fragments (K::kPromotedAhead),
  // with each stage's codes read while the group before runs: stage j's codes, read a trip before,
  // are converted and its group issued, then stage j + 1's codes are read (its stage waited for)
  // before the warpgroup waits for the group. A warpgroup's path from one group to the next then
  // holds the conversion but not the stage's barrier and the loads (as with next_fragments).
  static __device__ __forceinline__ void mainloop_promoted_ahead(uint32_t ring, char *ring_ptr, uint32_t bars,
                                                                 RingPos &pos, int64_t n, int cw, int wblock, int col,
                                                                 int t, float (&acc)[kAcc]) {
    const int lane = t % 32;
    zero(acc);
    if (n <= 0) return;
    float part[kAcc];
    Frags af;
    Codes codes;
    Steps::wait_stage(bars, pos);
    Steps::load_codes(ring_ptr, pos, cw, t, codes);
    constexpr int P = K::kPromoteBatches;
    for (int64_t j = 0; j < n; ++j) {
      const bool fresh = j % P == 0, add = (j + 1) % P == 0 || j + 1 >= n;
      Steps::convert_codes(codes, af);
      Steps::issue_stage(ring, pos, cw, af, part, fresh);
      // Past the segment's last stage, stage j's codes again (arrived and held): the read stays
      // unconditional, as in next_fragments.
      RingPos next = pos;
      next.advance();
      const RingPos ahead = j + 1 < n ? next : pos;
      Steps::wait_stage(bars, ahead);
      Steps::load_codes(ring_ptr, ahead, cw, t, codes);
      wgmma_wait<0>();
      retire(add, ring_ptr, bars, pos, wblock, col, lane, part, acc);
      pos = next;
    }
  }

  // 4-bit codes in register fragments, one stage per batch, with a second fragment set and a group
  // kept in flight (K::kInflight): stage j is issued, then (inside a promotion window) the group
  // of stage j - 1 retires behind it and its stage goes back, then stage j + 1's fragments are
  // made in the set stage j - 1 used, all while stage j's group runs; only at the end of a
  // window of kPromote stages does the warpgroup wait for its last group, to add the window's sums
  // into acc. In mainloop_promoted a stage is fetched only after the stage before has retired, so
  // a warpgroup's tensor-core work and its conversion take turns and its groups reach the tensor
  // cores one at a time (ncu, grouped W4A8 t80 of Qwen3-30B-A3B at 1024 tokens, session 45: a
  // sixth of the stall samples on the per-stage wait). Until session 45 the 128-token tiles
  // fetched ahead but still waited for every stage's own group (mainloop_prefetched, session 20);
  // this loop replaced it. Two stages per trip, so that each fragment set has fixed registers.
  //
  // With K::kCodesAhead the codes of stage j + 2 are read (their stage waited for) while stage
  // j + 1's, read a trip before, are converted: a warpgroup's path from one group to the next is
  // then the conversion alone. Reading and converting one stage in a row, a warp waited between
  // its groups for the stage's barrier, then for the loads, then for the conversion (ncu, H100,
  // session 57, e2m1gc t128 in layout 4 at 5120 x 13824 m = 256 and 8192 x 8192 m = 8192: a third
  // of the stall samples on the barrier's branch and on the first uses of the loaded words, the
  // tensor pipe 68 % busy on the busy multiprocessors where the W8A8 t128 kept it 79 %). Reading
  // into the set just converted, after the conversion, was no faster than not reading ahead
  // (session 57: 1.006x the time in geometric mean), so the codes keep two sets.
  static __device__ __forceinline__ void mainloop_inflight(uint32_t ring, char *ring_ptr, uint32_t bars, RingPos &pos,
                                                           int64_t n, int cw, int wblock, int col, int t,
                                                           float (&acc)[kAcc]) {
    const int lane = t % 32;
    zero(acc);
    if (n <= 0) return;
    float part[kAcc];
    Frags af[2];
    AheadCodes codes;
    RingPos prev = pos;
    int64_t j = 0;
    first_fragments(ring_ptr, bars, pos, n, cw, t, af, codes);
    auto step = [&](auto set) {
      constexpr int S = decltype(set)::value;
      const bool fresh = j % kPromote == 0;
      Steps::issue_stage(ring, pos, cw, af[S], part, fresh);
      if (!fresh) {
        // Stage j - 1, of this window, has retired: its stage and fragment set are free.
        wgmma_wait<1>();
        release_stage<K::kStages>(bars, prev.stage);
      }
      prev = pos;
      pos.advance();
      const bool last = ++j >= n;
      if (!last) next_fragments<S>(ring_ptr, bars, pos, prev, j + 1 < n, cw, t, af, codes);
      if (last || j % kPromote == 0) {
        wgmma_wait<0>();
        Steps::promote(ring_ptr, bars, prev, wblock, col, lane, part, acc);
      }
      return last;
    };
    alternate<0>(step);
  }

  // 8-bit floats, one stage per batch, where the registers hold two sets of stage sums (kOverlap):
  // as mainloop_promoted, but stage j's group is issued (into the set stage j - 1 does not use)
  // before stage j - 1's sums are added, so the tensor cores run this warpgroup's next group while
  // it adds (with a window of kPromote stages per set: the first stage of a window before the
  // window before is added). Without it, the consumer warpgroups of a block, which take each stage together, all
  // add at once after their groups retire, and the tensor cores wait. Two stages per trip, so that
  // each set of sums has fixed registers (ptxas keeps the WGMMAs asynchronous only so). 8-bit
  // codes only, or 4-bit ones converted in the stage (kOverlap): the fragment sets `af` stay empty.
  static __device__ __forceinline__ void mainloop_overlapped(uint32_t ring, char *ring_ptr, uint32_t bars, RingPos &pos,
                                                             int64_t n, int cw, int wblock, int col, int t,
                                                             float (&acc)[kAcc]) {
    const int lane = t % 32;
    zero(acc);
    if (n <= 0) return;
    float part[2][kAcc];
    Frags af[2];
    RingPos prev = pos;
    Steps::fetch(ring_ptr, bars, pos, cw, t, af[0]);
    Steps::template issue_stage<true>(ring, pos, cw, af[0], part[0]);
    pos.advance();
    int64_t j = 1;
    // The sums of a window of kPromote stages share one set. The window's stages after its first
    // (set S): each issued into the set, then the stage before given back once its group has
    // retired; true where the segment ended inside the window (its sums added).
    auto rest = [&](auto set) {
      constexpr int S = decltype(set)::value;
#pragma unroll
      for (int q = 1; q < kPromote; ++q) {
        if (j >= n) {
          wgmma_wait<0>();
          Steps::promote(ring_ptr, bars, prev, wblock, col, lane, part[S], acc);
          return true;
        }
        Steps::fetch(ring_ptr, bars, pos, cw, t, af[S]);
        Steps::template issue_stage<false>(ring, pos, cw, af[S], part[S]);
        wgmma_wait<1>();
        release_stage<K::kStages>(bars, prev.stage);
        prev = pos;
        pos.advance();
        ++j;
      }
      return false;
    };
    // Issues stage j (if any) into set S, the first of a window, then adds the window before's sums
    // (set 1 - S) once its last group has retired, then the rest of this window; true when the
    // segment has ended. The ways out each have their own wait and add: where they joined before
    // the add, ptxas could not tell that no group is in flight after the last stage and serialized
    // every WGMMA of the kernel (warnings C7517 and C7514).
    auto step = [&](auto set) {
      constexpr int S = decltype(set)::value;
      if (j >= n) {
        wgmma_wait<0>();
        Steps::promote(ring_ptr, bars, prev, wblock, col, lane, part[1 - S], acc);
        return true;
      }
      Steps::fetch(ring_ptr, bars, pos, cw, t, af[S]);
      Steps::template issue_stage<true>(ring, pos, cw, af[S], part[S]);
      wgmma_wait<1>();
      Steps::promote(ring_ptr, bars, prev, wblock, col, lane, part[1 - S], acc);
      prev = pos;
      pos.advance();
      ++j;
      return rest(set);
    };
    if (!rest(std::integral_constant<int, 0>())) alternate<1>(step);
  }

  // The main loop of the kernel's kind of sums (K::kInt, kOverlap, kInflight, kPromotedAhead; else
  // mainloop_promoted) over the `n` stages of one segment from `pos` into acc.
  static __device__ __forceinline__ void mainloop(uint32_t ring, char *ring_ptr, uint32_t bars, RingPos &pos, int64_t n,
                                                  int cw, int wblock, int col, int t, float (&acc)[kAcc]) {
    if constexpr (K::kInt)
      mainloop_int(ring, ring_ptr, bars, pos, n, cw, t, acc);
    else if constexpr (K::kOverlap)
      mainloop_overlapped(ring, ring_ptr, bars, pos, n, cw, wblock, col, t, acc);
    else if constexpr (K::kInflight)
      mainloop_inflight(ring, ring_ptr, bars, pos, n, cw, wblock, col, t, acc);
    else if constexpr (K::kPromotedAhead)
      mainloop_promoted_ahead(ring, ring_ptr, bars, pos, n, cw, wblock, col, t, acc);
    else
      mainloop_promoted(ring, ring_ptr, bars, pos, n, cw, wblock, col, t, acc);
  }

  // Integers: the `n` stages of one segment from ring position `pos` (left one past the last) into
  // acc. The s32 sums are exact, so they stay in the tensor cores' registers for the whole segment
  // (one group in flight behind the next) and are rounded to fp32 once, at the end. With 4-bit
  // codes, each stage's fragments are made while the group before runs, into the fragment set the
  // group before that used (two stages per trip, so that each set has fixed registers), from codes
  // read a trip ahead where K::kCodesAhead (next_fragments).
  static __device__ __forceinline__ void mainloop_int(uint32_t ring, char *ring_ptr, uint32_t bars, RingPos &pos,
                                                      int64_t n, int cw, int t, float (&out)[kAcc]) {
    Sum acc[kAcc];
    zero(acc);
    Frags af[2];
    AheadCodes codes;
    RingPos prev = pos;
    int64_t j = 0;
    // Issues stage j (its fragments in set S), retires the group before it, and makes stage j + 1's
    // fragments in set 1 - S; true when stage j was the last.
    auto step = [&](auto set) {
      constexpr int S = decltype(set)::value;
      Steps::template issue_stage<false>(ring, pos, cw, af[S], acc);
      if (j > 0) {
        // The group of the stage before has retired: its shared memory and fragments are free.
        wgmma_wait<1>();
        release_stage<K::kStages>(bars, prev.stage);
      }
      prev = pos;
      pos.advance();
      if (++j >= n) return true;
      next_fragments<S>(ring_ptr, bars, pos, prev, j + 1 < n, cw, t, af, codes);
      return false;
    };
    if (n > 0) {
      first_fragments(ring_ptr, bars, pos, n, cw, t, af, codes);
      alternate<0>(step);
    }
    wgmma_wait<0>();
    fence_regs(acc);
    if (n > 0) release_stage<K::kStages>(bars, prev.stage);
#pragma unroll
    for (int i = 0; i < kAcc; ++i) out[i] = static_cast<float>(acc[i]);
  }
};

} // namespace sm90
} // namespace humming
