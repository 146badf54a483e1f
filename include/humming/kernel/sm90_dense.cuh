// The sm90 backend with the persistent dense scheduler (scheduler/streamk.h, plan_persistent)
// visiting tiles in grouped order (scheduler/raster.h): weight-only GEMM (f16 / bf16 activations;
// u4, i4, u8, i8, e4m3 or e2m1 weights) on WGMMA, sm_90a.
//
// Roles swap against the sm80 backend: the weights are the instruction's 64-row A operand, in
// registers (channels as M), and the tokens its N (BM, any multiple of 8 up to 256), so a decode
// launch of one token runs m64n8 and wastes nothing on rows that do not exist.
//
// A block is one producer warpgroup and `Consumers` consumer warpgroups of 64 channels each
// (BN = 64 x Consumers). One producer thread walks the block's segments (tiles or stream-K shares
// of them) and fills a ring of `Stages` shared-memory stages with bulk copies that complete on
// the stage's "full" mbarrier: the activations' BM x BK box through a tensor map (128-byte
// swizzle, rows past m and inputs past k land as zeros), the weight's layout-3 blocks of the stage
// (contiguous per K block), and the stage's scale and zero-point rows. Consumers wait on "full",
// load their fragments (one 16-byte shared load per 4 bits of code width per 64 inputs), turn
// codes into operands in registers (numeric/fast_dequant.h), issue the stage's WGMMAs, and hand
// the stage back to the producer (its "empty" mbarrier) once they have retired.
//
// Each consumer warpgroup keeps one WGMMA group in flight: while the tensor cores run stage i, it
// waits for stage i + 1 and builds that stage's fragments into the other of two register sets,
// then waits for stage i, hands it back and issues stage i + 1. At most one group is ever
// pending, and no ordinary instruction writes its registers, so ptxas keeps the WGMMAs
// asynchronous. Tiles where it was measured to pay (kQueue) issue stage i + 1 before they wait for
// stage i instead, so the tensor cores never wait for the thread between stages. The loops are
// backend/sm90/mainloops.h (advance, queue_next); the gated activation's exchange of grouped
// tiles is backend/sm90/glu_exchange.h.
//
// Scales: per-channel scales and the global scale multiply the fp32 sums at the end (exact). Group
// scales, where the registers allow a sum per group (small token counts: kSumScales), multiply the
// fp32 sums of each group as they come out of the tensor cores (exact, and no per-operand multiply);
// otherwise they are folded into the operands ((code - zero) x scale rounded once to the operand
// type, as the sm80 backend's tiles of several mma tiles per warp do).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <string>

#include "humming/backend/sm90/glu_exchange.h"
#include "humming/backend/sm90/mainloops.h"
#include "humming/backend/sm90/pipeline.h"
#include "humming/backend/sm90/probe.h"
#include "humming/backend/sm90/ptx.h"
#include "humming/backend/sm90/stage_fragments.h"
#include "humming/backend/sm90/stage_loads.h"
#include "humming/backend/sm90/tensor_map.h"
#include "humming/epilogue/store.h"
#include "humming/epilogue/staged_store.h"
#include "humming/epilogue/streamk_fixup.h"
#include "humming/epilogue/wgmma_store.h"
#include "humming/humming.h"
#include "humming/layout/sm90.h"
#include "humming/numeric/fast_dequant.h"
#include "humming/scheduler/moe.h"
#include "humming/scheduler/streamk.h"

