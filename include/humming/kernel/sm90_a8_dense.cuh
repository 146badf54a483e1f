// The sm90 backend's GEMM with 8-bit activations: W8A8 (e4m3 weights x e4m3 or e5m2 activations
// on FP8 WGMMA, m64nNk32, fp32 sums; or i8 weights x i8 activations on integer WGMMA, s32 sums,
// exact, turned into fp32 at the end of each segment) and W4A8 (u4, i4 or e2m1 weights on the same
// instructions), sm_90a, with the persistent dense scheduler (scheduler/streamk.h,
// plan_persistent) visiting tiles in grouped order (scheduler/raster.h).
//
// Both operands come from shared memory, and the weights stay in the generic layout (layout 1):
// its 8-bit codes are the row-major bytes of the weight (rows k_pad bytes long), so they go by TMA
// like the activations. Each stage of the ring holds one box of BN weight rows and one of BM
// activation rows, 128 inputs (bytes) wide, in the 128-byte swizzle the descriptors read.
// Grouped instances (Sched kSchedGroupedWarp, scheduler "moe") run mixture-of-experts GEMMs:
// every expert's rows (contiguous offsets or masked counts, runtime data on the device) against
// that expert's weight, whole tiles walked by the producer's first warp (scheduler/moe.h) and
// handed to the consumers as notes (backend/sm90/pipeline.h, SegmentNote), as in
// kernel/sm90_dense.cuh; the experts' weights, stacked back to back, are one tensor map of
// experts x n_pad rows. No stream-K or tail boxes there, and output boxes only for warpgroups
// whose rows are all their expert's: a tile ends at its expert's last row.
//
// 4-bit codes (rows of k_pad / 2 bytes, code k at bits 4 (k % 8) of word k / 8; or in layout 4,
// layout/sm90_a8.h, each 128-input chunk of a row in the fragments' order, and a K tile's chunks of
// every channel together, so that a stage's box is contiguous) land as a box of BN rows x 64 bytes
// in the 64-byte swizzle, and each consumer thread reads its WGMMA A fragments from it
// into registers, turning the codes into e4m3 or s8 operands on the way
// (backend/sm90/operand_convert.h; numeric/nibble_lut.h: exact values, by table lookup, or for e2m1
// by bit moves into operands of 2^-6 their values, scaled back on the sums), while the tensor cores
// run the other warpgroups' stages (and, in a batch, its own stage before); the WGMMAs then take A
// from registers. Nothing is written back to shared memory, so no proxy fence or barrier sits
// between the conversion and the tensor cores. Or, in the tiles with StagedCodes, the producer
// warpgroup's idle warps convert each stage's codes into an 8-bit box beside them in the stage
// (backend/sm90/a8_producers.h and stage_convert.h), fence them for the async proxy and arrive on
// the stage's "converted" barrier; the consumers wait on that barrier instead of "full" and run
// exactly the 8-bit codes' loop, both operands through descriptors, so the conversion runs beside
// the tensor cores instead of between a warpgroup's groups. The values of these codes are exact in
// the 8-bit operand, so their scales stay on the sums as for 8-bit codes. The roles are those of
// the weight-only kernel (sm90_dense.cuh): the weights are the instruction's M (64 channels per
// consumer warpgroup) and the tokens its N (BM: 8 to 128 for 8-bit floats, 192 for 4-bit codes, to
// 256 for integers), so a decode launch of one token runs m64n8 and wastes nothing on rows that do
// not exist. Tiles with ChannelsN (e4m3 x e4m3 only, both operands by descriptor) swap the two: 64
// tokens per consumer warpgroup on M, the tile's channels on N, which puts a block-scaled stage's
// activation scales on the sums' rows (two per thread) instead of on their columns.
//
// One producer thread fills the ring as in sm90_dense.cuh. A consumer warpgroup only issues
// WGMMAs (the four k32 steps of a stage as one group) and adds up their sums, in one of the main
// loops of backend/sm90/a8_mainloops.h, from the steps of backend/sm90/a8_stage_steps.h:
// * 8-bit floats: each stage's group sums into fresh registers, which are added into the tile's
//   fp32 sums once the group retires (two-level accumulation, promoted every 128 inputs: the FP8
//   tensor cores' running sum is narrower than fp32); the other consumer warpgroups keep the
//   tensor cores busy during the adds, and with 8-bit codes, where the registers hold a second set
//   of stage sums, so does the warpgroup's own next group (mainloop_overlapped);
// * integers: the s32 sums are exact and stay in the tensor cores' registers for the whole
//   segment, one group kept in flight behind the next.
// A stage goes back to the producer once its group has retired (and, with blocks, its scales have
// been read). A tile's sums then go out through backend/sm90/a8_epilogue.h.
//
// Scales, three kinds (GroupK, GroupN):
// * per channel x per token (GroupK 0): the weight's per-channel scale, its global scale and each
//   token's activation scale multiply the fp32 sums in the epilogue (after the stream-K fix-up,
//   which adds raw sums);
// * per channel and 128 inputs x per token (GroupK 128, GroupN 1; 8-bit floats): a stage is one K
//   group, so each stage's sums are added with each channel's scale of that group, copied into the
//   stage by the scale warp (below); the tokens' scales multiply the sums in the epilogue;
// * DeepSeek-style blocks (GroupK = GroupN = 128): a weight scale per 128 x 128 block and an activation scale
//   per token and 128 inputs. A stage is exactly one K group, so each stage's sums are added with
//   the product of the two scales (the tensor cores never see a scale). A second producer warp
//   copies each stage's scales (BM activation scales of its K group, the weight scales of its
//   channel blocks) into the stage by cp.async, which arrives on the stage's full barrier too.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "humming/backend/sm90/a8_epilogue.h"
#include "humming/backend/sm90/a8_launch.h"
#include "humming/backend/sm90/a8_stage_loads.h"
#include "humming/backend/sm90/a8_mainloops.h"
#include "humming/backend/sm90/a8_producers.h"
#include "humming/backend/sm90/a8_promote.h"
#include "humming/backend/sm90/operand_convert.h"
#include "humming/backend/sm90/pipeline.h"
#include "humming/backend/sm90/probe.h"
#include "humming/backend/sm90/ptx.h"
#include "humming/backend/sm90/tensor_map.h"
#include "humming/epilogue/staged_store.h"
#include "humming/epilogue/streamk_fixup.h"
#include "humming/humming.h"
#include "humming/scheduler/moe.h"
#include "humming/scheduler/streamk.h"

