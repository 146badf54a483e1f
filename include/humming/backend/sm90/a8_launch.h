// Host side of the sm90 8-bit activation kernel (kernel/sm90_a8_dense.cuh), for any of its
// instances K (sm90::DenseA8, with its Params): which calls an instance takes (a8_can_implement, with
// a sentence that names what it accepts), the workspace a launch needs, and the launch itself: the
// tensor maps of the weight, the activations and the output boxes, the transposed activation scales
// where the tile takes them, then the blocks (backend/sm90/pipeline.h, launch_blocks).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "humming/backend/sm90/pipeline.h"
#include "humming/backend/sm90/tensor_map.h"
#include "humming/epilogue/staged_store.h"
#include "humming/humming.h"
#include "humming/layout/sm90_a8.h"

namespace humming {
namespace sm90 {

// Rows of the weight's tensor map per channel: layout 4 keeps each K tile's 64-byte chunks of every
// channel together (layout/sm90_a8.h), so its map has a row per chunk and a stage's box is BN x 64
// contiguous bytes; the generic layout has one row of k_pad / 2 bytes per channel.
template <class K> int64_t weight_map_chunks(const GemmArgs &args) {
  return K::kLayout == kLayoutSm90A8 ? layout_sm90_a8::chunks_per_channel(args.dims.k_pad) : 1;
}

// Ok where instance K computes `args`, else the reason, naming what K takes.
template <class K> Status a8_can_implement(const GemmArgs &args) {
  constexpr int Layout = K::kLayout, GroupK = K::kGroupK, GroupN = K::kGroupN;
  const GemmFormat &f = args.fmt;
  if (args.layout != Layout)
    return Status::Error(std::string("this sm90 8-bit activation instance reads weights packed for layout ") +
                         std::to_string(Layout) + " (" + layout_name(Layout) + "), not layout " +
                         std::to_string(args.layout) + " (" + layout_name(args.layout) + ")");
  if (K::kBlocks) {
    if (f.act.granularity != ActScale::kGroup || f.act.group_k != GroupK)
      return Status::Error("this sm90 W8A8 instance takes activation scales per token and " + std::to_string(GroupK) +
                           " inputs (-g" + std::to_string(GroupK) + ")");
    if (f.weight.group_k != GroupK || f.weight.group_n != GroupN)
      return Status::Error("this sm90 W8A8 instance takes weight scales per block of " + std::to_string(GroupK) +
                           " x " + std::to_string(GroupN) + " (g" + std::to_string(GroupK) + "n" +
                           std::to_string(GroupN) + ")");
  } else {
    if (f.act.granularity != ActScale::kToken)
      return Status::Error("this sm90 8-bit activation instance takes one activation scale per token (-pt)");
    if (f.weight.group_k != GroupK || f.weight.group_n != 1)
      return Status::Error(GroupK == 0 ? std::string("this sm90 8-bit activation instance takes one weight scale per "
                                                     "output channel (gc)")
                                       : "this sm90 8-bit activation instance takes one weight scale per channel and " +
                                             std::to_string(GroupK) + " inputs (g" + std::to_string(GroupK) + ")");
  }
  if (args.glu >= 0)
    return Status::Error("the sm90 8-bit activation kernels have no gated activation epilogue (GemmArgs::glu): run "
                         "the plain GEMM, then the activation");
  const Status rows = check_activation_rows(args, 1, "the sm90 8-bit activation kernels");
  if (!rows) return rows;
  if (reinterpret_cast<uintptr_t>(args.codes) % 16 != 0)
    return Status::Error("the sm90 8-bit activation kernels need 16-byte aligned codes");
  const int bits = static_cast<int>(K::kCode.bits);
  if (args.dims.words_per_row * 32 != args.dims.k_pad * bits || args.dims.k_pad % 32 != 0)
    return Status::Error(
        "the sm90 8-bit activation kernels need the codes as rows of k_pad " + std::string(bits == 4 ? "/ 2 " : "") +
        "bytes, k_pad a multiple of 32 (the generic layout of " + std::to_string(bits) + "-bit codes)");
  if (K::kInt && args.dims.k_pad > 131072)
    return Status::Error("the sm90 integer kernels sum at most 131072 inputs (127 x 127 x 131072 < 2^31 keeps the s32 "
                         "sums exact), got k=" +
                         std::to_string(args.dims.k));
  if (args.m > 0x7FFFFFFF - 256 || args.dims.k_pad > 0x7FFFFFFF - 128 || args.dims.n_pad > 0x7FFFFFFF - 256)
    return Status::Error("the sm90 8-bit activation kernels take at most 2^31 - 257 rows, inputs and channels");
  if constexpr (K::Grouped) {
    // One tensor map reads every expert's weight: the experts' codes must lie back to back
    // (set_stacked_experts).
    const int64_t row_bytes = args.dims.k_pad * bits / 8;
    if (args.expert_codes_stride != args.dims.n_pad * row_bytes)
      return Status::Error("the grouped sm90 8-bit activation kernels need the experts' codes stacked back to back (" +
                           std::to_string(args.dims.n_pad * row_bytes) + " bytes per expert), got a stride of " +
                           std::to_string(args.expert_codes_stride) + " bytes");
    if (static_cast<int64_t>(args.experts) * args.dims.n_pad > 0x7FFFFFFF)
      return Status::Error("the grouped sm90 8-bit activation kernels take at most 2^31 - 1 weight rows in all "
                           "(experts x n_pad), got " +
                           std::to_string(static_cast<int64_t>(args.experts) * args.dims.n_pad));
  }
  if constexpr (Layout == kLayoutSm90A8) {
    const int64_t map_rows =
        args.dims.n_pad * (K::Grouped ? static_cast<int64_t>(args.experts) : 1) * weight_map_chunks<K>(args);
    if (map_rows > 0x7FFFFFFF)
      return Status::Error("the sm90 8-bit activation kernels read at most 2^31 - 1 rows of 64 bytes of 4-bit codes "
                           "in layout 4 (experts x n_pad x k_pad / 128), got " +
                           std::to_string(map_rows));
  }
  return Status::Ok();
}

// Bytes of workspace a launch of K needs: stream-K's scratch, and the transposed activation scales
// where K's stage takes them (A8StageLoads).
template <class K> size_t a8_workspace_bytes(const GemmArgs &args) {
  return K::Loads::workspace_bytes(args, workspace_of<K>(args));
}

// Launches K on `stream` for `args` (a8_can_implement's Ok, the workspace of a8_workspace_bytes).
template <class K> Status a8_launch(const GemmArgs &args, void *stream) {
  constexpr int BM = K::kTileM;
  if (args.m == 0) return Status::Ok();
  typename K::Params p = base_params<K>(args);
  Status st = prepare_activation_rows<BM, K::Grouped>(&p, args, MapElem::kByte);
  if (!st) return st;
  const int64_t row_bytes = args.dims.k_pad * static_cast<int64_t>(K::kCode.bits) / 8;
  const int64_t chunks = weight_map_chunks<K>(args);
  p.chunk_rows = static_cast<int>(args.dims.n_pad);
  p.expert_rows = static_cast<int>(args.dims.n_pad * chunks);
  const int64_t weight_rows = args.dims.n_pad * chunks * (K::Grouped ? args.experts : 1);
  st = cached_weight_map(&p.weight, args.codes, MapElem::kByte, weight_rows, row_bytes / chunks, row_bytes / chunks,
                         K::BN, K::kFour ? 64 : 128);
  if (!st) return st;
  p.staged = 0;
  st = K::Loads::prepare_scales(p, args, workspace_of<K>(args), stream);
  if (!st) return st;
  if constexpr (K::kStagedStore) {
    // Boxes of BM tokens, or with the tokens on M of a warpgroup's 64.
    st = epilogue::prepare_staged_store<K::kTokensM ? 64 : BM>(
        &p, args, K::kOutId == dtypes::bf16.id() ? MapElem::kBf16 : MapElem::kF16);
    if (!st) return st;
  }
  return launch_blocks<K>(p, args, stream, "the sm90 8-bit activation kernels");
}

} // namespace sm90
} // namespace humming