namespace humming {
namespace sm90 {

// ActId:     DType id of the activations, the operands, the scales and the output (f16 or bf16).
// CodeId:    DType id of the weight codes: u4, i4, u8, i8, e4m3 or e2m1 (FP4).
// Zero:      ZeroKind: none (unsigned codes are symmetric around 2^(bits-1)) or int (a byte per group).
// GroupK:    inputs per scale (32, 64, 128, ...), or 0 for one scale per output channel.
// BM:        tokens per tile: the WGMMA's N (8, 16, 32, 64, 128 or 256; the grouped tiles also 24,
//            48, 80 and 144, heights that hold an expert's spread of rows with less padding; tiles
//            of two blocks also 176, the tallest whose 2 x 88 sums leave a thread room for the
//            rest).
// Consumers: consumer warpgroups.
// Blocks:    64-channel blocks per consumer warpgroup (1 or 2; BN = 64 x Consumers x Blocks): with
//            two, a warpgroup issues two WGMMAs per K step on the same activations, so a stage's
//            activation box serves twice the channels (the L2 and shared-memory traffic per
//            weight halves) for twice the sums per thread. t128x256 (session 62, H100): no faster
//            than one block on dense layers at m = 1024-8192, where that traffic is not the limit;
//            12-18 % faster than t128x128x128 on DeepSeek-V3's grouped GEMMs at 4096 tokens, but the
//            height rule's t144x128x128 was faster still (session 63). The dense t176x256x64 (dev
//            since session 64) is the fastest large tile at about half the corpus points at m >= 1024.
// KAtoms:    64-input blocks per stage (BK = 64 x KAtoms; layout 3 pads K to 128, so 1 or 2).
// Stages:    depth of the shared-memory ring.
// Sched:     the scheduler kind (kSched*, backend/sm90/pipeline.h): the dense one (persistent,
//            stream-K for the tail), or the grouped mixture-of-experts one (scheduler/moe.h: every
//            expert's rows against its own weight, whole tiles or K shares of them), whose producer
//            walks the experts' tiles as a warp or alone. A template parameter, so that the dense
//            kernels hold no trace of the grouped walk.
template <uint32_t ActId, uint32_t CodeId, int Zero, int GroupK, int BM, int Consumers, int Blocks, int KAtoms,
          int Stages, int Sched>
struct Dense {
  static constexpr bool Grouped = Sched != kSchedDense;
  // Grouped tiles split over K into plan.units shares, one unit of work each, summed by the last
  // share to end (epilogue::split_fixup).
  static constexpr bool kSplitK = Sched == kSchedGroupedSplit;
  static constexpr bool kBf16 = ActId == dtypes::bf16.id();
  static constexpr DType kCode = DType::from_id(CodeId);
  static constexpr int kBits = static_cast<int>(kCode.bits);
  static constexpr bool kFloatCode = kCode.kind == kFloat;
  static constexpr bool kIntZero = Zero == static_cast<int>(ZeroKind::kInt);
  static constexpr int kTileM = BM;
  // The template parameters the components read (backend/sm90/stage_fragments.h, stage_loads.h,
  // mainloops.h, glu_exchange.h).
  static constexpr int kKAtoms = KAtoms, kConsumers = Consumers, kBlocks = Blocks, kGroupK = GroupK, kStages = Stages;
  static constexpr uint32_t kActId = ActId;
  // 64-channel columns of a stage's weight blocks, scale rows and output boxes; column(cw, b) is
  // block b of consumer warpgroup cw, whose blocks lie kBlockStride channels apart. Grouped
  // kernels: column b x Consumers + cw, as with the gated activation the tile's first half of
  // columns is gate channels and its second half the same channels' up (GluExchange), so that a
  // two-block warpgroup holds a gate block and its up block itself. Dense kernels: cw x Blocks + b,
  // a warpgroup's blocks side by side (the order their tiles were measured and tested in; both
  // orders cost the same copies).
  static constexpr int kColumns = Consumers * Blocks;
  static constexpr int BN = 64 * kColumns;
  static constexpr int kBlockStride = Grouped ? 64 * Consumers : 64;
  static __host__ __device__ constexpr int column(int cw, int b) {
    return Grouped ? b * Consumers + cw : cw * Blocks + b;
  }
  static constexpr int BK = 64 * KAtoms;
  static constexpr int kConsumerThreads = 128 * Consumers;
  static constexpr int kThreads = 128 + kConsumerThreads;
  static constexpr int kAcc = BM / 2; // fp32 sums per consumer thread and block (a 64 x BM tile)
  static constexpr int kSteps = BK / 16;
  static constexpr int kWords = layout_sm90::words_per_thread(kBits); // per thread per 64-input block
  static constexpr int kBlockBytes = layout_sm90::words_per_block(kBits) * 4;
  static constexpr int kScaleRows = GroupK == 0 ? 0 : (GroupK >= BK ? 1 : BK / GroupK);
  // Scale groups per stage, each summed apart when kSumScales.
  static constexpr int kSets = kScaleRows > 0 ? kScaleRows : 1;
  static constexpr int kAtomBytes = BM * 128; // one 64-input box of the activations
  static constexpr int kABytes = KAtoms * kAtomBytes;
  static constexpr int kWBytes = KAtoms * kColumns * kBlockBytes;
  static constexpr int kSBytes = kScaleRows * BN * 2;
  static constexpr int kZBytes = kIntZero ? kScaleRows * BN : 0;
  // Stages start 1024-byte aligned: the 128-byte swizzle repeats every 8 rows of 128 bytes.
  static constexpr int kStageBytes = (kABytes + kWBytes + kSBytes + kZBytes + 1023) / 1024 * 1024;
  static constexpr int kRingBytes = Stages * kStageBytes;
  // Alignment slack, the ring, a full and an empty barrier per stage, the fix-up flag; in grouped
  // kernels a segment note per stage after them (backend/sm90/pipeline.h, SegmentNote).
  static constexpr int kNoteBytes = Grouped ? Stages * static_cast<int>(sizeof(SegmentNote)) : 0;
  static constexpr int kSmemRing = 1024 + kRingBytes + Stages * 16 + 16 + kNoteBytes;
  // Output boxes, one per consumer warpgroup, after the ring, where the tile takes them
  // (epilogue/staged_store.h; the output is 16-bit). Grouped tiles end at their expert's last row,
  // which a box's copy would write past: they store through the boxes only where their rows are all
  // their expert's (or run past the output, which the copy clips) and they write no gated
  // activation, else directly; the four-consumer ones always directly (as the 8-bit activation
  // kernel's, kernel/sm90_a8_dense.cuh, whose grouped tiles' direct stores were measured 1.22x
  // slower than the dense boxes on the same work; with boxes the four-consumer tiles spilled).
  // tools/gen_instances.py mirrors this rule.
  static constexpr int kBoxBytes = epilogue::staged_box_bytes<BM>();
  static constexpr int kOutBytes =
      Grouped && Consumers > 3 ? 0 : epilogue::staged_store_bytes<BM, kColumns, true>(kSmemRing);
  static constexpr bool kStagedStore = kOutBytes > 0;
  // Grouped kernels can end a tile with the experts' gated activation (GemmArgs::glu): the first
  // half of the tile's columns take its gate channels, the second half the same channels of the up
  // half (column()). A two-block warpgroup holds both and pairs them in its registers
  // (GluExchange::pair: any two-block tile). Otherwise, with an even number of consumer
  // warpgroups, each up thread hands its rounded outputs to its gate partner through shared memory
  // after the ring (a float per sum of each up thread), where it fits (not t256: 64 KiB more than
  // the block has). A tile with the
  // activation never stores through the output boxes, so the exchange takes their bytes and only
  // what it needs beyond them (kGluBytes): with both apart, t128's ring, boxes and exchange came
  // to more than the block has, and it lost the activation when the grouped tiles got boxes. Not
  // in tiles of more than 128 tokens: t144's 72 sums a thread with the exchange spilled 20 bytes
  // (the activation there runs as the plain GEMM and the activation kernel).
  static constexpr int kGluExchange = Blocks == 2 ? 0 : Consumers / 2 * 128 * kAcc * 4;
  static constexpr bool kGlu =
      Grouped && (Blocks == 2 || (Consumers % 2 == 0 && BM <= 128 &&
                                  kSmemRing + (kOutBytes > kGluExchange ? kOutBytes : kGluExchange) <= 227 * 1024));
  static constexpr int kGluBytes = kGlu && kGluExchange > kOutBytes ? kGluExchange - kOutBytes : 0;
  // What the kernel keeps between its ring and the ring's barriers (run_block's RingBytes).
  static constexpr int kRingAndAfter = kRingBytes + kOutBytes + kGluBytes;
  static constexpr int kSmemTotal = kSmemRing + kOutBytes + kGluBytes;
  // Registers per thread of the producer and the consumers (backend/sm90/pipeline.h). The grouped
  // kernels' producer warp also walks the experts (expert_tile_warp), and with 40 registers ptxas
  // spilled 52 bytes there; with 64, none. A producer thread that walks alone needs no more than a
  // copy loop's 40, which two-block tiles take (t128x256: 64 left the consumers 216 and 76 bytes of
  // spills; with 40, 232 and none, ptxas of CUDA 13.0).
  using Split = RegSplit<Consumers, Grouped && !(Blocks == 2 && Sched == kSchedGroupedLone) ? 64 : 40>;
  static constexpr int kConsumerRegs = Split::kConsumer;
  // Group sums in fp32 where the registers allow them: kSets x kAcc more sums per thread (besides
  // two fragment sets of 4 x kSteps registers), so four-consumer tiles (96 registers) keep at most
  // 4 (8 spilled with 64-input groups), two-consumer tiles 16.
  // Two-block tiles fold the scales into the operands (their sums take the registers).
  static constexpr bool kSumScales = GroupK != 0 && Blocks == 1 && kSets * kAcc <= (kConsumerRegs >= 160 ? 16 : 4);
  // Whether a consumer queues the next stage's WGMMAs behind the running ones before it waits
  // (queue_next), with a second set of group sums where it keeps them. Two-consumer tiles only:
  // four-consumer ones lack the registers (ptxas serializes their WGMMAs, C7512). Measured on an
  // H100 (session 36, u4g128 / u4gc, 6 layers of 1536 to 28672 channels, m = 1 to 4096, graph us
  // after a read flush, queued / not): dense t8x128 0.975 (geometric mean), t16x128 0.992, t64 with
  // group scales 0.974 (2880x4096 at m = 256 21.8 -> 20.7 us), per-channel t64 1.001, t32 1.002
  // (up to 1.07 at m <= 64, where the table takes it), t128 1.004, t256 1.007. So the rule below
  // takes the three that gain; the grouped kernels were not timed and keep waiting.
  // HUMMING_SM90_QUEUE=0 / 1 forces it off / on for every two-consumer tile (to measure).
#ifndef HUMMING_SM90_QUEUE
#define HUMMING_SM90_QUEUE -1
#endif
  static constexpr bool kQueueRule = !Grouped && (BM <= 16 || (BM == 64 && GroupK != 0));
  // Two-block tiles issue one K step per group (Mainloops::kStepwise): their 2 x kAcc sums leave
  // no room for a stage's fragments, let alone two stages' (t128x256x128 with one set waited for
  // each stage's group before it built the next stage's; t144x256x128 spilled 116 bytes).
  static constexpr bool kStepwise = Blocks == 2;
  static constexpr bool kQueue =
      !kStepwise && kConsumerRegs >= 160 && (HUMMING_SM90_QUEUE < 0 ? kQueueRule : HUMMING_SM90_QUEUE != 0);

