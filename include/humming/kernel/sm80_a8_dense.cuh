// The sm80 family's GEMM with 8-bit activations on mma.sync m16n8k32, with the dense tile scheduler
// and stream-K (scheduler/streamk.h). FP8 (e4m3 or e5m2 activations, fp32 sums) on sm_89 and sm_90
// (L40S, L4, RTX 4090; Hopper runs it too); s8 (exact s32 sums) on every sm80-family GPU.
// W8A8: e4m3 weights with FP8 activations, i8 with i8. W4A8: u4, i4 or e2m1 weights with e4m3
// activations, u4 or i4 with i8, turned into 8-bit operands in registers (exact values;
// backend/sm80/a8_stage_mma.h). Per-token activation scales x per-channel weight scales (and the
// weight's global scale) multiply the fp32 sums at the end of each segment; 4-bit codes may
// instead take a scale per channel and 128 inputs, which multiplies each stage's sums.
//
// The weight is read as the generic layout stores it (layout 1: each output channel's codes in a
// row of k_pad bytes, or k_pad / 2 with 4-bit codes), like the activations, so a stage is BM
// activation rows and BN weight rows, filled by cp.async (backend/sm80/a8_stage.h), and a weight
// packed for the generic backend runs here as it is.
//
// Block tile BM x BN x BK, BN = 64 * WarpsN, BK = WarpK * WarpsK, warps in a WarpsM x WarpsN x
// WarpsK grid as in the weight-only kernel (kernel/sm80_dense.cuh): each computes (BM / WarpsM)
// rows x 64 channels over its WarpK slice of every stage; the K-slice warps' sums meet through
// shared memory at the end of a segment (backend/sm80/kslice_reduce.h). Launches of at most 8 rows
// on warps of one mma tile swap the mma's roles (backend/sm80/a8_stage_mma.h, narrow).
//
// FP8 sums: the tensor cores keep the running sum of an FP8 mma narrower than fp32 (a 13-bit
// mantissa on sm_89 and sm_90), so each stage's WarpK inputs (at most 128) are summed from zero
// and added into the fp32 sums after the stage (two-level accumulation, as the sm90 FP8 kernels
// do every 128 inputs). Integer sums are exact and stay in s32 for the whole segment, or, with
// group scales, for the stage.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "humming/backend/sm80/a8_stage.h"
#include "humming/backend/sm80/a8_stage_mma.h"
#include "humming/backend/sm80/kslice_reduce.h"
#include "humming/backend/sm80/launch.h"
#include "humming/backend/sm80/pipeline.h"
#include "humming/backend/sm80/ptx.h"
#include "humming/backend/sm80/warp_sums.h"
#include "humming/epilogue/store.h"
#include "humming/humming.h"
#include "humming/scheduler/streamk.h"

