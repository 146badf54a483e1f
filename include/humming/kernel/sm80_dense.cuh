// The sm80 backend with the dense split-K scheduler: weight-only GEMM (f16 / bf16 activations,
// 4- or 8-bit integer weights) on mma.sync m16n8k16. Runs on sm_80, sm_86, sm_89 and sm_90.
//
// Block tile BM x BN x BK, BN = 64 * WarpsN, BK = WarpK * WarpsK. Warps form a WarpsM x WarpsN x
// WarpsK grid: each computes (BM / WarpsM) rows x 64 channels over its WarpK slice of every stage,
// and the WarpsK partial sums are added through shared memory at the end (small M gets its
// parallelism from K). Stages are filled with cp.async (activations into a swizzled tile read with
// ldmatrix; weights as layout-sm80 blocks, one 16- or 32-byte load per lane per 16 x 64 block).
// Codes become operands in registers (numeric/fast_dequant.h): (code - zero) exactly, times the
// group scale in the operand type; per-channel scales and the global scale are applied to the fp32
// accumulators instead, which is exact.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <string>

#include "humming/backend/sm80/ptx.h"
#include "humming/humming.h"
#include "humming/layout/sm80.h"
#include "humming/numeric/fast_dequant.h"
#include "humming/scheduler/splitk.h"

namespace humming {
namespace sm80 {

// ActId:   DType id of the activations and of the mma operands (f16 or bf16).
// CodeId:  DType id of the weight codes: u4, i4, u8 or i8.
// ScaleId: DType id of the weight scales; must equal ActId (scales multiply operands in that type).
// Zero:    ZeroKind: none (unsigned codes are symmetric around 2^(bits-1)) or int.
// OutId:   DType id of the output (f16, bf16 or f32).
// GroupK:  inputs per scale (32, 64, 128, ...), or 0 for one scale per output channel.
// BM:      rows of the block tile (a multiple of 16 * WarpsM).
// WarpsM, WarpsN, WarpsK: the warp grid (rows, 64-channel columns, K slices).
// WarpK:   inputs per warp per stage (a multiple of 16).
// Stages:  depth of the cp.async pipeline.
template <uint32_t ActId, uint32_t CodeId, uint32_t ScaleId, int Zero, uint32_t OutId, int GroupK, int BM, int WarpsM,
          int WarpsN, int WarpsK, int WarpK, int Stages>
struct Dense {
  static constexpr bool kBf16 = ActId == dtypes::bf16.id();
  static constexpr DType kCode = DType::from_id(CodeId);
  static constexpr DType kOut = DType::from_id(OutId);
  static constexpr int kBits = static_cast<int>(kCode.bits);
  static constexpr bool kSigned = kCode.kind == kInt;
  static constexpr bool kIntZero = Zero == static_cast<int>(ZeroKind::kInt);
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
  static constexpr int kZBytes = kIntZero ? ((kScaleRows * BN + 15) / 16) * 16 : 0;
  static constexpr int kStageBytes = kABytes + kBBytes + kSBytes + kZBytes;
  static constexpr int kAcc = MT * 8 * 4; // fp32 accumulators per lane
  static constexpr int kReduceBytes = (WarpsK - 1) * WarpsM * WarpsN * 32 * kAcc * 4;
  static constexpr int kSmemBytes = Stages * kStageBytes > kReduceBytes ? Stages * kStageBytes : kReduceBytes;
  // The last block of a split tile learns it is last through this word.
  static constexpr int kSmemTotal = kSmemBytes + 16;

  static_assert(ActId == dtypes::f16.id() || ActId == dtypes::bf16.id(), "activations are f16 or bf16");
  static_assert(ScaleId == ActId, "scales are in the operand type");
  static_assert(kBits == 4 || kBits == 8, "4- or 8-bit codes");
  static_assert(BM % (16 * WarpsM) == 0 && WarpK % 16 == 0, "tile shape");
  static_assert(BK % 64 == 0, "the activation swizzle needs rows of at least 8 x 16 bytes");
  static_assert(GroupK == 0 || GroupK % 16 == 0, "a K group covers whole mma K steps");
  static_assert(GroupK == 0 || GroupK >= BK || BK % (GroupK == 0 ? 1 : GroupK) == 0, "groups tile the stage");
  static_assert(kStageBytes % 16 == 0, "16-byte aligned stages");