namespace humming {
namespace sm90 {

// Registers a consumer thread of the 8-bit activation kernels needs besides its sums and fragments
// (addresses, descriptors, the loop, the scales of a stage), when it chooses to keep a second set
// of stage sums (DenseA8::kOverlap).
constexpr int kOverlapSpareRegs = 32;

// Whether the W4A8 main loops read codes ahead of their conversion (DenseA8::kCodesAhead,
// kPromotedAhead): 1, or 0 for an A/B (-D).
#ifndef HUMMING_A8_CODES_AHEAD
#define HUMMING_A8_CODES_AHEAD 1
#endif

// ActId:     DType id of the activations: e4m3, e5m2 or i8, with fp32 scales (per token, or, for
//            the floats, per token and K group).
// CodeId:    DType id of the weight codes: e4m3, u4, i4 or e2m1 (float activations); i8, u4 or
//            i4 (i8 activations).
// ScaleId:   DType id of the weight's scales: f32, bf16 or f16 per channel or group; f32 per block.
// GroupK:    0: per-channel weight scales and per-token activation scales; 128: a weight scale per
//            128 inputs (of GroupN channels).
// GroupN:    with GroupK 128, channels per weight scale: 1 (per-token activation scales) or 128
//            (128 x 128 blocks with 1 x 128 activation groups).
// OutId:     DType id of the output: bf16, f16 or f32.
// BM:        tokens per tile: the WGMMA's N (8, 16, 32, 64, 128, or 256 for integers; 160 or 192
//            for 4-bit codes in register fragments with two consumers, experimental: taller tiles
//            share each converted fragment among more tokens; 24, 48, 80 or 144 for grouped tiles
//            of 4-bit codes in register fragments: an expert's rows spread about the square root
//            of their mean, so the height that holds nearly all of them lies between the powers
//            of two, as for the weight-only grouped tiles; 144 holds two tiles' worth of 256 rows
//            per expert, where t128 runs a third, nearly empty tile for about half the experts).
// Consumers: consumer warpgroups, 64 channels each (BN = 64 x Consumers).
// Stages:    depth of the shared-memory ring (128 inputs per stage).
// Batch:     8-bit floats: stages whose groups a consumer warpgroup issues (each into its own sums)
//            before it waits for them. Small tiles run short groups, and a stage's chain (wait,
//            issue, retire, add, hand back) rather than bytes bounds decode: a batch of stages pays
//            it once. Each stage of a batch is held until the batch retires.
// StagedCodes: 4-bit codes only: 1 where the producer warpgroup's idle warps convert each stage's
//            codes into an 8-bit box in the stage (the consumers then read both operands from
//            shared memory), 0 where each consumer thread converts its own fragments in registers.
//            Measured on the H200 (session 19, t128x128 e2m1gc): 1.7x slower than 0 at m = 2048,
//            bound by the converter warps' lookups and copies (without them: 0.7x the time of 0),
//            so only experimental tiles use 1.
// Layout:    LayoutId of the weights: 1 (generic), or for 4-bit codes in register fragments 4
//            (sm90a8, layout/sm90_a8.h: each stage's codes of a thread in one 16-byte unit per row).
// ChannelsN: 0: the weights are the WGMMA's M (64 channels per consumer warpgroup) and the tokens
//            its N, as above. Else (e4m3 x e4m3, both operands from shared memory) the other way
//            round: the tokens are the M (64 per consumer warpgroup, BM = 64 x Consumers) and
//            the tile's ChannelsN channels the N (BN = ChannelsN, 128 with blocks). A thread's sums
//            then cover 2 tokens instead of BM / 4, so a block-scaled stage's promotion reads 2
//            activation scales instead of BM / 4: measured on the H200 (session 24, ncu,
//            7168x16384 at m = 4096), the tensor pipe was 52 % busy with the BM / 4 loads and
//            multiplies between the groups, 78 % with per-channel scales in the same tile.
// Sched:     kSchedDense (persistent, stream-K for the tail), kSchedGroupedWarp (the grouped
//            mixture-of-experts walk, by the producer's first warp) or kSchedGroupedLone (the same
//            tiles, the producer's thread walking them alone: instances ending _lone, which the
//            dispatcher picks per call where a launch has many tiles per multiprocessor, humming.h
//            grouped_walk_alone; the scale warp walks as a warp in both); backend/sm90/pipeline.h. A
//            template parameter, so that the dense kernels hold no trace of the walk.
template <uint32_t ActId, uint32_t CodeId, uint32_t ScaleId, int GroupK, int GroupN, uint32_t OutId, int BM,
          int Consumers, int Stages, int Batch = 1, int StagedCodes = 0, int Layout = kLayoutGeneric, int ChannelsN = 0,
          int Sched = kSchedDense>
struct DenseA8 {
  static constexpr bool Grouped = Sched != kSchedDense;
  static constexpr bool kE5m2 = ActId == dtypes::e5m2.id();
  static constexpr bool kInt = ActId == dtypes::i8.id();
  static constexpr DType kCode = DType::from_id(CodeId);
  // 4-bit codes: turned into 8-bit operands in the stage by the producer's converter warps
  // (kStaged), or into register A fragments by the consumers (kRegFrags).
  static constexpr bool kFour = kCode.bits == 4;
  static constexpr bool kStaged = kFour && StagedCodes != 0;
  static constexpr bool kRegFrags = kFour && !kStaged;
  // e2m1 codes in register fragments go into e4m3 operands of 2^-6 their values by bit moves
  // (numeric/nibble_lut.h; 7 instructions per 8 codes, the lookup 12), so promote scales every
  // stage's sums back by kSumScale (exact). u4 and i4 take the lookup: their values are not a bit
  // move away from e4m3 codes.
  static constexpr bool kShiftedE2m1 = kRegFrags && CodeId == dtypes::e2m1.id();
  static constexpr float kSumScale = kShiftedE2m1 ? numeric::kE2m1ShiftScale : 1.0f;
  // The producer warpgroup's converter warps (kStaged): those that neither copy (warp 0) nor, with
  // scales per 128 inputs, load scales (warp 1).
  static constexpr int kConvWarps = kStaged ? (GroupK != 0 ? 2 : 3) : 0;
  static constexpr int kConvThreads = 32 * kConvWarps;
  // The tensor cores' sums: fp32 for 8-bit floats, s32 for integers.
  using Sum = std::conditional_t<kInt, int32_t, float>;
  static constexpr bool kBlocks = GroupK != 0 && GroupN != 1;
  static constexpr bool kGroups = GroupK != 0 && GroupN == 1;
  // Registers of a producer thread: the scale warp computes addresses per stage (the converter
  // warps of kStaged fit 40: a unit's 4 words of codes and 8 of operands, two units unrolled; with
  // 56 for them, the consumers of the 128-token tile spilled); in grouped kernels the producer's
  // warps also walk the experts: 56 (ptxas, CUDA 13.0: no spills in any grouped tile of
  // sm90_a8_moe.json; with 64 the tokens-M tile t128n128s5 lost the registers of kOverlap).
  static constexpr int kProducerRegs = Grouped || GroupK != 0 ? 56 : 40;
  static constexpr int kTileM = BM, kGroupK = GroupK, kGroupN = GroupN;
  static constexpr uint32_t kOutId = OutId;
  static constexpr int kBatch = Batch, kStages = Stages, kLayout = Layout;
  // Tokens on the WGMMA's M side (ChannelsN != 0): the consumer warpgroups split the tile's tokens.
  static constexpr bool kTokensM = ChannelsN != 0;
  static constexpr int BN = kTokensM ? ChannelsN : 64 * Consumers;
  // The WGMMA's N: the tile's tokens, or with kTokensM its channels.
  static constexpr int kWgmmaN = kTokensM ? BN : BM;
  static constexpr int BK = 128; // one row of the 128-byte swizzle
  static constexpr int kSteps = BK / 32;
  static constexpr int kConsumerThreads = 128 * Consumers;
  static constexpr int kThreads = 128 + kConsumerThreads;
  static constexpr int kAcc = kWgmmaN / 2; // fp32 sums per consumer thread (its warpgroup's 64 x kWgmmaN)
  // A stage: the weights' box (per consumer 64 rows of 128 bytes in the 128-byte swizzle, or of 64
  // bytes of 4-bit codes in the 64-byte swizzle), then the activations' box. Both sizes are
  // multiples of 1024 (BM and BN are multiples of 8, BN of 64), so every box starts where its
  // swizzle repeats.
  static constexpr int kWBytes = BN * BK * static_cast<int>(kCode.bits) / 8;
  static constexpr int kABytes = BM * BK;
  // The stage's scales after the boxes. With blocks: BM activation scales, then those of the
  // 128-channel weight blocks the tile's channels touch, in fp32 (a tile starts at a multiple of
  // BN, so at a multiple of 64 channels: one block more where BN is not a multiple of 128). With
  // groups: the BN channels' scales of the stage's group, in their own type.
  static constexpr int kWeightBlocks = ((BN % 128 != 0 ? 64 : 0) + BN + 127) / 128;
  static constexpr uint32_t kScaleId = ScaleId;
  static constexpr int kScaleBytes = DType::from_id(ScaleId).storage_bytes();
  // With blocks, in tiles of 64 tokens and more, a stage's activation scales come by one bulk copy
  // from the scales transposed (backend/sm90/a8_stage_loads.h, A8StageLoads). A grouped tile starts
  // at any row (its expert's first, plus whole tiles), where a bulk copy's 16-byte alignment does
  // not hold: grouped tiles with the tokens on M copy the run from the 16-byte boundary at or before
  // the tile's first row, kScaleLead scales longer, and their consumers read from (row % 4) on;
  // grouped tiles with the channels on M keep the scale warp's copies.
  static constexpr bool kScalesT = kBlocks && BM >= 64 && (!Grouped || kTokensM);
  static constexpr int kScaleLead = Grouped && kScalesT ? 4 : 0;
  // Slots of the stage's activation scales (with blocks): the weight blocks' scales follow.
  static constexpr int kActScaleSlots = BM + kScaleLead;
  static constexpr int kSBytes = kBlocks ? (kActScaleSlots + kWeightBlocks) * 4 : (kGroups ? BN * kScaleBytes : 0);
  // Arrivals of the scale warp on each stage's full barrier (one per lane, produce_scales).
  static constexpr int kScaleArrivals = GroupK != 0 ? 32 : 0;
  // kStaged: the converted box (BN rows of 128 operand bytes, 128-byte swizzle) after the scales,
  // where its swizzle repeats. The consumers' weight operand: that box, or the TMA's box of 8-bit
  // codes at the stage's start.
  static constexpr int kCvtOffset = kStaged ? (kWBytes + kABytes + kSBytes + 1023) / 1024 * 1024 : 0;
  static constexpr int kCvtBytes = kStaged ? BN * BK : 0;
  static constexpr int kStageBytes = (kWBytes + kABytes + kSBytes + 1023) / 1024 * 1024 + kCvtBytes;
  static constexpr int kRingBytes = Stages * kStageBytes;
  // Alignment slack, the ring, its barriers (a full and an empty one per stage, and a converted one
  // when kStaged), the fix-up flag; in grouped kernels a segment note per stage after them
  // (backend/sm90/pipeline.h, SegmentNote).
  static constexpr int kNoteBytes = Grouped ? Stages * static_cast<int>(sizeof(SegmentNote)) : 0;
  static constexpr int kSmemRing = 1024 + kRingBytes + ring_barrier_bytes<Stages, kConvThreads>() + 16 + kNoteBytes;
  // Output boxes, one per consumer warpgroup, after the ring, where the tile takes them
  // (epilogue/staged_store.h).
  // (With kTokensM: each warpgroup's 64 tokens x BN channels, epilogue::stage_token_rows.)
  static constexpr bool kOut16 = DType::from_id(OutId).bits == 16;
  static constexpr int kBoxBytes =
      kTokensM ? epilogue::staged_token_rows_bytes<BN>() : epilogue::staged_box_bytes<BM>();
  // Grouped tiles end at their expert's last row, which a box's copy would write past: a
  // warpgroup stores through its box only where its rows (64 with kTokensM, else the tile's BM)
  // are all its expert's (or run past the output, which the copy clips; in prefill, nearly every
  // tile), else directly (backend/sm90/a8_epilogue.h). Until session 58 only the tokens-M grouped
  // tiles had boxes; the others' direct stores made the grouped t128 1.22x slower than the dense
  // one on the same work (H100, e2m1gc x e4m3, 28672 x 4096 at 1024 rows on one expert: 237
  // against 195 us), where a deep K (4096 x 14336: 96.5 against 99.0) hid them. The grouped tiles
  // of four consumers (104 registers a thread) keep the direct stores: with boxes ptxas spilled
  // (t64x256: 16 to 48 bytes, CUDA 13.0). tools/gen_instances.py mirrors this rule.
  static constexpr int kOutBytes = kTokensM ? epilogue::staged_token_rows_store_bytes<BN, Consumers, kOut16>(kSmemRing)
                                   : Grouped && Consumers > 3
                                       ? 0
                                       : epilogue::staged_store_bytes<BM, Consumers, kOut16>(kSmemRing);
  static constexpr bool kStagedStore = kOutBytes > 0;
  static constexpr int kSmemTotal = kSmemRing + kOutBytes;
  // What the kernel keeps between its ring and the ring's barriers (run_block's RingBytes).
  static constexpr int kRingAndAfter = kRingBytes + kOutBytes;
  // 8-bit floats x 8-bit codes, one stage per batch: whether the consumers keep a group in flight
  // while they add up the stage before (mainloop_overlapped), which takes a second set of stage
  // sums; where it fits the consumers' registers with room for the rest. Measured on the H200
  // (session 18, every tile forced over the shape corpus, h200-2026-12-02-s18-sweep-a8-*.json
  // against -overlap-*.json): e4m3 codes 2.3 % faster in t128 (3.5 % above m = 128), 2.4-2.8 % in
  // t16 and t32 (7 % above m = 128), 1.5 % in the 64 x 192 tile, t64 and t8x256 within 0.6 %;
  // 4-bit codes, which would also keep a second set of fragments, lost 7.5 % in t64 and 1.9 % in
  // t32 (their fragment loads then wait behind the adds), so they keep mainloop_promoted.
  static constexpr int kConsumerRegs = RegSplit<Consumers, kProducerRegs>::kConsumer;
  // Scales per channel and 128 inputs (4-bit codes converted in the stage) take 8 registers more
  // in the adds: the 128-token tile spilled 8 bytes without them (ptxas, CUDA 13.0).
  static constexpr bool kOverlap =
      !kInt && !kRegFrags && Batch == 1 && 3 * kAcc <= kConsumerRegs - kOverlapSpareRegs - (kGroups ? 8 : 0);
  // 4-bit codes into register fragments, one stage per batch: whether a consumer fetches the next
  // stage's fragments into a second set while its own group runs, and keeps that group in flight
  // behind the next inside a promotion window (mainloop_inflight). Fetching ahead alone, waiting
  // for each stage's group, measured on the H200 (session 20, t128x128, graph us at m = 2048 /
  // 8192): e2m1gc 28672x8192 1058 -> 1013 and 8192x8192 1266 -> 1206 at 8192; u4g128 1234 -> 1182
  // and 1461 -> 1394; the 64-token tile at m = 64 went both ways (-1.5 % to +4 %), so then only
  // the 128-token tiles took it. With the group in flight, from 48 tokens, an A/B on the H100
  // (session 45, scripts/gpu_s45.sh PART=inflight, graph us): dense e2m1gc t64 8192x8192 at
  // m = 2048 381 -> 339 and 28672x8192 1211 -> 1140, t128 28672x8192 at m = 8192 3676 -> 3537;
  // the grouped W4A8 MoE (gate-up + down) Mixtral-8x7B at 1024 tokens 954 -> 907 (t128) and at
  // 256 326 -> 320 (t80), Qwen3-30B-A3B at 256 / 1024 tokens and DeepSeek-V3 at 1024 within 0.5 %;
  // t64 at m = 64 25.0 -> 24.4. (Where the registers hold the second set: the three-consumer
  // 128-token tile spilled 820 bytes with it, ptxas, CUDA 13.0.)
  static constexpr bool kInflight =
      kRegFrags && !kInt && Batch == 1 && BM >= 48 && 2 * kAcc + 2 * kSteps * 4 <= kConsumerRegs - kOverlapSpareRegs;
  // A thread's codes of one stage before their conversion, in registers (backend/sm90/operand_convert.h,
  // FragmentCodes): two 16-byte units in layout 4, sixteen 2-byte loads' halves in the generic one.
  static constexpr int kCodeRegs = Layout == kLayoutSm90A8 ? 8 : 16;
  // With kInflight, or integers with 4-bit codes in register fragments (mainloop_int): whether the
  // consumers read a stage's codes a trip ahead of its conversion, into a second set of codes
  // (backend/sm90/a8_mainloops.h, next_fragments), where the registers hold both sets (the integer
  // loop's sums: kAcc s32, turned into fp32 only at the end). It waits for the stage two ahead of
  // the one issued while the stage issued and the one after it are held, which leaves the producer
  // little room in a short ring: measured on the H100 (session 57, i8 x u4gc in layout 4, GEMM
  // alone, three layers at m = 256, 1024 and 8192), t64 (8 stages) 0.92x the time of reading each
  // stage's codes at its conversion, t128 (6) 0.96x, but t256 (4 stages) 1.07x; so only rings of
  // five stages and more read ahead.
  static constexpr bool kCodesAhead =
      HUMMING_A8_CODES_AHEAD != 0 && (kInflight || (kInt && kRegFrags)) && Stages >= 5 &&
      (kInt ? 1 : 2) * kAcc + 2 * kSteps * 4 + 2 * kCodeRegs <= kConsumerRegs - kOverlapSpareRegs;
  // Tiles of 4-bit codes in register fragments that take mainloop_promoted one stage per batch
  // (below 48 tokens, and t192, whose second fragment set does not fit): whether a consumer reads
  // the next stage's codes while its group runs (mainloop_promoted_ahead; one set of codes: t192,
  // whose stage sums take most of the registers, spilled 148 bytes before and 140 with it, ptxas,
  // CUDA 13.0).
  static constexpr bool kPromotedAhead = kRegFrags && !kInt && Batch == 1 && !kInflight && HUMMING_A8_CODES_AHEAD != 0;
  // Stages whose sums the tensor cores add up before they are promoted into fp32 (the loops with
  // one stage per batch: mainloop_inflight, mainloop_overlapped). Scales per group or block
  // apply to each stage's sums, so those promote every stage; with per-channel scales the window
  // only bounds the error of the tensor cores' narrower running sum, which grows with the adds in
  // it. Measured on the H200 (session 21, scripts/a8_error.py: 4096 x 8192 and x 28672, m = 512,
  // relative RMS error against the exact product of the quantized operands, bf16 rounding alone
  // 1.659e-3): 4-bit codes x e4m3 1.659-1.661e-3 in windows of 1, 2 and 4 stages (e2m1gc), and
  // the 128-token tile 7-19 % faster with 4 (28672x8192 e2m1gc at m = 2048 1002 -> 931 us, 8192 x
  // 28672 at 8192 4552 -> 3703; u4gc within 2 % but for 9 % at m = 8192); e4m3 codes 1.664e-3 with
  // 1 stage, 1.673e-3 with 2, 1.694e-3 with 4, and no faster, so they keep 1.
  static constexpr int kPromoteStages = (kGroups || kBlocks || kInt || !kFour) ? 1 : 4;
  // The same window for mainloop_promoted, in batches of at most kPromoteStages stages: in tiles of
  // 64 tokens and more (t192, whose second fragment set does not fit, takes that loop too).
  // Measured on the H200 (session 22, e2m1gc x e4m3-pt, graph us, 28672x8192 and 8192x8192 at
  // m = 64..256): t64 1.4-2.3 % faster with it, t32x256 0-2.9 %; the 8- and 16-token tiles of two
  // consumers 1-3.6 % slower, t32x128 up to 4.8 % slower, so below 64 tokens the window stays 1.
  static constexpr int kPromoteBatches = BM >= 64 && kPromoteStages / Batch > 1 ? kPromoteStages / Batch : 1;

