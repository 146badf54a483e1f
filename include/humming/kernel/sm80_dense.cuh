// The sm80 backend with the dense tile scheduler and stream-K (scheduler/streamk.h): weight-only
// GEMM (f16 / bf16 activations, 4- or 8-bit integer or e4m3 weights) on mma.sync m16n8k16. Runs on sm_80,
// sm_86, sm_89 and sm_90.
//
// Block tile BM x BN x BK, BN = 64 * WarpsN, BK = WarpK * WarpsK. Warps form a WarpsM x WarpsN x
// WarpsK grid: each computes (BM / WarpsM) rows x 64 channels over its WarpK slice of every stage,
// and the WarpsK partial sums are added through shared memory at the end (small M gets its
// parallelism from K). Stages are filled with cp.async (activations into a swizzled tile read with
// ldmatrix; weights as layout-sm80 blocks, one 16- or 32-byte load per lane per 16 x 64 block).
// Codes become operands in registers (numeric/fast_dequant.h).
//
// Two ways to apply scales, chosen by the warp's row count:
// * Warps of one 16-row mma tile (MT == 1, the decode tiles) keep a second set of fp32 sums per
//   scale-group segment and fold the group scale in with one FFMA per sum when the segment ends.
//   Per 16 x 64 weight block that costs far less than scaling 32 operands, and it is exact. When
//   every channel has the same zero (symmetric codes), the operands even keep their constant
//   offset R (magic + 2^(bits-1)): one extra mma against a constant -R fragment yields -R times
//   each row's activation sum, which starts the segment's sums, so a 4-bit pair costs one LOP3.
// * Warps of several mma tiles (MT > 1) reuse each operand MT times, so they build
//   (code - zero) * group scale in the operand type once instead of keeping MT more sums.
// Per-channel scales and the global scale are applied to the fp32 sums at the end, which is exact.
//
// Float zero points (w = (code - z) * s with z in the scale type): z * s is not an operand a
// register pair can hold exactly, so warps of one mma tile keep the operands code (+ magic, as
// above) and remove z through the row sums in fp32: a segment adds s * (sums - z * row sums).
// Warps of several mma tiles build (code - z) * s in the operand type, two roundings.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "humming/backend/sm80/ptx.h"
#include "humming/backend/sm80/kslice_reduce.h"
#include "humming/backend/sm80/launch.h"
#include "humming/backend/sm80/pipeline.h"
#include "humming/backend/sm80/stage_copy.h"
#include "humming/backend/sm80/stage_fragments.h"
#include "humming/backend/sm80/stage_mma.h"
#include "humming/backend/sm80/warp_sums.h"
#include "humming/humming.h"
#include "humming/layout/sm80.h"
#include "humming/numeric/fast_dequant.h"
#include "humming/scheduler/streamk.h"