  struct Params {
    GemmArgs args;
    SplitPlan plan;
    int64_t k_tiles;   // BK tiles along the padded K
    int64_t k_blocks;  // 16-input blocks along the padded K (layout stride)
    int64_t m_tiles;
  };

  // Bias pair subtracting (magic + zero) from a register pair of codes.
  static __device__ __forceinline__ uint32_t bias_for(float z) { return numeric::zero_bias<kBf16>(z); }

  // Signed codes read as offset binary: flipping the sign bit of each code adds 2^(bits-1).
  static __device__ __forceinline__ uint32_t to_offset_binary(uint32_t w) {
    if constexpr (kSigned) return w ^ (kBits == 4 ? 0x88888888u : 0x80808080u);
    return w;
  }

  static __device__ __forceinline__ void load_stage(const Params &p, char *stage, int64_t kt, int64_t m0, int64_t n0) {
    const GemmArgs &a = p.args;
    const int tid = threadIdx.x;
    const int64_t k0 = kt * BK;
    // Activations: BM rows x BK inputs in 16-byte chunks, chunk c of row r stored at c ^ (r % 8).
    constexpr int kRowChunks = BK / 8;
    const auto *act = static_cast<const char *>(a.a);
    char *sa = stage;
#pragma unroll
    for (int i = tid; i < BM * kRowChunks; i += kThreads) {
      const int r = i / kRowChunks, c = i % kRowChunks;
      const int64_t m = m0 + r, k = k0 + c * 8;
      const bool ok = m < a.m && k < a.dims.k;
      const char *src = ok ? act + (m * a.lda + k) * 2 : act;
      cp_async16(sa + r * BK * 2 + ((c ^ (r & 7)) * 16), src, ok);
    }
    // Weights: for each 64-channel column, BK / 16 consecutive blocks.
    constexpr int kColChunks = (BK / 16) * kWordsPerBlock / 4;
    const auto *codes = reinterpret_cast<const char *>(a.codes);
    char *sb = stage + kABytes;
    const int64_t kb0 = k0 / 16;
#pragma unroll
    for (int i = tid; i < WarpsN * kColChunks; i += kThreads) {
      const int nb = i / kColChunks, c = i % kColChunks;
      const int64_t block_k = kb0 + (c * 4) / kWordsPerBlock;
      // The last column of blocks may pass the padded N when BN is wider than the layout's 64.
      const bool ok = block_k < p.k_blocks && n0 + nb * 64 < a.dims.n_pad;
      const int64_t word = ((n0 / 64 + nb) * p.k_blocks + kb0) * kWordsPerBlock + c * 4;
      cp_async16(sb + (nb * kColChunks + c) * 16, ok ? codes + word * 4 : codes, ok);
    }
    if constexpr (GroupK != 0) {
      // Scale rows (and zero-point rows) of the groups this stage touches.
      const int64_t g0 = k0 / GroupK;
      const auto *scales = static_cast<const char *>(a.scales);
      char *ss = stage + kABytes + kBBytes;
      constexpr int kScaleChunks = BN * 2 / 16;
      for (int i = tid; i < kScaleRows * kScaleChunks; i += kThreads) {
        const int r = i / kScaleChunks, c = i % kScaleChunks;
        const bool ok = g0 + r < a.dims.k_groups && n0 + c * 8 < a.dims.n_pad;
        const int64_t elem = (g0 + r) * a.dims.n_groups + n0 + c * 8;
        cp_async16(ss + (r * kScaleChunks + c) * 16, ok ? scales + elem * 2 : scales, ok);
      }
      if constexpr (kIntZero) {
        const auto *zeros = static_cast<const char *>(a.zeros);
        char *sz = ss + kSBytes;
        constexpr int kZeroChunks = BN / 16;
        for (int i = tid; i < kScaleRows * kZeroChunks; i += kThreads) {
          const int r = i / kZeroChunks, c = i % kZeroChunks;
          const bool ok = g0 + r < a.dims.k_groups && n0 + c * 16 < a.dims.n_pad;
          const int64_t elem = (g0 + r) * a.dims.n_groups + n0 + c * 16;
          cp_async16(sz + (r * kZeroChunks + c) * 16, ok ? zeros + elem : zeros, ok);
        }
      }
    }
  }