namespace humming {
namespace sm80 {

// ActId:   DType id of the activation codes: e4m3 or e5m2 (FP8 mma, sm_89 and newer), or i8.
// CodeId:  DType id of the weight codes: e4m3 with FP8 activations, i8 with i8 ones; or 4-bit
//          u4 or i4 (either activations) or e2m1 (e4m3 activations).
// ScaleId: DType id of the weight scales (f32, bf16 or f16; f32 with blocks; e8m0 for MXFP4).
// GroupK:  0 (one scale per output channel), or 32 (MXFP4: e2m1 codes with e8m0 scales, each K
//          step its own group) or 128 (a stage is one group).
// GroupN:  1 (GroupK 32 / 128: scales per channel and group, 4-bit codes), or 128 (DeepSeek-style
//          128 x 128 weight blocks with activation scales per token and 128 inputs, e4m3 codes).
// OutId:   DType id of the output (f16, bf16 or f32).
// BM:      rows of the block tile (a multiple of 16 * WarpsM).
// WarpsM, WarpsN, WarpsK: the warp grid (rows, 64-channel columns, K slices).
// WarpK:   inputs (bytes) per warp per stage, a multiple of 32 and at most 128 (one FP8 promotion
//          per stage).
// Stages:  depth of the cp.async pipeline.
template <uint32_t ActId, uint32_t CodeId, uint32_t ScaleId, int GroupK, int GroupN, uint32_t OutId, int BM, int WarpsM,
          int WarpsN, int WarpsK, int WarpK, int Stages>
struct DenseA8 {
  // The template parameters the components read (backend/sm80: a8_stage.h, a8_stage_mma.h,
  // kslice_reduce.h, warp_sums.h).
  static constexpr int kBM = BM, kWarpsM = WarpsM, kWarpsN = WarpsN, kWarpsK = WarpsK, kWarpK = WarpK, kGroupK = GroupK,
                       kGroupN = GroupN;
  // Blocks: each stage's sums times its activation scales (per row) and its weight block's scale.
  static constexpr bool kBlocks = GroupK != 0 && GroupN != 1;
  static constexpr uint32_t kScaleId = ScaleId;
  static constexpr DType kAct = DType::from_id(ActId);
  static constexpr DType kCode = DType::from_id(CodeId);
  static constexpr DType kOut = DType::from_id(OutId);
  static constexpr bool kIntOps = kAct.kind == humming::kInt;
  static constexpr bool kActE5M2 = !kIntOps && kAct.exp == 5;
  static constexpr bool kCodeE5M2 = false;
  static constexpr int kCodeBits = static_cast<int>(kCode.bits);
  // e2m1 codes go into e4m3 operands of 2^-6 their values by bit moves (numeric/nibble_lut.h; 7
  // instructions per 8 codes, the lookup 12), so the sums are scaled back by kSumScale (exact).
  static constexpr bool kShiftedE2m1 = CodeId == dtypes::e2m1.id();
  static constexpr float kSumScale = kShiftedE2m1 ? numeric::kE2m1ShiftScale : 1.0f;
  // The tensor cores' sums go into fp32 after every stage: FP8 (their running sum is narrow) and
  // group scales (each stage's sums take their group's scales).
  static constexpr bool kStagePromote = !kIntOps || GroupK != 0;
  // K steps of a warp between two promotions: one group's where groups are narrower than the
  // warp's slice of a stage (MXFP4's 32 inputs: every step), else the whole slice.
  static constexpr int kPromoteSteps = GroupK != 0 && GroupK < WarpK ? GroupK / 32 : WarpK / 32;
  static constexpr int kWarps = WarpsM * WarpsN * WarpsK;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int BN = 64 * WarpsN;
  static constexpr int BK = WarpK * WarpsK;
  static constexpr int WM = BM / WarpsM;
  static constexpr int MT = WM / 16;
  static constexpr int kABytes = BM * BK;
  static constexpr int kBBytes = BN * BK * kCodeBits / 8;
  static constexpr int kSBytes = GroupK == 0 ? 0
                                 : kBlocks   ? BM * 4 + 16
                                             : (BK / GroupK) * BN * static_cast<int>(DType::from_id(ScaleId).bits) / 8;
  static constexpr int kStageBytes = kABytes + kBBytes + kSBytes;
  static constexpr int kAcc = MT * 8 * 4;   // fp32 sums per lane
  static constexpr int kSteps = WarpK / 32; // mma K steps per warp per stage
  static constexpr int kSmemBytes = Stages * kStageBytes;
  // After the stages: the fix-up's flag and the block's segment list (backend/sm80/pipeline.h).
  static constexpr int kSmemTotal = block_smem_total(kSmemBytes);
  // Launches of at most 8 rows on warps of one mma tile take the narrow form.
  static constexpr bool kHasNarrow = MT == 1;
  static constexpr int kNarrowRows = 8;
  // Decode tiles are sized for two blocks per SM where their shared memory allows it (128
  // registers a thread), as the weight-only kernel's.
  static constexpr int kMinBlocks = kHasNarrow && 2 * kSmemTotal <= 227 * 1024 ? 2 : 1;