namespace humming {
namespace sm80 {

// ActId:   DType id of the activations and of the mma operands (f16 or bf16).
// CodeId:  DType id of the weight codes: u4, i4, u8, i8 or e4m3.
// ScaleId: DType id of the weight scales; must equal ActId (scales multiply operands in that type).
// Zero:    ZeroKind: none (unsigned codes are symmetric around 2^(bits-1)), int (a byte per group)
//          or float (in the scale type).
// OutId:   DType id of the output (f16, bf16 or f32).
// GroupK:  inputs per scale (32, 64, 128, ...), or 0 for one scale per output channel.
// BM:      rows of the block tile (a multiple of 16 * WarpsM).
// WarpsM, WarpsN, WarpsK: the warp grid (rows, 64-channel columns, K slices).
// WarpK:   inputs per warp per stage (a multiple of 16).
// Stages:  depth of the cp.async pipeline.
template <uint32_t ActId, uint32_t CodeId, uint32_t ScaleId, int Zero, uint32_t OutId, int GroupK, int BM, int WarpsM,
          int WarpsN, int WarpsK, int WarpK, int Stages>
struct Dense {
  // The template parameters the components read (backend/sm80: stage_copy.h, stage_fragments.h,
  // stage_mma.h, kslice_reduce.h).
  static constexpr int kBM = BM, kWarpsM = WarpsM, kWarpsN = WarpsN, kWarpsK = WarpsK, kWarpK = WarpK, kGroupK = GroupK;
  static constexpr bool kBf16 = ActId == dtypes::bf16.id();
  static constexpr DType kCode = DType::from_id(CodeId);
  static constexpr DType kOut = DType::from_id(OutId);
  static constexpr int kBits = static_cast<int>(kCode.bits);
  static constexpr bool kSigned = kCode.kind == kInt;
  static constexpr bool kFloatCode = kCode.kind == kFloat; // e4m3: operands are the code values
  static constexpr bool kIntZero = Zero == static_cast<int>(ZeroKind::kInt);
  static constexpr bool kFloatZero = Zero == static_cast<int>(ZeroKind::kFloat);
  // Bytes of one zero point in shared memory (zero points of K groups are staged like scales).
  static constexpr int kZeroBytes = kFloatZero ? 2 : 1;
  static constexpr int kWarps = WarpsM * WarpsN * WarpsK;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int BN = 64 * WarpsN;
  static constexpr int BK = WarpK * WarpsK;
  static constexpr int WM = BM / WarpsM;
  static constexpr int MT = WM / 16;
  static constexpr int kWordsPerLane = layout_sm80::words_per_lane(kBits);
  static constexpr int kWordsPerBlock = layout_sm80::words_per_block(kBits);
  static constexpr int kPairsPerWord = layout_sm80::pairs_per_word(kBits);
  static constexpr int kScaleRows = GroupK == 0 ? 0 : (GroupK >= BK ? 1 : BK / GroupK);
  static constexpr int kABytes = BM * BK * 2;
  static constexpr int kBBytes = BK * BN * kBits / 8;
  static constexpr int kSBytes = kScaleRows * BN * 2;
  static constexpr int kZBytes = kIntZero || kFloatZero ? ((kScaleRows * BN * kZeroBytes + 15) / 16) * 16 : 0;
  static constexpr int kStageBytes = kABytes + kBBytes + kSBytes + kZBytes;
  static constexpr int kAcc = MT * 8 * 4;   // fp32 accumulators per lane
  static constexpr int kSteps = WarpK / 16; // mma K steps per warp per stage
  // Scale on the fp32 sums (see the top of the file) for warps of one mma tile.
  static constexpr bool kAccScale = MT == 1;
  // Operands keep the offset R, removed through the activations' row sums (not for integer zero
  // points, which differ per channel, nor for bytes as bf16, which are exact (code - zero) already).
  // R is magic + 2^(bits-1) for symmetric codes and the magic alone for float zero points.
  static constexpr bool kFold = kAccScale && !kIntZero && !(kBf16 && kBits == 8) && !kFloatCode;
  // Warps of one mma tile with float zero points need the row sums as well (z x row sums).
  static constexpr bool kRowSums = kFold || (kAccScale && kFloatZero);
  // P: the row sums come from one mma against a constant -P fragment (-P x each row's sum): R with
  // kFold, else 1. With float zero points P is a power of two (the magic or 1), so dividing the
  // result by -P is exact.
  static constexpr float kRowUnit =
      kFold ? numeric::Operand<kBf16>::kMagicValue + (kFloatZero ? 0 : 1 << (kBits - 1)) : 1.0f;
  // K steps per scale segment: a warp's slice of a stage never straddles two groups.
  static constexpr int kSegSteps = (GroupK == 0 || GroupK >= WarpK) ? kSteps : GroupK / 16;
  static constexpr int kSegs = kSteps / kSegSteps;
  static constexpr int kSmemBytes = Stages * kStageBytes;
  // After the stages: the fix-up's flag and the block's segment list (backend/sm80/pipeline.h).
  static constexpr int kSmemTotal = block_smem_total(kSmemBytes);
  // Blocks per SM the register budget is cut for: decode tiles are latency-bound with one block of
  // 8 warps, so they are sized for two (128 registers a thread; shared memory for two exists on
  // sm_90's 227 KiB, while sm_80 and sm_86 / sm_89 hold one).
  static constexpr int kMinBlocks = kAccScale && 2 * kSmemTotal <= 227 * 1024 ? 2 : 1;

