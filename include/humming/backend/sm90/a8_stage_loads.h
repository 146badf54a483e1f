// What the producer warpgroup of the sm90 8-bit activation kernel (kernel/sm90_a8_dense.cuh)
// copies into one ring stage: the weights' box and the activations' box through their tensor
// maps (boxes past the matrices land as zeros and count their full size on the stage's "full"
// mbarrier; the last row of tiles' activations, where BM does not divide m, in a box of only its
// rows, Params::act_tail, as backend/sm90/stage_loads.h says why), and, where the kernel has
// scales per 128 inputs, the stage's scales by cp.async from one warp (zeros past the matrices),
// then counted as one arrival per lane on the same barrier.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "humming/backend/sm90/ptx.h"
#include "humming/humming.h"

namespace humming {
namespace sm90 {

// Block-scaled tiles of 64 tokens and more take the activation scales transposed, [rows][m_pad]
// (A8StageLoads: m_pad is m rounded up to the tile's BM, rows the launch's K tiles, at least cols;
// zeros past m and past cols), so that a stage's BM scales are one contiguous run that the
// producer copies with one bulk copy. Measured on the H200 (session 24), the 128 scattered 4-byte cp.async per stage
// that read them from [m][cols] took 11-33 % of the GEMM (7168x16384 at m = 4096 with no scale
// copies at all: 993 -> 876 us in t128x192 s4).
// (A template, so that each translation unit that launches it may hold a copy.)
template <class T>
__global__ void transpose_act_scales_kernel(const T *src, int64_t m, int64_t cols, int64_t rows, int64_t m_pad,
                                            T *dst) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; // element of dst
  if (i >= rows * m_pad) return;
  const int64_t c = i / m_pad, r = i % m_pad;
  dst[i] = r < m && c < cols ? src[r * cols + c] : T(0);
}

inline Status transpose_act_scales(const float *src, int64_t m, int64_t cols, int64_t rows, int64_t m_pad, float *dst,
                                   void *stream) {
  const int64_t n = rows * m_pad;
  if (n == 0) return Status::Ok();
  transpose_act_scales_kernel<float>
      <<<static_cast<unsigned>((n + 255) / 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(src, m, cols, rows, m_pad,
                                                                                              dst);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess
             ? Status::Ok()
             : Status::Error(std::string("transposing the activation scales failed: ") + cudaGetErrorString(e));
}

// K: the kernel (sm90::DenseA8): its tile (kTileM tokens, BN channels, BK inputs), its codes
//    (kCode), its stage layout (kWBytes of weights, then kABytes of activations, then the scales)
//    and its scales (kBlocks: BM activation scales and the kWeightBlocks 128 x 128 weight blocks'
//    fp32 scales; otherwise a row of BN channel scales of kScaleBytes each per 128 inputs; kScalesT
//    and kScaleLead, below), and its Params (tensor maps `weight`, `act` and, where `tail_rows`,
//    `act_tail`; `args`; in grouped kernels, K::Grouped, `expert_rows`: the rows of each expert's
//    weight in `weight`).
template <class K> struct A8StageLoads {
  using Params = typename K::Params;
  static constexpr int BM = K::kTileM, BN = K::BN, BK = K::BK;
  static constexpr int kWBytes = K::kWBytes, kABytes = K::kABytes, kScaleBytes = K::kScaleBytes;
  static constexpr int kWeightBlocks = K::kWeightBlocks;
  static constexpr bool kBlocks = K::kBlocks;
  static constexpr int kCodeBits = static_cast<int>(K::kCode.bits);
  // With blocks, in tiles of 64 tokens and more (K::kScalesT): a stage's BM activation scales come
  // by one bulk copy from the transposed scales (Params scales_t, m_pad; prepare_scales) with the
  // boxes. Smaller tiles keep the scale warp's copies: there the transposition's launch would cost
  // more than the copies it saves. Grouped tiles start at any row: their run starts at the 16-byte
  // boundary at or before it and is K::kScaleLead scales longer (K::kActScaleSlots in all).
  static constexpr bool kScalesT = K::kScalesT;
  static constexpr int kScaleLead = K::kScaleLead, kActScaleSlots = K::kActScaleSlots;
  // The bytes the producer's copies bring into a stage (the transactions of its full barrier),
  // with an activation box of `rows` rows (box_rows, backend/sm90/pipeline.h; kABytes is BM rows
  // of 128 bytes).
  static __device__ __forceinline__ uint32_t tx_bytes(int rows) {
    return kWBytes + rows * 128 + (kScalesT ? kActScaleSlots * 4 : 0);
  }

  // The boxes of K tile kt of the tile at (m0, n0) into the stage at shared address `stage`
  // (with kScalesT, and its activation scales after them), from the weight of `expert` (0 but in
  // grouped GEMMs); `rows`: box_rows.
  static __device__ __forceinline__ void boxes(const Params &p, uint32_t stage, uint32_t full, int64_t kt, int m0,
                                               int n0, int rows, int expert) {
    weight_box(p, stage, full, kt, n0, expert);
    act_boxes(p, stage, full, kt, m0, rows);
  }
  // What boxes() copies from the weight alone: it may go before the wait for the launch before
  // (GemmArgs::early_weights).
  static __device__ __forceinline__ void weight_box(const Params &p, uint32_t stage, uint32_t full, int64_t kt, int n0,
                                                    int expert) {
    const int w0 = K::Grouped ? expert * p.expert_rows + n0 : n0;
    if constexpr (K::kLayout == kLayoutSm90A8)
      tensor_copy_2d(stage, &p.weight, 0, w0 + static_cast<int>(kt) * p.chunk_rows, full);
    else
      tensor_copy_2d(stage, &p.weight, static_cast<int>(kt * BK * kCodeBits / 8), w0, full);
  }
  // The rest of boxes(): the activations' box (and their transposed scales).
  static __device__ __forceinline__ void act_boxes(const Params &p, uint32_t stage, uint32_t full, int64_t kt, int m0,
                                                   int rows) {
    tensor_copy_2d(stage + kWBytes, rows == BM ? &p.act : &p.act_tail, static_cast<int>(kt * BK), m0, full);
    if constexpr (kScalesT)
      bulk_copy(stage + kWBytes + kABytes, p.scales_t + kt * p.m_pad + (kScaleLead != 0 ? m0 / 4 * 4 : m0),
                kActScaleSlots * 4, full);
  }

  // Host, with kScalesT: the transposed scales' rows (m rounded up to BM, so that every tile's
  // run of BM is inside its row; grouped: every run from a row below m, to a multiple of 4) and
  // their count (every K tile of the launch, at least the scales' columns: the padded K tiles
  // read zeros).
  static int64_t m_pad(const GemmArgs &args) {
    return kScaleLead != 0 ? (args.m + kActScaleSlots + 3) / 4 * 4 : (args.m + BM - 1) / BM * BM;
  }
  static int64_t k_tiles(const GemmArgs &args) {
    const int64_t tiles = (args.dims.k_pad + BK - 1) / BK;
    return tiles > args.a_scale_cols ? tiles : args.a_scale_cols;
  }
  // Their offset in the workspace: after the `scratch` bytes of stream-K and never inside the
  // first kWorkspaceZeroBytes, which must stay zero between launches.
  static size_t scales_offset(size_t scratch) {
    const size_t at = (scratch + 255) / 256 * 256;
    return at > kWorkspaceZeroBytes ? at : kWorkspaceZeroBytes;
  }
  // The workspace a launch needs, given the stream-K scratch it needs.
  static size_t workspace_bytes(const GemmArgs &args, size_t scratch) {
    if constexpr (!kScalesT) return scratch;
    return scales_offset(scratch) + static_cast<size_t>(k_tiles(args) * m_pad(args)) * 4;
  }
  // Host, before the launch on `stream`: with kScalesT, writes the transposed scales into the
  // workspace and points p at them (else sets p's fields to none).
  static Status prepare_scales(Params &p, const GemmArgs &args, size_t scratch, void *stream) {
    p.scales_t = nullptr;
    p.m_pad = 0;
    if constexpr (kScalesT) {
      const size_t need = workspace_bytes(args, scratch);
      if (args.workspace == nullptr || args.workspace_bytes < need)
        return Status::Error("the block-scaled sm90 kernels need " + std::to_string(need) +
                             " bytes of workspace (with the activation scales transposed), got " +
                             std::to_string(args.workspace_bytes));
      p.m_pad = m_pad(args);
      float *t = reinterpret_cast<float *>(static_cast<char *>(args.workspace) + scales_offset(scratch));
      const Status st =
          transpose_act_scales(args.a_scales, args.m, args.a_scale_cols, k_tiles(args), p.m_pad, t, stream);
      if (!st) return st;
      p.scales_t = t;
    }
    return Status::Ok();
  }

  // Lane `lane`'s cp.async copies of the scales of K tile kt of the tile at (m0, n0) to shared
  // address `dst` (the stage's scales), the weight's of `expert` (0 but in grouped GEMMs). With
  // blocks: the weight blocks' scales, and the tokens' unless the producer copies them from the
  // transposed scales (kScalesT).
  static __device__ __forceinline__ void scales(const GemmArgs &a, uint32_t dst, int64_t kt, int64_t m0, int64_t n0,
                                                int expert, int lane) {
    const char *expert_scales = static_cast<const char *>(a.scales) + expert * a.expert_scales_stride;
    if constexpr (kBlocks) {
      const int64_t nb0 = n0 / 128;
      const auto *ws = reinterpret_cast<const float *>(expert_scales);
      for (int i = lane; i < BM && !kScalesT; i += 32) {
        const bool in = m0 + i < a.m && kt < a.a_scale_cols;
        cp_async4(dst + 4 * i, in ? a.a_scales + (m0 + i) * a.a_scale_cols + kt : a.a_scales, in);
      }
      if (lane < kWeightBlocks) {
        const bool in = nb0 + lane < a.dims.n_groups && kt < a.dims.k_groups;
        cp_async4(dst + 4 * (kActScaleSlots + lane), in ? ws + kt * a.dims.n_groups + nb0 + lane : ws, in);
      }
    } else {
      // The row of group kt, channels n0 .. n0 + BN, as words (n_groups is even, so the two
      // 16-bit scales of a word are both inside or both past it).
      const char *row = expert_scales + (kt * a.dims.n_groups + n0) * kScaleBytes;
      for (int i = lane; i < BN * kScaleBytes / 4; i += 32) {
        const bool in = n0 + i * 4 / kScaleBytes < a.dims.n_groups && kt < a.dims.k_groups;
        cp_async4(dst + 4 * i, in ? row + 4 * i : a.scales, in);
      }
    }
  }
};

} // namespace sm90
} // namespace humming