  static_assert(ActId == dtypes::f16.id() || ActId == dtypes::bf16.id(), "activations are f16 or bf16");
  static_assert(kBits == 4 || kBits == 8, "4- or 8-bit codes");
  static_assert(!kFloatCode || ((kCode.fn() || kCode == dtypes::e2m1) && !kIntZero),
                "float codes are e4m3 or e2m1, without zero points");
  static_assert(Zero == static_cast<int>(ZeroKind::kNone) || kIntZero, "no float zero points on this backend yet");
  static_assert(BM == 8 || BM == 16 || BM == 32 || BM == 64 || BM == 128 || BM == 256 ||
                    (Grouped && (BM == 24 || BM == 48 || BM == 80 || BM == 144)) || (Blocks == 2 && BM == 176),
                "a WGMMA N of this backend (the heights between powers of two: grouped tiles, and 176 with two "
                "blocks)");
  static_assert(KAtoms == 1 || KAtoms == 2, "layout 3 pads K to 128");
  static_assert(Consumers >= 1 && Consumers <= 4, "one to four consumer warpgroups");
  static_assert(Blocks == 1 || (Blocks == 2 && Consumers <= 2), "one or two 64-channel blocks per warpgroup");
  static_assert(GroupK == 0 || GroupK % 16 == 0, "a K group covers whole WGMMA K steps");
  static_assert(GroupK == 0 || GroupK >= BK || BK % (GroupK == 0 ? 1 : GroupK) == 0, "groups tile the stage");
  static_assert(kSmemTotal <= 227 * 1024, "the ring fits a block's shared memory");