  static_assert(
      kIntOps ? (CodeId == dtypes::i8.id() || CodeId == dtypes::uint_type(4).id() || CodeId == dtypes::int_type(4).id())
              : ((ActId == dtypes::e4m3.id() || ActId == dtypes::e5m2.id()) &&
                 (CodeId == dtypes::e4m3.id() ||
                  (ActId == dtypes::e4m3.id() && (CodeId == dtypes::uint_type(4).id() ||
                                                  CodeId == dtypes::int_type(4).id() || CodeId == dtypes::e2m1.id())))),
      "i8 activations x i8, u4 or i4 weights; e4m3 / e5m2 x e4m3; e4m3 x u4, i4 or e2m1");
  // (kGroupOr1: GroupK, or 1 where there are no groups, so that no remainder below divides by zero.)
  static constexpr int kGroupOr1 = GroupK == 0 ? 1 : GroupK;
  static_assert(GroupK == 0 || (kBlocks ? GroupK == BK && CodeId == dtypes::e4m3.id()
                                        : kCodeBits == 4 && BK % kGroupOr1 == 0 && GroupK % 32 == 0 &&
                                              (GroupK % WarpK == 0 || WarpK % kGroupOr1 == 0)),
                "group scales: 4-bit codes, groups of whole K steps that tile the stage and the warps' slices; blocks: "
                "e4m3 codes, one group a stage");
  static_assert(ScaleId != dtypes::e8m0.id() || (CodeId == dtypes::e2m1.id() && !kIntOps),
                "e8m0 scales go with e2m1 codes (MXFP4) and FP8 activations");
  static_assert(!kBlocks || (GroupN % BN == 0 && ScaleId == dtypes::f32.id() && !kIntOps),
                "a tile's channels lie in one weight block of fp32 scales; FP8 activations");
  static_assert(ScaleId == dtypes::f32.id() || ScaleId == dtypes::bf16.id() || ScaleId == dtypes::f16.id() ||
                    ScaleId == dtypes::e8m0.id(),
                "weight scales are f32, bf16, f16 or (MXFP4) e8m0");
  static_assert(OutId == dtypes::f16.id() || OutId == dtypes::bf16.id() || OutId == dtypes::f32.id(),
                "outputs are f16, bf16 or f32");
  static_assert(BM % (16 * WarpsM) == 0, "whole mma tiles of rows per warp");
  static_assert(WarpK % 32 == 0 && WarpK <= 128, "whole K steps, at most 128 inputs per FP8 promotion");
  static_assert(kStageBytes % 16 == 0, "16-byte aligned stages");

  struct Params {
    GemmArgs args;
    StreamKPlan plan;
    int64_t k_tiles; // BK tiles along the padded K
  };

  using Stage = A8Stage<DenseA8>;  // cp.async copies and fragments (backend/sm80/a8_stage.h)
  using Mma = A8StageMma<DenseA8>; // the stage math (backend/sm80/a8_stage_mma.h)
  using Sums = WarpSums<DenseA8>;  // the end of a segment's output (backend/sm80/warp_sums.h)
  using Sum = typename Mma::Sum;

