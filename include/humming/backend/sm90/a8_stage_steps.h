// The steps a consumer warpgroup of the sm90 8-bit activation kernel (kernel/sm90_a8_dense.cuh)
// takes per stage, which its main loops (backend/sm90/a8_mainloops.h) put in order: wait for a
// stage and read this thread's fragments of it (fetch), issue its k32 steps as one group
// (issue_stage), add its retired sums into the tile's (promote).
#pragma once

#include <cstdint>

#include "humming/backend/sm90/a8_promote.h"
#include "humming/backend/sm90/operand_convert.h"
#include "humming/backend/sm90/pipeline.h"
#include "humming/backend/sm90/probe.h"
#include "humming/backend/sm90/ptx.h"
#include "humming/numeric/nibble_lut.h"

namespace humming {
namespace sm90 {

// K: the kernel (sm90::DenseA8): its ring (kStages, RingPos, kStageBytes; a stage holds the
//    weights' box of kWBytes, the activations' of kABytes, the scales, and with kStaged the
//    converted box at kCvtOffset), its operands (kCode, kInt, kE5m2; 4-bit codes read into
//    register fragments, Frags, when kRegFrags, from layout kLayout, e2m1 by bit moves when
//    kShiftedE2m1), its WGMMA (kSteps k32 steps of BK inputs, N = kTileM tokens, or kWgmmaN
//    channels with kTokensM) and its sums (kAcc per thread, Sum).
template <class K> struct A8StageSteps {
  static constexpr int kStages = K::kStages, kStageBytes = K::kStageBytes, kLayout = K::kLayout;
  static constexpr int kWBytes = K::kWBytes, kABytes = K::kABytes, kCvtOffset = K::kCvtOffset, BK = K::BK;
  static constexpr int kSteps = K::kSteps, kAcc = K::kAcc, kTileM = K::kTileM, kWgmmaN = K::kWgmmaN;
  static constexpr bool kStaged = K::kStaged, kRegFrags = K::kRegFrags, kShiftedE2m1 = K::kShiftedE2m1;
  static constexpr bool kInt = K::kInt, kE5m2 = K::kE5m2, kTokensM = K::kTokensM;
  static constexpr DType kCode = K::kCode;
  using RingPos = typename K::RingPos;
  using Frags = typename K::Frags;
  using Sum = typename K::Sum;

  // A thread's codes of one stage before conversion (kRegFrags; backend/sm90/operand_convert.h).
  using Codes = FragmentCodes<kLayout == kLayoutSm90A8 ? kLayoutSm90A8 : kLayoutGeneric>;

  // Waits for stage `pos` (kStaged: for its converted box).
  static __device__ __forceinline__ void wait_stage(uint32_t bars, RingPos pos) {
    const uint32_t full = ring_bar<kStages>(bars, kStaged ? 2 : 0, pos.stage), parity = pos.phase;
    Probe::ring([=] { mbar_wait(full, parity); });
  }

  // With fragments in registers: reads this thread's codes of warpgroup cw's 64 rows out of stage
  // `pos` (which has arrived: wait_stage).
  static __device__ __forceinline__ void load_codes(const char *ring_ptr, RingPos pos, int cw, int t, Codes &c) {
    if constexpr (kRegFrags) c.load(ring_ptr + pos.stage * kStageBytes, cw * 64, t);
  }

  // With fragments in registers: turns codes read by load_codes into the stage's fragments.
  static __device__ __forceinline__ void convert_codes(const Codes &c, Frags &af) {
    if constexpr (kShiftedE2m1 && kLayout == kLayoutSm90A8) {
      // Layout 4 spreads e2m1 codes' bits for this conversion (layout/sm90_a8.h fp4_order).
      c.to_fragments([](uint32_t w, uint32_t &lo, uint32_t &hi) { numeric::e2m1_a8_to_shifted_e4m3(w, lo, hi); }, af);
    } else if constexpr (kShiftedE2m1) {
      c.to_fragments([](uint32_t w, uint32_t &lo, uint32_t &hi) { numeric::e2m1_to_shifted_e4m3(w, lo, hi); }, af);
    } else if constexpr (kRegFrags) {
      // Operand bytes of the codes (numeric/nibble_lut.h), as immediates.
      constexpr numeric::NibbleTable table = numeric::nibble_table(kCode, kInt);
      c.to_fragments([&](uint32_t w, uint32_t &lo, uint32_t &hi) { numeric::nibbles_to_bytes(w, table, lo, hi); }, af);
    }
  }

  // Waits for stage `pos` and, with fragments in registers, reads this thread's fragments of
  // warpgroup cw's 64 rows out of it.
  static __device__ __forceinline__ void fetch(const char *ring_ptr, uint32_t bars, RingPos pos, int cw, int t,
                                               Frags &af) {
    wait_stage(bars, pos);
    if constexpr (kRegFrags) {
      Codes c;
      load_codes(ring_ptr, pos, cw, t, c);
      convert_codes(c, af);
    }
  }

  // Issues the four k32 steps of stage `pos` (fetched) into `d` as one group (the first starting
  // `d` afresh when Fresh): the weights from fragments `af` (kRegFrags) or from consumer cw's
  // rows of the stage's 8-bit box (the TMA's, or the converted one), 64 x 128 bytes in. The
  // fragments and sums are final before the fence (the compiler may not sink their writes past it).
  template <bool Fresh>
  static __device__ __forceinline__ void issue_stage(uint32_t ring, RingPos pos, int cw, Frags &af, Sum (&d)[kAcc]) {
    issue_stage(ring, pos, cw, af, d, Fresh);
  }
  // The same with `fresh` known at run time only (the first stage of a promotion window).
  static __device__ __forceinline__ void issue_stage(uint32_t ring, RingPos pos, int cw, Frags &af, Sum (&d)[kAcc],
                                                     bool fresh) {
    // M: this warpgroup's 64 weight rows (or with kTokensM its 64 token rows); N: the stage's
    // tokens (or its channels). Stage 0's descriptors plus the stage's offset (desc_bytes).
    const uint64_t at = desc_bytes(pos.stage * kStageBytes);
    const uint64_t da = at + (kTokensM ? desc_sw128(ring + kWBytes + cw * 64 * BK)
                                       : desc_sw128(ring + kCvtOffset + cw * 64 * BK)),
                   db = at + (kTokensM ? desc_sw128(ring) : desc_sw128(ring + kWBytes));
    if constexpr (kRegFrags)
#pragma unroll
      for (int step = 0; step < kSteps; ++step) fence_regs(af[step]);
    fence_regs(d);
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < kSteps; ++step) {
      const int accumulate = fresh && step == 0 ? 0 : 1;
      if constexpr (kInt && kRegFrags)
        WgmmaS8<kTileM>::run(d, af[step], db + 2 * step, accumulate);
      else if constexpr (kInt)
        WgmmaS8<kTileM>::run(d, da + 2 * step, db + 2 * step, accumulate);
      else if constexpr (kRegFrags)
        WgmmaFp8<kTileM, kE5m2>::run(d, af[step], db + 2 * step, accumulate);
      else
        WgmmaFp8<kWgmmaN, kE5m2>::run(d, da + 2 * step, db + 2 * step, accumulate);
    }
    wgmma_commit();
  }

  // 8-bit floats: adds the retired sums `part` of stage `at` into acc in fp32, with the stage's
  // scales where they apply (backend/sm90/a8_promote.h); then gives the stage back. `col` is the
  // thread's first channel in the tile (kTokensM: its first token), `wblock` its warpgroup's weight
  // block among the stage's scales.
  static __device__ __forceinline__ void promote(const char *ring_ptr, uint32_t bars, RingPos at, int wblock, int col,
                                                 int lane, float (&part)[kAcc], float (&acc)[kAcc]) {
    fence_regs(part);
    A8Promote<K>::add(ring_ptr + at.stage * kStageBytes + kWBytes + kABytes, wblock, col, lane, part, acc);
    release_stage<kStages>(bars, at.stage);
  }
};

} // namespace sm90
} // namespace humming