  struct Params {
    CUtensorMap act;      // activations [m][k], boxes of BM rows x 64 inputs (64-byte aligned by its type)
    CUtensorMap out;      // kStagedStore: the output [m][n], boxes of BM rows x 64 channels (when `staged`)
    int staged;           // kStagedStore: 1 where the boxes go out by TMA through `out`, 0 where the threads copy them
    CUtensorMap act_tail; // where tail_rows: the activations in boxes of tail_rows rows (stage_loads.h)
    int tail_rows;        // rows of the last row of tiles' boxes (rounded up to 8), 0: whole boxes
    GemmArgs args;
    StreamKPlan plan;
    int64_t n_tiles;
    int64_t n_blocks;   // 64-channel blocks along the padded N (layout stride)
    ExpertRows experts; // Grouped: the rows of each expert
  };

  using RingPos = sm90::RingPos<Stages>;

  // The work of this block, in order: f(m0, m_end, n0, expert, kt0, kt1, tile) per segment, K tiles
  // [kt0, kt1) of the tile of rows [m0, m_end) (-1: up to m) and channels from n0. Dense: the stream-K
  // plan's segments in grouped order (scheduler/raster.h: H100, session 43, u4g128 28672 x 8192 at
  // m = 4096, t128 2661 -> 2537 us and t64 3866 -> 3361 against row-major order, 8192 x 8192 within
  // 2 %; tile: their index in the plan, for the fix-up). Grouped: a tile a round (turned each round) of the
  // experts' order (scheduler/moe.h), whole (no fix-up), its rows clipped to [0, m) so that offsets
  // or counts past the activations never reach memory; whole warps walk it (expert_tile_warp).
  // The producer walks it; dense consumers walk it too, grouped ones read the producer's notes
  // (SegmentNote) instead.
  // Lone: one thread walks (expert_tile) rather than the whole warp (grouped kernels only; the
  // same tiles in the same order). kSplitK: unit u is share u % plan.units of the experts' tile
  // u / plan.units (tile: u, for the fix-up).
  template <bool Lone = false, class F> static __device__ __forceinline__ void for_each_work(const Params &p, F f) {
    if constexpr (kSplitK) {
      ExpertCursor cursor;
      ExpertTile et;
      const int64_t m = p.args.m, shares = p.plan.units;
      for (int64_t u = blockIdx.x; expert_tile_warp(p.experts, BM, p.n_tiles, u / shares, &cursor, &et); u += gridDim.x)
        if (et.m0 >= 0 && et.m0 < m) {
          int64_t kt0, kt1;
          grouped_k_share(p.plan.k_tiles, u % shares, shares, &kt0, &kt1);
          f(et.m0, et.m_end < m ? et.m_end : m, et.n_tile * BN, et.expert, kt0, kt1, u);
        }
    } else if constexpr (Grouped) {
      for_each_expert_tile<Lone>(p.experts, BM, p.n_tiles, p.args.m, [&](const ExpertTile &e) {
        f(e.m0, e.m_end, e.n_tile * BN, e.expert, int64_t{0}, p.plan.k_tiles, int64_t{-1});
      });
    } else {
      for_each_dense_segment<BM, BN>(p, f);
    }
  }