  static __device__ void run(const Params &p, char *smem) {
    const GemmArgs &a = p.args;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int wk = warp / (WarpsM * WarpsN);
    const int wn = (warp / WarpsM) % WarpsN;
    const int wm = warp % WarpsM;
    const int64_t n_tiles = (a.dims.n_pad + BN - 1) / BN;
    const int64_t tile = blockIdx.x;
    const int64_t m0 = (tile / n_tiles) * BM, n0 = (tile % n_tiles) * BN;
    const int split = blockIdx.y;
    int64_t kt_begin, kt_end;
    split_range(p.plan, p.k_tiles, split, &kt_begin, &kt_end);

    using Op = numeric::Operand<kBf16>;
    // Channels of this lane's B fragments: n0 + wn * 64 + j * 8 + lane / 4, j = 0..7.
    const int64_t lane_n = n0 + wn * 64 + lane / 4;
    // Per-channel zero points (and the implied zero of symmetric codes) are fixed for the whole K.
    uint32_t fixed_bias[8];
    float fixed_zero[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float z = static_cast<float>(1 << (kBits - 1));
      if constexpr (kIntZero && GroupK == 0)
        if (lane_n + j * 8 < a.dims.n_pad) z = static_cast<const uint8_t *>(a.zeros)[lane_n + j * 8];
      fixed_zero[j] = z;
      fixed_bias[j] = bias_for(z);
    }

    float acc[MT][8][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    // Prologue: fill Stages - 1 stages.
#pragma unroll
    for (int s = 0; s < Stages - 1; ++s) {
      if (kt_begin + s < kt_end) load_stage(p, smem + s * kStageBytes, kt_begin + s, m0, n0);
      cp_async_commit();
    }

    for (int64_t kt = kt_begin; kt < kt_end; ++kt) {
      cp_async_wait<Stages - 2>();
      __syncthreads();
      {
        const int64_t next = kt + Stages - 1;
        if (next < kt_end) load_stage(p, smem + ((next - kt_begin) % Stages) * kStageBytes, next, m0, n0);
        cp_async_commit();
      }
      const char *stage = smem + ((kt - kt_begin) % Stages) * kStageBytes;
      const char *sa = stage;
      const char *sb = stage + kABytes;
#pragma unroll
      for (int ks = 0; ks < WarpK / 16; ++ks) {
        const int kk = wk * WarpK + ks * 16; // input offset inside the stage
        // A fragments: ldmatrix.x4 per 16-row tile.
        uint32_t af[MT][4];
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          const int row = wm * WM + i * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
          const int chunk = kk / 8 + lane / 16;
          ldmatrix_x4(af[i], sa + row * BK * 2 + ((chunk ^ (row & 7)) * 16));
        }
        // B: this lane's words of block (kk / 16, wn).
        uint32_t words[kWordsPerLane];
        const char *blk = sb + ((wn * (BK / 16) + kk / 16) * kWordsPerBlock + lane * kWordsPerLane) * 4;
        if constexpr (kWordsPerLane == 4) {
          const uint4 v = *reinterpret_cast<const uint4 *>(blk);
          words[0] = v.x, words[1] = v.y, words[2] = v.z, words[3] = v.w;
        } else {
          const uint4 v0 = *reinterpret_cast<const uint4 *>(blk);
          const uint4 v1 = *reinterpret_cast<const uint4 *>(blk + 16);
          words[0] = v0.x, words[1] = v0.y, words[2] = v0.z, words[3] = v0.w;
          words[4] = v1.x, words[5] = v1.y, words[6] = v1.z, words[7] = v1.w;
        }
        // Group scale (and zero) of this K step for the lane's 8 channels.
        uint32_t scale_pair[8];
        uint32_t bias[8];
        float zero[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          bias[j] = fixed_bias[j];
          zero[j] = fixed_zero[j];
        }
        if constexpr (GroupK != 0) {
          const int row = GroupK >= BK ? 0 : kk / GroupK;
          const auto *srow = reinterpret_cast<const uint16_t *>(stage + kABytes + kBBytes) + row * BN;
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const uint16_t s = srow[wn * 64 + j * 8 + lane / 4];
            scale_pair[j] = static_cast<uint32_t>(s) | (static_cast<uint32_t>(s) << 16);
          }
          if constexpr (kIntZero) {
            const auto *zrow = reinterpret_cast<const uint8_t *>(stage + kABytes + kBBytes + kSBytes) + row * BN;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              zero[j] = static_cast<float>(zrow[wn * 64 + j * 8 + lane / 4]);
              bias[j] = bias_for(zero[j]);
            }
          }
        }
        uint32_t bf[8][2];
#pragma unroll
        for (int pr = 0; pr < 16; ++pr) {
          const int j = pr / 2, r = pr % 2;
          const uint32_t w = to_offset_binary(words[pr / kPairsPerWord]);
          uint32_t v;
          if constexpr (kBits == 4) {
            switch (pr % kPairsPerWord) {
            case 0: v = numeric::u4_pair<kBf16, 0>(w, bias[j]); break;
            case 1: v = numeric::u4_pair<kBf16, 1>(w, bias[j]); break;
            case 2: v = numeric::u4_pair<kBf16, 2>(w, bias[j]); break;
            default: v = numeric::u4_pair<kBf16, 3>(w, bias[j]); break;
            }
          } else {
            if (pr % kPairsPerWord == 0)
              v = numeric::u8_pair<kBf16, 0>(w, bias[j], zero[j]);
            else
              v = numeric::u8_pair<kBf16, 1>(w, bias[j], zero[j]);
          }
          if constexpr (GroupK != 0) v = Op::mul(v, scale_pair[j]);
          bf[j][r] = v;
        }
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int j = 0; j < 8; ++j) mma_16816<kBf16>(acc[i][j], af[i], bf[j][0], bf[j][1]);
      }
    }
    cp_async_wait<0>();
    __syncthreads();