  static_assert(ActId == dtypes::f16.id() || ActId == dtypes::bf16.id(), "activations are f16 or bf16");
  static_assert(ScaleId == ActId, "scales are in the operand type");
  static_assert(OutId == dtypes::f16.id() || OutId == dtypes::bf16.id() || OutId == dtypes::f32.id(),
                "outputs are f16, bf16 or f32");
  static_assert(kBits == 4 || kBits == 8, "4- or 8-bit codes");
  static_assert(!kFloatCode || (kCode.fn() && !kIntZero && !kFloatZero), "float codes are e4m3, without zero points");
  static_assert(!kFloatZero || !kSigned, "float zero points go with unsigned codes");
  static_assert(BM % (16 * WarpsM) == 0 && WarpK % 16 == 0, "tile shape");
  static_assert(BK % 64 == 0, "the activation swizzle needs rows of at least 8 x 16 bytes");
  static_assert(GroupK == 0 || GroupK % 16 == 0, "a K group covers whole mma K steps");
  static_assert(GroupK == 0 || GroupK >= BK || BK % (GroupK == 0 ? 1 : GroupK) == 0, "groups tile the stage");
  static_assert(kStageBytes % 16 == 0, "16-byte aligned stages");
  static_assert(GroupK == 0 || GroupK % WarpK == 0 || WarpK % (GroupK == 0 ? 1 : GroupK) == 0,
                "a warp slice lies in whole groups");

  struct Params {
    GemmArgs args;
    StreamKPlan plan;
    int64_t k_tiles;   // BK tiles along the padded K
    int inner_k_tiles; // leading K tiles that lie wholly inside k (StageCopies::inner)
    int64_t k_blocks;  // 16-input blocks along the padded K (layout stride)
    int64_t m_tiles;
  };

  // The cp.async copies of a stage (backend/sm80/stage_copy.h).
  using Copies = StageCopies<Dense>;
  using TileCopies = typename Copies::Tile;

  // How the stage math reads a stage back into fragments (backend/sm80/stage_fragments.h).
  using Frags = StageFragments<Dense>;

  // Narrow launches (m <= 8) of warps of one mma tile swap the mma's roles (backend/sm80/stage_mma.h:
  // the weights as the A operand, 16 channels, the activations as B, 8 tokens).
  static constexpr bool kHasNarrow = kAccScale;
  static constexpr int kNarrowRows = 8;
  static_assert(!kHasNarrow || kSegSteps % 2 == 0, "narrow activation loads cover two K steps");

  // The stage math (backend/sm80/stage_mma.h): sums scaled per group (warps of one mma tile),
  // operands scaled (warps of several), or the narrow launches'.
  using Mma = StageMma<Dense>;

  // Narrow: the narrow kernel (m <= 8, warps of one mma tile; see backend/sm80/stage_mma.h).
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

    using Op = numeric::Operand<kBf16>;
    // -P in both halves: the constant B fragment whose mma gives -P x each row's activation sum.
    const uint32_t neg_offset = Op::pair(-kRowUnit, -kRowUnit);
    const uint32_t smem_base = smem_addr(smem);

    // Each segment runs its own pipeline (filled, then drained into finish_segment): a block has
    // one segment in a plain launch and at most a few under stream-K.
    for (int si = 0; si < n_segs; ++si) {
      const int tile = segs[si].tile, kt_begin = segs[si].kt_begin, kt_end = segs[si].kt_end;
      const int64_t m0 = static_cast<int64_t>(tile / n_tiles) * BM, n0 = static_cast<int64_t>(tile % n_tiles) * BN;
      const TileCopies copies = Copies::tile(p, m0, n0);

      // Per-channel zero points (and the implied zero of symmetric codes) are fixed for the whole K.
      // Float ones: fixed_bias holds the operand pair (z, z) (StageMma::operand_scale), the fp32 paths
      // read them at the end.
      const int64_t lane_n = n0 + wn * 64 + lane / 4;
      uint32_t fixed_bias[8];
      float fixed_zero[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        float z = kFloatCode || kFloatZero ? 0.0f : static_cast<float>(1 << (kBits - 1));
        if constexpr (kIntZero && GroupK == 0)
          if (lane_n + j * 8 < a.dims.n_pad) z = static_cast<const uint8_t *>(a.zeros)[lane_n + j * 8];
        fixed_zero[j] = z;
        fixed_bias[j] = Frags::bias_for(z);
        if constexpr (kFloatZero && GroupK == 0 && !kAccScale) {
          const uint16_t zc =
              lane_n + j * 8 < a.dims.n_pad ? static_cast<const uint16_t *>(a.zeros)[lane_n + j * 8] : 0;
          fixed_bias[j] = static_cast<uint32_t>(zc) | (static_cast<uint32_t>(zc) << 16);
        }
      }
      float offset_sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      float accn[Narrow ? 4 : 1][4] = {};
      float acc[MT][8][4];
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

      // K tile kt into the stage buffer at `dst`: the short path inside K, the tested one at its end.
      const auto load = [&](uint32_t dst, int kt) {
        if (kt < p.inner_k_tiles)
          Copies::inner(p, copies, dst, kt, n0);
        else
          Copies::edge(p, copies, dst, kt, m0, n0);
      };
      char *stage = cp_async_ring<Stages, kStageBytes>(smem, smem_base, kt_begin, kt_end, load, [&](char *stage) {
        if constexpr (Narrow)
          Mma::narrow_stage(stage, wn, wk, lane, accn, offset_sums, fixed_bias, fixed_zero, neg_offset);
        else if constexpr (kAccScale)
          Mma::acc_scale(stage, wn, wk, lane, acc[0], offset_sums, fixed_bias, fixed_zero, neg_offset);
        else
          Mma::operand_scale(stage, wm, wn, wk, lane, acc, fixed_bias, fixed_zero);
      });
      if constexpr (Narrow) {
        // Per-channel scales with kept offsets: -R x row sums (the same for every channel) go in
        // here, so that finish_segment adds nothing more; float zero points add (z / P) x -P x
        // row sums, z of channel J * 16 + h * 8 + lane / 4.
        if constexpr (kRowSums && GroupK == 0)
#pragma unroll
          for (int J = 0; J < 4; ++J)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const float f = (kFold ? 1.0f : 0.0f) + channel_zero(a, n0 + wn * 64 + J * 16 + h * 8 + lane / 4);
              accn[J][2 * h] = fmaf(f, offset_sums[2 * h], accn[J][2 * h]);
              accn[J][2 * h + 1] = fmaf(f, offset_sums[2 * h + 1], accn[J][2 * h + 1]);
            }
        narrow_to_wide(accn, lane, acc[0]);
#pragma unroll
        for (int e = 0; e < 4; ++e) offset_sums[e] = 0.0f;
      }
      // Drained: no copy is in flight, so the sums may meet in the last stage's buffer.
      cp_async_wait<0>();
      finish_segment(p, smem, stage, segs[si], n_tiles, wm, wn, wk, lane, acc, offset_sums);
      __syncthreads(); // the next segment's copies may overwrite that buffer
    }
  }