  static_assert(ActId == dtypes::e4m3.id() || ActId == dtypes::e5m2.id() || kInt, "activations are e4m3, e5m2 or i8");
  static_assert(CodeId == (kInt ? dtypes::i8.id() : dtypes::e4m3.id()) || CodeId == dtypes::uint_type(4).id() ||
                    CodeId == dtypes::int_type(4).id() || (!kInt && CodeId == dtypes::e2m1.id()),
                "weights are e4m3 (float activations), i8 (i8 activations), u4, i4, or e2m1 (float activations)");
  static_assert(!kInt || GroupK == 0, "integer activations take per-token scales and per-channel weight scales");
  static_assert(ScaleId == dtypes::f32.id() || ScaleId == dtypes::bf16.id() || ScaleId == dtypes::f16.id(),
                "per-channel scales are f32, bf16 or f16");
  static_assert(OutId == dtypes::bf16.id() || OutId == dtypes::f16.id() || OutId == dtypes::f32.id(),
                "the output is bf16, f16 or f32");
  static_assert(kTokensM || BM == 8 || BM == 16 || BM == 32 || BM == 64 || BM == 128 || BM == 256 ||
                    ((BM == 160 || BM == 192) && kRegFrags && !kInt && Consumers == 2) ||
                    ((BM == 24 || BM == 48 || BM == 80 || BM == 144) && kRegFrags && !kInt && Grouped),
                "a WGMMA N of this backend (160 and 192: 4-bit codes in fragments, two consumers; 24, 48, 80 and "
                "144: grouped tiles of 4-bit codes in fragments)");
  static_assert(!kTokensM || (BM == 64 * Consumers && (BN == 64 || BN == 128 || BN == 192) && !kInt && !kFour &&
                              !kE5m2 && !kGroups && Batch == 1 && (!kBlocks || BN % 128 == 0)),
                "tokens on M: 64 per consumer warpgroup, 64, 128 or 192 channels (128 with blocks), e4m3 x e4m3, "
                "scales per channel or per block, one stage per batch");
  static_assert(Consumers >= 1 && Consumers <= 4, "one to four consumer warpgroups (a box has at most 256 rows)");
  static_assert(kSmemTotal <= 227 * 1024, "the ring fits a block's shared memory");
  static_assert(GroupK == 0 || GroupK == 128, "weight scales per channel or per 128 inputs");
  static_assert(GroupK == 0 ? GroupN == 1 : (GroupN == 1 || GroupN == 128), "scales per channel or per 128 channels");
  static_assert(!kBlocks || (ScaleId == dtypes::f32.id() && !kFour),
                "blocks are 128 x 128 with fp32 scales, of 8-bit codes");
  static_assert(kInt || kWgmmaN <= 128 || (kRegFrags && BM <= 192) || (kTokensM && BN <= 192),
                "8-bit floats take tiles of at most 128 tokens (a stage's sums take as many registers as the "
                "tile's, mainloop_promoted), 192 with 4-bit codes in fragments and two consumers");
  static_assert(Batch == 1 || (Batch > 1 && !kInt && Batch * kAcc <= 64),
                "batches of stages for 8-bit floats, whose sums fit the registers");
  static_assert(Stages >= Batch + 1, "the ring holds the batch and more");
  static_assert(StagedCodes == 0 || kFour, "only 4-bit codes are converted in the stage");
  static_assert(Sched == kSchedDense || ((Sched == kSchedGroupedWarp || Sched == kSchedGroupedLone) && !kStaged),
                "the dense scheduler, or the grouped one with the producer's warp or thread walking (no conversion "
                "in the stage: the notes sit where the converted barriers would)");
  static_assert(Layout == kLayoutGeneric || (Layout == kLayoutSm90A8 && kRegFrags),
                "weights in layout 1, or 4-bit codes read into register fragments from layout 4");