    // Add the K-slice warps' sums into the warps with wk == 0.
    if constexpr (WarpsK > 1) {
      float *red = reinterpret_cast<float *>(smem);
      const int mn = wm + WarpsM * wn;
      if (wk > 0) {
        float *dst = red + ((wk - 1) * WarpsM * WarpsN + mn) * 32 * kAcc;
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) dst[((i * 8 + j) * 4 + e) * 32 + lane] = acc[i][j][e];
      }
      __syncthreads();
      if (wk == 0) {
        for (int s = 1; s < WarpsK; ++s) {
          const float *src = red + ((s - 1) * WarpsM * WarpsN + mn) * 32 * kAcc;
#pragma unroll
          for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
              for (int e = 0; e < 4; ++e) acc[i][j][e] += src[((i * 8 + j) * 4 + e) * 32 + lane];
        }
      }
    }

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

    const int splits = p.plan.splits;
    if (splits > 1) {
      // Partial tile to the workspace; the last block of the tile adds all partials in order.
      float *partials = static_cast<float *>(a.workspace);
      const size_t slice = static_cast<size_t>(a.m) * static_cast<size_t>(a.dims.n_pad);
      int *counters = reinterpret_cast<int *>(partials + static_cast<size_t>(splits) * slice);
      if (wk == 0) {
        for_each_output(m0, n0, wm, wn, lane, [&](int i, int j, int e, int64_t m, int64_t n) {
          if (m < a.m && n < a.dims.n_pad) __stcg(partials + split * slice + m * a.dims.n_pad + n, acc[i][j][e]);
        });
      }
      __threadfence();
      __syncthreads();
      int *flag = reinterpret_cast<int *>(smem + kSmemBytes);
      if (threadIdx.x == 0) *flag = atomicAdd(counters + tile, 1) == splits - 1;
      __syncthreads();
      if (!*flag) return;
      __threadfence();
      if (wk == 0) {
        for_each_output(m0, n0, wm, wn, lane, [&](int i, int j, int e, int64_t m, int64_t n) {
          float s = 0.0f;
          if (m < a.m && n < a.dims.n_pad)
            for (int q = 0; q < splits; ++q) s += __ldcg(partials + q * slice + m * a.dims.n_pad + n);
          acc[i][j][e] = s;
        });
      }
      if (threadIdx.x == 0) counters[tile] = 0; // ready for the next launch
    }
    if (wk == 0) {
      for_each_output(m0, n0, wm, wn, lane, [&](int i, int j, int e, int64_t m, int64_t n) {
        if (m >= a.m || n >= a.dims.n) return;
        float v = acc[i][j][e];
        if (a.bias != nullptr) v += load_element(kOut, a.bias, n);
        store_element(kOut, a.out, m * a.ldo + n, v);
      });
    }
  }

  // Calls f(i, j, e, m, n) for each accumulator of this lane with its output coordinates.
  template <class F>
  static __device__ __forceinline__ void for_each_output(int64_t m0, int64_t n0, int wm, int wn, int lane, F f) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          f(i, j, e, m0 + wm * WM + i * 16 + lane / 4 + (e / 2) * 8, n0 + wn * 64 + j * 8 + (lane % 4) * 2 + (e % 2));
  }

  static int64_t n_tiles(const GemmArgs &args) { return (args.dims.n_pad + BN - 1) / BN; }

  static Params make_params(const GemmArgs &args) {
    Params p;
    p.args = args;
    p.k_tiles = (args.dims.k_pad + BK - 1) / BK;
    p.k_blocks = args.dims.k_pad / layout_sm80::kBlockK;
    p.m_tiles = (args.m + BM - 1) / BM;
    const int64_t tiles = p.m_tiles * n_tiles(args);
    const int64_t group_tiles = GroupK > BK ? GroupK / BK : 1;
    p.plan = plan_splits(tiles, p.k_tiles, group_tiles, args.num_sms, 1);
    return p;
  }
};