  // ---- producer ------------------------------------------------------------------------------

  // The copies of a stage (backend/sm90/stage_loads.h).
  using Loads = StageLoads<Dense>;

  // Threads that produce: one, or in grouped kernels of kSchedGroupedWarp the producer's first
  // warp, which walks the experts together (expert_tile_warp; the scalar walk cost about 0.13 us
  // per expert on every block), while one thread issues each tile's copies and the others wait at
  // the warp barrier. In kSchedGroupedLone kernels one thread walks alone (expert_tile). Measured
  // trade (H200, session 17, 4096 x 7168, 8 experts with one row each, when the consumers' warps
  // also walked): a producer walking alone takes 47 us with 8 experts and 74 with 256, the warp
  // 58-60 and 59-61; in scripts/bench_moe.py the lone walk was 14-24 % faster from 64 tokens
  // (Qwen3-30B-A3B, DeepSeek-V3) and up to 2x slower at one token.
  static constexpr bool kLoneWalk = Sched == kSchedGroupedLone;
  static constexpr int kProducers = Grouped && !kLoneWalk ? 32 : 1;

  // Every stage of every segment of this block, in order; thread `t` of the producers. In grouped
  // kernels the issuing thread also notes each segment for the consumers (SegmentNote) and, after
  // the last, the end of the work.
  static __device__ __forceinline__ void produce(const Params &p, uint32_t ring, char *ring_ptr, uint32_t bars, int t) {
    Probe::begin(); // diagnosis builds only (backend/sm90/probe.h)
    RingPos pos;
    SegmentNote *notes = ring_notes<Stages, kRingAndAfter>(ring_ptr);
    const bool issues = kProducers == 1 || t == 0;
    for_each_work<kLoneWalk>(
        p, [&](int64_t m0, int64_t m_end, int64_t n0, int expert, int64_t kt0, int64_t kt1, int64_t unit) {
          if (issues) {
            Probe::segment_begin();
            const int cols = Loads::columns(p.args, n0), rows = box_rows<BM>(p, m0);
            fill_segment<Stages, kStageBytes, Grouped>(
                ring, bars, pos, kt0, kt1, Loads::bytes(cols, rows), notes,
                [&] { return SegmentNote::of(m0, m_end, n0, expert, kt0, kt1, unit); },
                [&](uint32_t stage, uint32_t full, int64_t kt) {
                  Loads::issue(p, stage, full, kt, m0, n0, cols, rows, expert);
                });
          }
          Probe::segment_done();
          if constexpr (kProducers > 1) __syncwarp();
        });
    if constexpr (Grouped)
      if (issues) note_end<Stages, kRingAndAfter>(ring_ptr, bars, pos);
    Probe::report('P');
  }