  // Narrow: the narrow form (m <= 8, warps of one mma tile).
  template <bool Narrow> static __device__ void run(const Params &p, char *smem) {
    static_assert(!Narrow || kHasNarrow, "narrow launches need warps of one mma tile");
    const GemmArgs &a = p.args;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int wk = warp / (WarpsM * WarpsN);
    const int wn = (warp / WarpsM) % WarpsN;
    const int wm = warp % WarpsM;
    const int n_tiles = static_cast<int>((a.dims.n_pad + BN - 1) / BN);

    // The block's segments (scheduler/streamk.h), worked out once and read from shared memory.
    Segment *segs;
    const int n_segs = block_segments_shared(p.plan, smem + kSmemBytes, segs);
    const uint32_t smem_base = smem_addr(smem);

    for (int si = 0; si < n_segs; ++si) {
      const int tile = segs[si].tile, kt_begin = segs[si].kt_begin, kt_end = segs[si].kt_end;
      const int64_t m0 = static_cast<int64_t>(tile / n_tiles) * BM, n0 = static_cast<int64_t>(tile % n_tiles) * BN;

      // acc: the fp32 sums (narrow: accn, the swapped layout). sums / sumsn: the tensor cores' own,
      // a stage's with FP8 operands, the whole segment's with integers.
      float acc[MT][8][4], accn[Narrow ? 4 : 1][4];
      Sum sums[Narrow ? 1 : MT][8][4], sumsn[Narrow ? 4 : 1][4];
      fill(acc, 0.0f);
      fill(accn, 0.0f);
      fill(sums, Sum(0));
      fill(sumsn, Sum(0));

      const auto load = [&](uint32_t dst, int kt) { Stage::copy(p, dst, kt, m0, n0); };
      char *stage = cp_async_ring<Stages, kStageBytes>(smem, smem_base, kt_begin, kt_end, load, [&](char *stage) {
      // The warp's K steps of the stage, promoted after every kPromoteSteps of them (one scale
      // group, or the whole slice) where the sums are promoted per stage.
#pragma unroll
        for (int s0 = 0; s0 < kSteps; s0 += kPromoteSteps) {
#pragma unroll
          for (int s = s0; s < s0 + kPromoteSteps; ++s) {
            if constexpr (Narrow)
              Mma::narrow_step(stage, wn, wk, lane, s, sumsn);
            else
              Mma::wide_step(stage, wm, wn, wk, lane, s, sums);
          }
          if constexpr (kStagePromote) {
            const int row = scale_row(wk, s0);
            if constexpr (Narrow)
              promote_narrow(stage, row, wn, lane, sumsn, accn);
            else
              promote_wide(stage, row, wm, wn, lane, sums, acc);
          }
        }
      });
      if constexpr (!kStagePromote) {
        if constexpr (Narrow)
          promote_narrow(stage, 0, wn, lane, sumsn, accn);
        else
          promote_wide(stage, 0, wm, wn, lane, sums, acc);
      }
      if constexpr (Narrow) narrow_to_wide(accn, lane, acc[0]);
      // Drained: no copy is in flight, so the sums may meet in the last stage's buffer.
      cp_async_wait<0>();
      finish_segment(p, stage, segs[si], tile, n_tiles, wm, wn, wk, lane, acc,
                     reinterpret_cast<int *>(smem + kSmemBytes));
      __syncthreads(); // the next segment's copies may overwrite that buffer
    }
  }

  // Every element of an array of any rank set to v.
  template <class T, int N, class V> static __device__ __forceinline__ void fill(T (&x)[N], V v) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if constexpr (std::is_array_v<T>)
        fill(x[i], v);
      else
        x[i] = v;
    }
  }

  // The stage's scale row of warp slice wk's K step s (groups narrower than a stage), else 0.
  static __device__ __forceinline__ int scale_row(int wk, int s) {
    if constexpr (GroupK != 0 && !kBlocks && GroupK < BK) return (wk * WarpK + s * 32) / GroupK;
    return 0;
  }

  // The tensor cores' sums added into the fp32 ones, each times its channel's scale of the stage's
  // K group where the weight has group scales (read from the stage), and set back to zero: after
  // every stage (kStagePromote), else once, at the end of the segment (integers, per-channel
  // scales). Wide layout: sums[i][j][e] of channel j * 8 + (lane % 4) * 2 + e % 2 of the warp's 64.
  static __device__ __forceinline__ void promote_wide(const char *stage, int row, int wm, int wn, int lane,
                                                      Sum (&from)[MT][8][4], float (&to)[MT][8][4]) {
    if constexpr (kBlocks) {
      const float ws = Stage::weight_block_scale(stage);
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float f = ws * Stage::act_block_scale(stage, wm * WM + i * 16 + lane / 4 + 8 * h);
#pragma unroll
          for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              to[i][j][2 * h + e] = fmaf(from[i][j][2 * h + e], f, to[i][j][2 * h + e]);
              from[i][j][2 * h + e] = 0;
            }
        }
      return;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float sc = 1.0f;
        if constexpr (GroupK != 0) sc = Stage::group_scale(stage, row, wn * 64 + j * 8 + (lane % 4) * 2 + e);
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            to[i][j][2 * h + e] = fmaf(static_cast<float>(from[i][j][2 * h + e]), sc, to[i][j][2 * h + e]);
            from[i][j][2 * h + e] = 0;
          }
      }
  }
  // The same for the narrow layout: sums[J][2h + e] of channel J * 16 + h * 8 + lane / 4.
  static __device__ __forceinline__ void promote_narrow(const char *stage, int row, int wn, int lane, Sum (&from)[4][4],
                                                        float (&to)[4][4]) {
    if constexpr (kBlocks) {
      const float ws = Stage::weight_block_scale(stage);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float f = ws * Stage::act_block_scale(stage, (lane % 4) * 2 + e); // token (lane % 4) * 2 + e
#pragma unroll
        for (int J = 0; J < 4; ++J)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            to[J][2 * h + e] = fmaf(from[J][2 * h + e], f, to[J][2 * h + e]);
            from[J][2 * h + e] = 0;
          }
      }
      return;
    }
