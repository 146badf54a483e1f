// The producer warpgroup's helpers in the sm90 8-bit activation kernel (kernel/sm90_a8_dense.cuh),
// besides the thread that issues each stage's bulk copies: the scale warp (scales per 128 inputs)
// and the converter threads (4-bit codes turned into an 8-bit box in the stage, kStaged).
#pragma once

#include <cstdint>

#include "humming/backend/sm90/a8_stage_loads.h"
#include "humming/backend/sm90/pipeline.h"
#include "humming/backend/sm90/ptx.h"
#include "humming/backend/sm90/stage_convert.h"
#include "humming/numeric/nibble_lut.h"

namespace humming {
namespace sm90 {

// K: the kernel (sm90::DenseA8): its work (for_each_work, Params), its ring (kStages, RingPos,
//    kStageBytes; a stage holds the weights' box of kWBytes, the activations' of kABytes, the
//    scales, and with kStaged the converted box at kCvtOffset), whether it is grouped, its codes
//    (kCode, kInt), its channels per tile (BN) and its converter threads (kConvThreads).
template <class K> struct A8Producers {
  static constexpr int Stages = K::kStages, kStageBytes = K::kStageBytes;
  using RingPos = typename K::RingPos;
  using Loads = A8StageLoads<K>;

  // Warp 1 of the producer warpgroup, with scales per 128 inputs: the scales of every stage of
  // every segment of this block (zeros past the matrices) by cp.async, each lane's copies then
  // counted as one arrival on the stage's full barrier (kScaleArrivals in all). Nothing here waits
  // for a load, so the warp runs as far ahead as the ring lets it: the activation scales of a stage
  // are BM separate words (rows of a_scales), whose latency would otherwise gate every stage. In
  // grouped kernels it walks the experts' tiles itself, and arrives on the stage of the end note
  // too (which the consumers wait for with every arrival).
  static __device__ __forceinline__ void scales(const typename K::Params &p, uint32_t ring, uint32_t bars, int lane) {
    const GemmArgs &a = p.args;
    RingPos pos;
    K::for_each_work(p, [&](int64_t m0, int64_t, int64_t n0, int expert, int64_t kt0, int64_t kt1, int64_t) {
      for (int64_t kt = kt0; kt < kt1; ++kt, pos.advance()) {
        mbar_wait(ring_bar<Stages>(bars, 1, pos.stage), pos.phase ^ 1u);
        Loads::scales(a, ring + pos.stage * kStageBytes + K::kWBytes + K::kABytes, kt, m0, n0, expert, lane);
        cp_async_arrive(ring_bar<Stages>(bars, 0, pos.stage));
      }
    });
    if constexpr (K::Grouped) {
      mbar_wait(ring_bar<Stages>(bars, 1, pos.stage), pos.phase ^ 1u);
      mbar_arrive(ring_bar<Stages>(bars, 0, pos.stage));
    }
  }

  // Converter thread i of the producer warpgroup (kStaged): every stage of every segment of this
  // block, in order, once its copies have landed: its share of the codes turned into the stage's
  // 8-bit box (backend/sm90/stage_convert.h), fenced for the WGMMAs' reads (async proxy), then
  // one arrival on the stage's converted barrier. The stage's next fill waits for the consumers'
  // release, which comes after they waited on this barrier, so nothing overwrites the box early.
  static __device__ __forceinline__ void converted(const typename K::Params &p, char *ring_ptr, uint32_t bars, int i) {
    constexpr numeric::NibbleTable table = numeric::nibble_table(K::kCode, K::kInt);
    RingPos pos;
    K::for_each_work(p, [&](int64_t, int64_t, int64_t, int, int64_t kt0, int64_t kt1, int64_t) {
      for (int64_t kt = kt0; kt < kt1; ++kt, pos.advance()) {
        mbar_wait(ring_bar<Stages>(bars, 0, pos.stage), pos.phase);
        char *stage = ring_ptr + pos.stage * kStageBytes;
        convert_stage_codes<K::BN, K::kConvThreads>(stage, stage + K::kCvtOffset, i, table);
        fence_proxy_async_smem();
        mbar_arrive(ring_bar<Stages>(bars, 2, pos.stage));
      }
    });
  }
};

} // namespace sm90
} // namespace humming