  // ---- consumers -----------------------------------------------------------------------------

  // The stage's fragments, zero points and scales (backend/sm90/stage_fragments.h).
  using Frags = StageFragments<Dense>;

  // The consumers' walk over a segment's stages, their registers (Loop::Regs) and steps
  // (backend/sm90/mainloops.h).
  using Loop = Mainloops<Dense>;

  // The gated activation's channels and exchange (backend/sm90/glu_exchange.h).
  using Glu = GluExchange<Dense>;

  static __device__ __forceinline__ void consume(const Params &p, uint32_t ring, char *ring_ptr, uint32_t bars,
                                                 volatile int *flag) {
    const GemmArgs &a = p.args;
    const int ct = static_cast<int>(threadIdx.x) - 128; // thread among the consumers
    const int cw = ct / 128, t = ct % 128, warp = t / 32, lane = t % 32;
    // This thread's first channel inside the tile (of its warpgroup's first block; block b's are
    // kBlockStride b on).
    const int col = column(cw, 0) * 64 + warp * 16 + lane / 4;
    RingPos pos;
    typename Loop::Regs r;
    Probe::begin();
    const auto segment = [&](int64_t m0, int64_t m_end, int64_t n0, int expert, int64_t kt0, int64_t kt1,
                             int64_t tile) {
      Probe::segment_begin();
      // Zero points that hold for the whole segment: the implied 2^(bits-1) of symmetric codes, or
      // the per-channel ones (with K groups, the stage's rows replace them).
      typename Loop::Zeros z;
#pragma unroll
      for (int b = 0; b < Blocks; ++b)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float zero = kFloatCode ? 0.0f : static_cast<float>(1 << (kBits - 1));
          if constexpr (kIntZero && GroupK == 0) {
            const int64_t n = Glu::weight_channel(a, n0, col + kBlockStride * b) + 8 * h;
            const uint8_t *zeros = static_cast<const uint8_t *>(a.zeros) + expert * a.expert_zeros_stride;
            zero = n < a.dims.n_pad ? static_cast<float>(zeros[n]) : 0.0f;
          }
          z.zero[b][h] = zero;
          z.bias[b][h] = numeric::zero_bias<kBf16>(zero);
        }
      Loop::mainloop(ring, ring_ptr, bars, pos, kt1 - kt0, cw, t, col, z, r);
      Probe::segment_done();

      const StreamKPlan &plan = p.plan;
      if constexpr (kSplitK) {
        if (plan.units > 1 && !epilogue::split_fixup<kAcc * Blocks, kConsumerThreads>(
                                  a.workspace, tile / plan.units, tile % plan.units, plan.units, ct, r.flat(), flag,
                                  [] { consumer_sync<kConsumerThreads>(); }))
          return;
      } else if (!(kt0 == 0 && kt1 == plan.k_tiles)) {
        const bool last = epilogue::streamk_fixup<kAcc * Blocks, kConsumerThreads>(
            plan, a.workspace, blockIdx.x, tile - plan.dp_tiles(), ct, r.flat(),
            [] { consumer_sync<kConsumerThreads>(); });
        Probe::fixup_done();
        if (!last) return;
      }
      // The per-channel (the expert's) and global scales of the rows' fp32 sums (16-bit scales of
      // the activations' type; with K groups the sums carry the group scales already).
      // The weight channel of the thread's first sums of each block (recomputed here rather than
      // kept through the main loop: the four-consumer tiles have no register to spare).
      const char *scales = static_cast<const char *>(a.scales) + expert * a.expert_scales_stride;
      int64_t channel[Blocks];
      float f[Blocks][2];
#pragma unroll
      for (int b = 0; b < Blocks; ++b) {
        channel[b] = Glu::weight_channel(a, n0, col + kBlockStride * b);
        epilogue::channel_row_factors<ActId, GroupK == 0>(a, scales, channel[b], f[b]);
      }
      if constexpr (kStagedStore) {
        // Grouped: only a tile whose rows are all its expert's, and with no gated activation.
        bool boxed = epilogue::boxed_rows<Grouped>(m0, BM, m_end, a.m);
        if constexpr (kGlu) boxed = boxed && a.glu < 0;
        if (boxed) {
#pragma unroll
          for (int b = 0; b < Blocks; ++b) {
            const int c = column(cw, b);
            epilogue::stage_wgmma_sums<ActId, kAcc, false, Blocks>(a, p.staged != 0, &p.out,
                                                                   ring + kRingBytes + c * kBoxBytes, 2 + cw, m0,
                                                                   n0 + c * 64, t, r.acc[b], f[b]);
          }
          return;
        }
      }
#pragma unroll
      for (int b = 0; b < Blocks; ++b) {
        // The channel of this thread's first output and the output's columns (-1: n).
        int64_t out_channel = n0 + col + kBlockStride * b, out_cols = epilogue::kCols;
        if constexpr (kGlu)
          if (a.glu >= 0) {
            // The gate sums (the first half of the tile's columns) become the activated outputs,
            // channels n0 / 2 + col of F; the up sums' columns store nothing (a path that
            // returned instead made ptxas spill in the four-consumer tiles).
            if constexpr (Blocks == 1)
              Glu::exchange(a, ring_ptr + kRingBytes, n0, channel[0], expert, cw, t, col, r.acc[0], f[0]);
            else if (b == 0)
              Glu::pair(a, n0, channel, expert, col, r.acc, f);
            out_channel = n0 / 2 + col, out_cols = column(cw, b) < kColumns / 2 ? a.dims.n / 2 : 0;
          }
        epilogue::store_wgmma_sums<ActId, kAcc, false>(a, m0, out_channel, lane, r.acc[b], f[b], m_end, out_cols);
      }
    };
    if constexpr (Grouped) {
      // The producer's notes (SegmentNote), each read once its segment's first stage has arrived.
      for_each_note<Stages, kRingAndAfter>(ring_ptr, bars, pos, [&](const SegmentNote &note) {
        segment(note.m0, note.m_end, note.n0, note.expert, note.kt0, note.kt1, note.unit);
      });
    } else {
      for_each_work(p, segment);
    }
    if (kStagedStore && p.staged) epilogue::finish_staged_stores(t);
    Probe::report('C');
  }