  struct Params {
    CUtensorMap act;    // activations [m][k] bytes, boxes of BM rows x 128
    CUtensorMap weight; // codes [n_pad][k_pad] bytes (grouped: every expert's, [experts x n_pad][k_pad]), boxes of
                        // BN rows x 128 (4-bit: k_pad / 2, x 64, 64-byte swizzle); layout 4: 64-byte rows, K tile
                        // kt of channel r at row kt n_pad + r (grouped: after the experts' before)
    CUtensorMap out; // kStagedStore: the output [m][n], boxes of BM (kTokensM: 64) rows x 64 channels (when `staged`)
    int staged;      // kStagedStore: 1 where the boxes go out by TMA through `out`, 0 where the threads copy them
    CUtensorMap act_tail;  // where tail_rows: the activations in boxes of tail_rows rows (a8_stage_loads.h)
    int tail_rows;         // rows of the last row of tiles' activation boxes (rounded up to 8), 0: whole boxes
    const float *scales_t; // kScalesT: the activation scales transposed, [K tile][m_pad]
    int64_t m_pad;         // (zeros past m and past the scales' columns)
    GemmArgs args;
    StreamKPlan plan;
    int64_t n_tiles;
    ExpertRows experts; // Grouped: the rows of each expert
    int expert_rows;    // Grouped: rows of each expert's weight in `weight` (n_pad; layout 4: n_pad x K tiles)
    int chunk_rows;     // Layout 4: rows of one K tile of the weight in `weight` (n_pad)
  };