#pragma unroll
    for (int J = 0; J < 4; ++J)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float sc = 1.0f;
        if constexpr (GroupK != 0) sc = Stage::group_scale(stage, row, wn * 64 + J * 16 + h * 8 + lane / 4);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          to[J][2 * h + e] = fmaf(static_cast<float>(from[J][2 * h + e]), sc, to[J][2 * h + e]);
          from[J][2 * h + e] = 0;
        }
      }
  }

  // The end of a segment: K-slice warps' sums added, then each sum times its token's activation
  // scale, its channel's weight scale (per-channel scales) and the global scale, then the output written or a partial
  // contributed to the tile's fix-up (backend/sm80/warp_sums.h). Called by all threads.
  static __device__ __forceinline__ void finish_segment(const Params &p, char *buf, const Segment &seg, int tile,
                                                        int n_tiles, int wm, int wn, int wk, int lane,
                                                        float (&acc)[MT][8][4], int *flag) {
    const GemmArgs &a = p.args;
    const int64_t m0 = static_cast<int64_t>(tile / n_tiles) * BM, n0 = static_cast<int64_t>(tile % n_tiles) * BN;
    if constexpr (WarpsK > 1) KSliceReduce<DenseA8>::run(buf, wm, wn, wk, lane, acc);
    if (wk == 0) {
      const float global = a.global_scale != nullptr ? *a.global_scale : 1.0f;
      float ts[MT][2]; // rows i * 16 + lane / 4 + 8h: their tokens' scales (0 past m)
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t m = m0 + wm * WM + i * 16 + lane / 4 + h * 8;
          ts[i][h] = kBlocks ? 1.0f : (m < a.m ? a.a_scales[m * a.a_scale_cols] : 0.0f);
        }
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t n = n0 + wn * 64 + j * 8 + (lane % 4) * 2 + e;
          // Group scales are on the sums already; e2m1 codes' operands were 2^-6 of their values.
          float f = global * kSumScale;
          if constexpr (GroupK == 0) f = n < a.dims.n_pad ? f * epilogue::load_out<ScaleId>(a.scales, n) : 0.0f;
#pragma unroll
          for (int i = 0; i < MT; ++i) {
            acc[i][j][e] *= f * ts[i][0];
            acc[i][j][e + 2] *= f * ts[i][1];
          }
        }
    }
    Sums::store(a, p.plan, seg, tile, m0, n0, wm, wn, wk, lane, acc, flag);
  }

  static int64_t n_tiles(const GemmArgs &args) { return (args.dims.n_pad + BN - 1) / BN; }

  static Params make_params(const GemmArgs &args) {
    Params p;
    p.args = args;
    p.k_tiles = (args.dims.k_pad + BK - 1) / BK;
    const int64_t tiles = (args.m + BM - 1) / BM * n_tiles(args);
    const int resident = resident_blocks<DenseA8>();
    p.plan = plan_stream_k(tiles, p.k_tiles, BK, 1, args.num_sms, resident > 0 ? resident : 1, kHasNarrow);
    return p;
  }
};

#define HUMMING_SM80_A8_TARGS                                                                                          \
  uint32_t ActId, uint32_t CodeId, uint32_t ScaleId, int GroupK, int GroupN, uint32_t OutId, int BM, int WarpsM,       \
      int WarpsN, int WarpsK, int WarpK, int Stages
#define HUMMING_SM80_A8_ARGS ActId, CodeId, ScaleId, GroupK, GroupN, OutId, BM, WarpsM, WarpsN, WarpsK, WarpK, Stages