template <class K> __global__ void __launch_bounds__(K::kThreads) dense_kernel(const __grid_constant__ typename K::Params p) {
  extern __shared__ __align__(16) char smem[];
  K::run(p, smem);
}

#define HUMMING_SM80_TARGS uint32_t ActId, uint32_t CodeId, uint32_t ScaleId, int Zero, uint32_t OutId, int GroupK, \
                           int BM, int WarpsM, int WarpsN, int WarpsK, int WarpK, int Stages
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
  const int64_t tiles = (args.m + BM - 1) / BM * K::n_tiles(args);
  if (tiles > 0x7FFFFFFF) return Status::Error("too many output tiles for one launch");
  return Status::Ok();
}

template <HUMMING_SM80_TARGS> size_t workspace_bytes(const GemmArgs &args) {
  using K = Dense<HUMMING_SM80_ARGS>;
  const auto p = K::make_params(args);
  return splitk_workspace_bytes(p.plan, args.m, args.dims.n_pad, p.m_tiles * K::n_tiles(args));
}

template <HUMMING_SM80_TARGS> Status launch(const GemmArgs &args, void *stream) {
  using K = Dense<HUMMING_SM80_ARGS>;
  if (args.m == 0) return Status::Ok();
  const auto p = K::make_params(args);
  const size_t need = splitk_workspace_bytes(p.plan, args.m, args.dims.n_pad, p.m_tiles * K::n_tiles(args));
  if (need > args.workspace_bytes || (need > 0 && args.workspace == nullptr))
    return Status::Error("the sm80 backend needs " + std::to_string(need) + " bytes of zeroed workspace, got " +
                         std::to_string(args.workspace_bytes));
  static std::atomic<bool> configured{false};
  if (!configured.load(std::memory_order_acquire)) {
    const cudaError_t e =
        cudaFuncSetAttribute(dense_kernel<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, K::kSmemTotal);
    if (e != cudaSuccess)
      return Status::Error(std::string("the sm80 kernel needs ") + std::to_string(K::kSmemTotal) +
                           " bytes of shared memory: " + cudaGetErrorString(e));
    configured.store(true, std::memory_order_release);
  }
  const dim3 grid(static_cast<unsigned>(p.m_tiles * K::n_tiles(args)), static_cast<unsigned>(p.plan.splits));
  dense_kernel<K><<<grid, K::kThreads, K::kSmemTotal, static_cast<cudaStream_t>(stream)>>>(p);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return Status::Error(std::string("sm80 kernel failed to launch: ") + cudaGetErrorString(e));
  return Status::Ok();
}

#undef HUMMING_SM80_TARGS
#undef HUMMING_SM80_ARGS

} // namespace sm80
} // namespace humming