  using RingPos = sm90::RingPos<Stages>;

  // The work of this block, in order: f(m0, m_end, n0, expert, kt0, kt1, tile) per segment, K tiles
  // [kt0, kt1) of the tile of rows [m0, m_end) (-1: up to m) and channels from n0. Dense: the
  // stream-K plan's segments in grouped order (scheduler/raster.h; tile: their index in the plan,
  // for the fix-up). Grouped: a tile a round of the experts' order (scheduler/moe.h, turned each round),
  // whole, walked by a whole warp (the producer's first, and the scale warp), or where Lone by one
  // thread, with its expert.
  template <bool Lone = false, class F> static __device__ __forceinline__ void for_each_work(const Params &p, F f) {
    if constexpr (Grouped) {
      for_each_expert_tile<Lone>(p.experts, BM, p.n_tiles, p.args.m, [&](const ExpertTile &e) {
        f(e.m0, e.m_end, e.n_tile * BN, e.expert, int64_t{0}, p.plan.k_tiles, int64_t{-1});
      });
    } else {
      for_each_dense_segment<BM, BN>(p, f);
    }
  }

  // The copies of a stage (backend/sm90/a8_stage_loads.h).
  using Loads = A8StageLoads<DenseA8>;
  // The consumers' walks over a segment's stages (backend/sm90/a8_mainloops.h).
  using Loops = A8Mainloops<DenseA8>;
  // The tile's stores (backend/sm90/a8_epilogue.h).
  using Epilogue = A8Epilogue<DenseA8>;
  // The producer warpgroup's scale warp and converter threads (backend/sm90/a8_producers.h).
  using Producers = A8Producers<DenseA8>;