  // The end of a segment: K-slice warps' sums added, per-channel and global scales applied, then
  // the output written or a partial contributed to the tile's fix-up (backend/sm80/warp_sums.h).
  // Called by all threads of the block.
  static __device__ __forceinline__ void finish_segment(const Params &p, char *smem, char *buf, const Segment &seg,
                                                        int n_tiles, int wm, int wn, int wk, int lane,
                                                        float (&acc)[MT][8][4], const float (&offset_sums)[4]) {
    const GemmArgs &a = p.args;
    using Op = numeric::Operand<kBf16>;
    const int tile = seg.tile;
    const int64_t m0 = static_cast<int64_t>(tile / n_tiles) * BM, n0 = static_cast<int64_t>(tile % n_tiles) * BN;
    // Per-channel scales with kept offsets: remove -R x row sums once for the segment (and with
    // float zero points z x row sums, as (z / P) x -P x row sums).
    if constexpr (kRowSums && GroupK == 0)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float f = (kFold ? 1.0f : 0.0f) + channel_zero(a, n0 + wn * 64 + j * 8 + (lane % 4) * 2 + e);
          acc[0][j][e] = fmaf(f, offset_sums[e], acc[0][j][e]);
          acc[0][j][e + 2] = fmaf(f, offset_sums[e + 2], acc[0][j][e + 2]);
        }

    // Add the K-slice warps' sums into the warps with wk == 0 (backend/sm80/kslice_reduce.h).
    if constexpr (WarpsK > 1) KSliceReduce<Dense>::run(buf, wm, wn, wk, lane, acc);