template <HUMMING_SM80_A8_TARGS> Status can_implement_a8(const GemmArgs &args) {
  using K = DenseA8<HUMMING_SM80_A8_ARGS>;
  const GemmFormat &f = args.fmt;
  if (args.layout != kLayoutGeneric)
    return Status::Error(std::string("the sm80 8-bit activation kernels read weights packed for layout 1 (generic), "
                                     "not layout ") +
                         std::to_string(args.layout) + " (" + layout_name(args.layout) + ")");
  if (K::kBlocks) {
    if (f.act.granularity != ActScale::kGroup || f.act.group_k != GroupK)
      return Status::Error("this sm80 W8A8 instance takes activation scales per token and " + std::to_string(GroupK) +
                           " inputs (-g" + std::to_string(GroupK) + ")");
    if (f.weight.group_k != GroupK || f.weight.group_n != GroupN)
      return Status::Error("this sm80 W8A8 instance takes weight scales per block of " + std::to_string(GroupK) +
                           " x " + std::to_string(GroupN) + " (g" + std::to_string(GroupK) + "n" +
                           std::to_string(GroupN) + ")");
  } else {
    if (f.act.granularity != ActScale::kToken)
      return Status::Error("the sm80 8-bit activation kernels take one activation scale per token (-pt) with these "
                           "weight scales");
    if (f.weight.group_k != GroupK || f.weight.group_n != 1)
      return Status::Error(GroupK == 0 ? std::string("this sm80 8-bit activation instance takes one weight scale per "
                                                     "output channel (gc)")
                                       : "this sm80 8-bit activation instance takes one weight scale per channel and " +
                                             std::to_string(GroupK) + " inputs (g" + std::to_string(GroupK) + ")");
  }
  if (args.dims.k % 16 != 0)
    return Status::Error("the sm80 8-bit activation kernels need k to be a multiple of 16 (16-byte activation rows), "
                         "got k=" +
                         std::to_string(args.dims.k));
  if (args.m > 1 && args.lda % 16 != 0)
    return Status::Error("the sm80 8-bit activation kernels need the activation row stride to be a multiple of 16 "
                         "elements, got " +
                         std::to_string(args.lda));
  if (reinterpret_cast<uintptr_t>(args.a) % 16 != 0 || reinterpret_cast<uintptr_t>(args.codes) % 16 != 0)
    return Status::Error("the sm80 8-bit activation kernels need 16-byte aligned activations and codes");
  if (args.dims.words_per_row * 32 != args.dims.k_pad * K::kCodeBits || args.dims.k_pad % 32 != 0)
    return Status::Error(std::string("the sm80 8-bit activation kernels need the codes as rows of k_pad ") +
                         (K::kCodeBits == 4 ? "/ 2 " : "") + "bytes, k_pad a multiple of 32 (the generic layout of " +
                         std::to_string(K::kCodeBits) + "-bit codes)");
  if (K::kIntOps && args.dims.k_pad > 131072)
    return Status::Error("the sm80 integer kernels sum at most 131072 inputs (127 x 127 x 131072 < 2^31 keeps the s32 "
                         "sums exact), got k=" +
                         std::to_string(args.dims.k));
  const int64_t tiles = (args.m + BM - 1) / BM * K::n_tiles(args);
  if (tiles > 0x7FFFFFFF || args.dims.k_pad / K::BK > 0x7FFFFFFF)
    return Status::Error("too many output tiles or K tiles for one launch");
  return Status::Ok();
}

template <HUMMING_SM80_A8_TARGS> size_t workspace_bytes_a8(const GemmArgs &args) {
  return launch_workspace_bytes<DenseA8<HUMMING_SM80_A8_ARGS>>(args);
}

template <HUMMING_SM80_A8_TARGS> Status prepare_a8() {
  return prepare_kernels<DenseA8<HUMMING_SM80_A8_ARGS>>("sm80 8-bit activation");
}

template <HUMMING_SM80_A8_TARGS> Status launch_a8(const GemmArgs &args, void *stream) {
  return launch_kernels<DenseA8<HUMMING_SM80_A8_ARGS>>(args, stream, "sm80 8-bit activation");
}

#undef HUMMING_SM80_A8_TARGS
#undef HUMMING_SM80_A8_ARGS

} // namespace sm80
} // namespace humming