  // Threads that produce: one, or in grouped kernels of kSchedGroupedWarp the producer's first
  // warp, which walks the experts together (expert_tile_warp) while its first thread issues each
  // tile's copies; in kSchedGroupedLone kernels one thread walks alone (expert_tile).
  static constexpr bool kLoneWalk = Sched == kSchedGroupedLone;
  static constexpr int kProducers = Grouped && !kLoneWalk ? 32 : 1;

  // Every stage of every segment of this block, in order; thread `t` of the producers. Boxes past
  // the matrices land as zeros and still count their full size on the barrier. In grouped kernels
  // the issuing thread also notes each segment for the consumers (SegmentNote) and, after the last,
  // the end of the work.
  static __device__ __forceinline__ void produce(const Params &p, uint32_t ring, char *ring_ptr, uint32_t bars, int t) {
    Probe::begin(); // diagnosis builds only (backend/sm90/probe.h)
    RingPos pos;
    SegmentNote *notes = ring_notes<Stages, kRingAndAfter>(ring_ptr);
    const bool issues = t == 0;
    // Where early_weights: the stages whose weights head_start has copied (of the first segment).
    bool head = issues && early_weights(p);
    for_each_work<kLoneWalk>(
        p, [&](int64_t m0, int64_t m_end, int64_t n0, int expert, int64_t kt0, int64_t kt1, int64_t unit) {
          if (issues) {
            Probe::segment_begin();
            const int rows = box_rows<BM>(p, m0);
            int64_t kt = kt0;
            if (head) {
              const int ahead = early_stages(kt0, kt1);
              fill_rest_early<Stages, kStageBytes>(ring, bars, pos, kt0, ahead,
                                                   [&](uint32_t stage, uint32_t full, int64_t k) {
                                                     Loads::act_boxes(p, stage, full, k, static_cast<int>(m0), rows);
                                                   });
              kt += ahead;
              head = false;
            }
            fill_segment<Stages, kStageBytes, Grouped>(
                ring, bars, pos, kt, kt1, Loads::tx_bytes(rows), notes,
                [&] { return SegmentNote::of(m0, m_end, n0, expert, kt0, kt1, unit); },
                [&](uint32_t stage, uint32_t full, int64_t kt) {
                  Loads::boxes(p, stage, full, kt, static_cast<int>(m0), static_cast<int>(n0), rows, expert);
                });
            Probe::segment_done();
          }
          if constexpr (kProducers > 1) __syncwarp();
        });
    if constexpr (Grouped)
      if (issues) note_end<Stages, kRingAndAfter>(ring_ptr, bars, pos);
    Probe::report('P');
  }