  static __device__ __forceinline__ void run(const Params &p, char *smem) {
    // The boxes (or the gated activation's exchange) sit between the ring and its barriers.
    run_block<Stages, Consumers, kRingAndAfter, 1, Split::kProducer>(
        smem,
        [&] {
          prefetch_tensor_map(&p.act);
          if (p.tail_rows != 0) prefetch_tensor_map(&p.act_tail);
          if (kStagedStore && p.staged) prefetch_tensor_map(&p.out);
        },
        [&](int t, uint32_t ring, char *ring_ptr, uint32_t bars) {
          if (t < kProducers) produce(p, ring, ring_ptr, bars, t);
        },
        [&](uint32_t ring, char *ring_ptr, uint32_t bars, volatile int *flag) {
          consume(p, ring, ring_ptr, bars, flag);
        });
  }

  static int64_t n_tiles(const GemmArgs &args) { return (args.dims.n_pad + BN - 1) / BN; }

  // (src/registry.cpp, persistent_launch_facts, makes the same plan for the dispatcher's cost
  // model: change both together.)
  static StreamKPlan plan(const GemmArgs &args) {
    if constexpr (Grouped) {
      // Grouped: whole tiles that each block finds itself (for_each_work; scheduler/moe.h,
      // grouped_plan). kSplitK: units = the K shares of each tile; where there are several, a
      // block per share of every tile of the bound, and a slot per share in the workspace
      // (sk_tiles makes streamk_workspace_bytes count them: twice a slot per block, the counters
      // before).
      StreamKPlan p = grouped_plan(args.m, args.experts, BM, n_tiles(args), args.dims.k_pad / BK, args.num_sms);
      if constexpr (kSplitK) {
        const int64_t sms = args.num_sms > 0 ? args.num_sms : 1;
        p.units = grouped_k_shares(p.tiles, p.k_tiles, sms);
        if (p.units > 1) p.blocks = p.tiles * p.units, p.sk_tiles = p.tiles;
      }
      return p;
    }
    const int64_t m_tiles = (args.m + BM - 1) / BM;
    return plan_persistent(m_tiles * n_tiles(args), args.dims.k_pad / BK, BK, args.num_sms, BM, m_tiles,
                           HeavySpread::kWide);
  }
};

#define HUMMING_SM90_TARGS                                                                                             \
  uint32_t ActId, uint32_t CodeId, int Zero, int GroupK, int BM, int Consumers, int Blocks, int KAtoms, int Stages,    \
      int Sched
#define HUMMING_SM90_ARGS ActId, CodeId, Zero, GroupK, BM, Consumers, Blocks, KAtoms, Stages, Sched

template <HUMMING_SM90_TARGS> Status can_implement(const GemmArgs &args) {
  if (args.layout != kLayoutSm90)
    return Status::Error(std::string("the sm90 backend reads weights packed for layout 3 (sm90), not layout ") +
                         std::to_string(args.layout) + " (" + layout_name(args.layout) + ")");
  if (args.fmt.weight.group_k != GroupK || args.fmt.weight.group_n != 1)
    return Status::Error("this instance is compiled for " +
                         (GroupK == 0 ? std::string("per-channel scales") : "K groups of " + std::to_string(GroupK)));
  if (args.dims.k_pad % (64 * KAtoms) != 0)
    return Status::Error("the sm90 backend needs the padded k to be a multiple of " + std::to_string(64 * KAtoms) +
                         ", got " + std::to_string(args.dims.k_pad));
  const Status rows = check_activation_rows(args, 2, "the sm90 backend");
  if (!rows) return rows;
  using K = Dense<HUMMING_SM90_ARGS>;
  if (args.glu >= 0 && !K::kGlu)
    return Status::Error(K::Grouped ? "this grouped tile of " + std::to_string(BM) +
                                          " tokens has no gated activation exchange (GemmArgs::glu; two-block "
                                          "tiles, and tiles of at most 128 tokens with an even number of consumer "
                                          "warpgroups and the shared memory for it have): run the plain GEMM, "
                                          "then the activation"
                                    : std::string("the gated activation epilogue runs in grouped (MoE) GEMMs only"));
  if (args.m > 0x7FFFFFFF - 256 || args.dims.k_pad > 0x7FFFFFFF)
    return Status::Error("the sm90 backend takes at most 2^31 - 257 rows and 2^31 inputs");
  return Status::Ok();
}

template <HUMMING_SM90_TARGS> size_t workspace_bytes(const GemmArgs &args) {
  return workspace_of<Dense<HUMMING_SM90_ARGS>>(args);
}

template <HUMMING_SM90_TARGS> Status prepare() {
  return prepare_launch<Dense<HUMMING_SM90_ARGS>>("the sm90 weight-only kernels");
}

template <HUMMING_SM90_TARGS> Status launch(const GemmArgs &args, void *stream) {
  using K = Dense<HUMMING_SM90_ARGS>;
  if (args.m == 0) return Status::Ok();
  typename K::Params p = base_params<K>(args);
  p.n_blocks = args.dims.n_pad / layout_sm90::kBlockN;
  const MapElem elem = K::kBf16 ? MapElem::kBf16 : MapElem::kF16;
  Status st = prepare_activation_rows<BM, K::Grouped>(&p, args, elem);
  if (!st) return st;
  p.staged = 0;
  if constexpr (K::kStagedStore) {
    st = epilogue::prepare_staged_store<BM>(&p, args, K::kBf16 ? MapElem::kBf16 : MapElem::kF16);
    if (!st) return st;
  }
  return launch_blocks<K>(p, args, stream, "the sm90 weight-only kernels");
}

#undef HUMMING_SM90_TARGS
#undef HUMMING_SM90_ARGS

} // namespace sm90
} // namespace humming