    // Per-channel scales and the global scale on the fp32 sums (exact, no operand rounding).
    if (wk == 0) {
      const float global = a.global_scale != nullptr ? *a.global_scale : 1.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t n = n0 + wn * 64 + j * 8 + (lane % 4) * 2 + e;
          float f = global;
          if constexpr (GroupK == 0)
            f *= n < a.dims.n_pad ? Op::to_float(static_cast<const uint16_t *>(a.scales)[n]) : 0.0f;
#pragma unroll
          for (int i = 0; i < MT; ++i) {
            acc[i][j][e] *= f;
            acc[i][j][e + 2] *= f;
          }
        }
      }
    }

    WarpSums<Dense>::store(a, p.plan, seg, tile, m0, n0, wm, wn, wk, lane, acc,
                           reinterpret_cast<int *>(smem + kSmemBytes));
  }

  // Per-channel float zero point of channel n divided by P (0 without float zero points, and past
  // n_pad), for the row-sum term at the end of a segment.
  static __device__ __forceinline__ float channel_zero(const GemmArgs &a, int64_t n) {
    if constexpr (kFloatZero)
      return n < a.dims.n_pad
                 ? numeric::Operand<kBf16>::to_float(static_cast<const uint16_t *>(a.zeros)[n]) * (1.0f / kRowUnit)
                 : 0.0f;
    return 0.0f;
  }

  static int64_t n_tiles(const GemmArgs &args) { return (args.dims.n_pad + BN - 1) / BN; }

  static Params make_params(const GemmArgs &args) {
    Params p;
    p.args = args;
    p.k_tiles = (args.dims.k_pad + BK - 1) / BK;
    p.inner_k_tiles = static_cast<int>(args.dims.k / BK);
    p.k_blocks = args.dims.k_pad / layout_sm80::kBlockK;
    p.m_tiles = (args.m + BM - 1) / BM;
    const int64_t tiles = p.m_tiles * n_tiles(args);
    const int64_t group_tiles = GroupK > BK ? GroupK / BK : 1;
    const int resident = resident_blocks<Dense>();
    p.plan = plan_stream_k(tiles, p.k_tiles, BK, group_tiles, args.num_sms, resident > 0 ? resident : 1, kAccScale);
    return p;
  }
};

#define HUMMING_SM80_TARGS                                                                                             \
  uint32_t ActId, uint32_t CodeId, uint32_t ScaleId, int Zero, uint32_t OutId, int GroupK, int BM, int WarpsM,         \
      int WarpsN, int WarpsK, int WarpK, int Stages
#define HUMMING_SM80_ARGS ActId, CodeId, ScaleId, Zero, OutId, GroupK, BM, WarpsM, WarpsN, WarpsK, WarpK, Stages

template <HUMMING_SM80_TARGS> Status can_implement(const GemmArgs &args) {
  using K = Dense<HUMMING_SM80_ARGS>;
  if (args.layout != kLayoutSm80)
    return Status::Error(std::string("the sm80 backend reads weights packed for layout 2 (sm80), not layout ") +
                         std::to_string(args.layout) + " (" + layout_name(args.layout) + ")");
  if (args.fmt.weight.group_k != GroupK || args.fmt.weight.group_n != 1)
    return Status::Error("this instance is compiled for " +
                         (GroupK == 0 ? std::string("per-channel scales") : "K groups of " + std::to_string(GroupK)));
  if (args.dims.k % 8 != 0)
    return Status::Error("the sm80 backend needs k to be a multiple of 8 (16-byte activation rows), got k=" +
                         std::to_string(args.dims.k));
  if (args.m > 1 && args.lda % 8 != 0)
    return Status::Error("the sm80 backend needs the activation row stride to be a multiple of 8 elements, got " +
                         std::to_string(args.lda));
  if (reinterpret_cast<uintptr_t>(args.a) % 16 != 0)
    return Status::Error("the sm80 backend needs 16-byte aligned activations");
  // Loads add 32-bit offsets inside a tile: BM activation rows, WarpsN weight columns.
  constexpr int64_t kLimit = int64_t(1) << 31;
  if (args.lda * 2 * BM >= kLimit || args.dims.k_pad * 8 * K::kBits * WarpsN >= kLimit ||
      args.dims.n_groups * 2 * (K::kScaleRows + 1) >= kLimit)
    return Status::Error("the sm80 backend needs each tile's activation rows, weight columns and scale rows to "
                         "span less than 2 GiB");
  const int64_t tiles = (args.m + BM - 1) / BM * K::n_tiles(args);
  if (tiles > 0x7FFFFFFF) return Status::Error("too many output tiles for one launch");
  // (Stream-K launches have fewer blocks than tiles and at most kStreamKCounters stream-K tiles.)
  return Status::Ok();
}

template <HUMMING_SM80_TARGS> size_t workspace_bytes(const GemmArgs &args) {
  return launch_workspace_bytes<Dense<HUMMING_SM80_ARGS>>(args);
}

template <HUMMING_SM80_TARGS> Status prepare() { return prepare_kernels<Dense<HUMMING_SM80_ARGS>>("sm80"); }

template <HUMMING_SM80_TARGS> Status launch(const GemmArgs &args, void *stream) {
  return launch_kernels<Dense<HUMMING_SM80_ARGS>>(args, stream, "sm80");
}

#undef HUMMING_SM80_TARGS
#undef HUMMING_SM80_ARGS

} // namespace sm80
} // namespace humming