  // This thread's A fragments of one stage with 4-bit codes (frag[step][r]: register r of k32
  // step `step`, backend/sm90/operand_convert.h); unused with 8-bit codes.
  using Frags = uint32_t[kSteps][4];

  // (run_block's shared flag goes unused: the stream-K fix-up needs none.)
  static __device__ __forceinline__ void consume(const Params &p, uint32_t ring, char *ring_ptr, uint32_t bars,
                                                 volatile int * /*flag*/) {
    const GemmArgs &a = p.args;
    const int ct = static_cast<int>(threadIdx.x) - 128; // thread among the consumers
    const int cw = ct / 128, t = ct % 128, warp = t / 32, lane = t % 32;
    // This thread's first channel inside the tile (with kTokensM: its first token).
    const int col = cw * 64 + warp * 16 + lane / 4;
    RingPos pos;
    float acc[kAcc];
    Probe::begin();
    const auto segment = [&](int64_t m0, int64_t m_end, int64_t n0, int expert, int64_t kt0, int64_t kt1,
                             int64_t tile) {
      Probe::segment_begin();
      // With blocks: this warpgroup's weight block among the stage's scales.
      const int wblock = static_cast<int>((n0 % 128 + cw * 64) / 128);
      // The thread's first token among the stage's activation scales (kTokensM; kScaleLead: the run
      // starts at the 16-byte boundary at or before the tile's first row).
      const int scol = col + (kScaleLead != 0 ? static_cast<int>(m0 % 4) : 0);
      Loops::mainloop(ring, ring_ptr, bars, pos, kt1 - kt0, cw, wblock, scol, t, acc);
      Probe::segment_done();
      const StreamKPlan &plan = p.plan;
      if constexpr (!Grouped)
        if (!(kt0 == 0 && kt1 == plan.k_tiles)) {
          const bool last =
              epilogue::streamk_fixup<kAcc, kConsumerThreads>(plan, a.workspace, blockIdx.x, tile - plan.dp_tiles(), ct,
                                                              acc, [] { consumer_sync<kConsumerThreads>(); });
          Probe::fixup_done();
          if (!last) return;
        }
      // The weight's per-channel scales (of the tile's expert in grouped GEMMs).
      const void *scales = static_cast<const char *>(a.scales) + expert * a.expert_scales_stride;
      Epilogue::store(p, ring + kRingBytes + cw * kBoxBytes, cw, t, lane, col, m0, m_end, n0, scales, acc);
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

  // Whether thread 0 copies the first stages' weights before the wait for the launch before
  // (GemmArgs::early_weights; dense launches only: the grouped walk reads the experts' rows, which
  // that launch may have written).
  static __device__ __forceinline__ bool early_weights(const Params &p) {
    return !Grouped && p.args.early_weights != 0;
  }
  // How many stages of a first segment of K tiles [kt0, kt1) get their weights early: as many as
  // the ring holds.
  static __device__ __forceinline__ int early_stages(int64_t kt0, int64_t kt1) {
    return static_cast<int>(kt1 - kt0 < Stages ? kt1 - kt0 : Stages);
  }
  // run_block's head_start: where early_weights, the weights of the first stages of this block's
  // first segment (produce copies the rest of those stages after the wait).
  static __device__ __forceinline__ void head_start(const Params &p, uint32_t ring, uint32_t bars) {
    if (!early_weights(p)) return;
    bool first = true;
    for_each_work(p, [&](int64_t m0, int64_t, int64_t n0, int expert, int64_t kt0, int64_t kt1, int64_t) {
      if (!first) return;
      first = false;
      fill_weights_early<Stages, kStageBytes>(ring, bars, kt0, early_stages(kt0, kt1),
                                              Loads::tx_bytes(box_rows<BM>(p, m0)),
                                              [&](uint32_t stage, uint32_t full, int64_t k) {
                                                Loads::weight_box(p, stage, full, k, static_cast<int>(n0), expert);
                                              });
    });
  }

  static __device__ __forceinline__ void run(const Params &p, char *smem) {
    // The boxes sit between the ring and its barriers.
    run_block<Stages, Consumers, kRingAndAfter, 1 + kScaleArrivals, kProducerRegs, kConvThreads>(
        smem,
        [&] {
          prefetch_tensor_map(&p.act);
          if (p.tail_rows != 0) prefetch_tensor_map(&p.act_tail);
          prefetch_tensor_map(&p.weight);
          if (kStagedStore && p.staged) prefetch_tensor_map(&p.out);
        },
        [&](int t, uint32_t ring, char *ring_ptr, uint32_t bars) {
          if (t < kProducers) produce(p, ring, ring_ptr, bars, t);
          if (GroupK != 0 && t / 32 == 1) Producers::scales(p, ring, bars, t % 32);
          if (kStaged && t >= 128 - kConvThreads) Producers::converted(p, ring_ptr, bars, t - (128 - kConvThreads));
        },
        [&](uint32_t ring, char *ring_ptr, uint32_t bars, volatile int *flag) {
          consume(p, ring, ring_ptr, bars, flag);
        },
        [&](uint32_t ring, uint32_t bars) { head_start(p, ring, bars); });
  }

  static int64_t n_tiles(const GemmArgs &args) { return (args.dims.n_pad + BN - 1) / BN; }

  static StreamKPlan plan(const GemmArgs &args) {
    const int64_t k_tiles = (args.dims.k_pad + BK - 1) / BK;
    // Grouped: whole tiles that each block finds itself (scheduler/moe.h, grouped_plan).
    if constexpr (Grouped) return grouped_plan(args.m, args.experts, BM, n_tiles(args), k_tiles, args.num_sms);
    const int64_t m_tiles = (args.m + BM - 1) / BM;
    // Few t128 tiles over a deep K spread over the idle multiprocessors where that was measured to
    // gain (scheduler/streamk.h, HeavySpread, a8_heavy_spread): 4-bit codes on FP8 tensor cores;
    // two rows of t64 tiles of 8-bit codes spread only where at most half the multiprocessors
    // would have a tile, at any depth (MidSpread, a8_mid_spread). The dispatcher's estimates read
    // the same plan (src/registry.cpp, persistent_launch_facts).
    constexpr HeavySpread kHeavy = a8_heavy_spread(static_cast<int>(kCode.bits), kInt);
    constexpr MidSpread kMid = a8_mid_spread(static_cast<int>(kCode.bits));
    return plan_persistent(m_tiles * n_tiles(args), k_tiles, BK, args.num_sms, BM, m_tiles, kHeavy, kMid);
  }
};

#define HUMMING_SM90_A8_TARGS                                                                                          \
  uint32_t ActId, uint32_t CodeId, uint32_t ScaleId, int GroupK, int GroupN, uint32_t OutId, int BM, int Consumers,    \
      int Stages, int Batch, int StagedCodes, int Layout, int ChannelsN, int Sched
#define HUMMING_SM90_A8_ARGS                                                                                           \
  ActId, CodeId, ScaleId, GroupK, GroupN, OutId, BM, Consumers, Stages, Batch, StagedCodes, Layout, ChannelsN, Sched

// The instance's entry points (tools/gen_instances.py writes their calls; backend/sm90/a8_launch.h).
template <HUMMING_SM90_A8_TARGS> Status can_implement_a8(const GemmArgs &args) {
  return a8_can_implement<DenseA8<HUMMING_SM90_A8_ARGS>>(args);
}

template <HUMMING_SM90_A8_TARGS> size_t workspace_bytes_a8(const GemmArgs &args) {
  return a8_workspace_bytes<DenseA8<HUMMING_SM90_A8_ARGS>>(args);
}

template <HUMMING_SM90_A8_TARGS> Status prepare_a8() {
  return prepare_launch<DenseA8<HUMMING_SM90_A8_ARGS>>("the sm90 8-bit activation kernels");
}

template <HUMMING_SM90_A8_TARGS> Status launch_a8(const GemmArgs &args, void *stream) {
  return a8_launch<DenseA8<HUMMING_SM90_A8_ARGS>>(args, stream);
}

#undef HUMMING_SM90_A8_TARGS
#undef HUMMING_SM90_A8_ARGS

} // namespace sm90
} // namespace humming
