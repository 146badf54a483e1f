// Host side of the sm90 backend's tensor copies: encoding a tensor map (the descriptor a TMA
// copy reads) for a row-major matrix of 16-bit elements. The driver's encoder is looked up
// through the runtime (cudaGetDriverEntryPointByVersion), so libhumming never links libcuda: the
// build machines have no driver, and a wheel must load where only the driver's own copy exists.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <string>

#include "humming/humming.h"

namespace humming {
namespace sm90 {

// The driver's cuTensorMapEncodeTiled, looked up once per process (nullptr with a reason when
// the driver lacks it).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder(std::string *why) {
  static std::string reason;
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || p == nullptr) {
      cudaGetLastError();
      reason = std::string("the CUDA driver has no cuTensorMapEncodeTiled (") + cudaGetErrorString(e) +
               "); the sm90 backend needs a driver for CUDA 12.0 or newer";
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  if (fn == nullptr && why != nullptr) *why = reason;
  return fn;
}

// A map of `rows` x `cols` 16-bit elements (row stride `ld` elements) read in boxes of
// `box_rows` x 64 elements (128 bytes, the row of the 128-byte swizzle the WGMMA descriptors
// read). Elements past the matrix read as zeros. The row stride must be a multiple of 16 bytes
// unless there is one row (then it is not used, and any valid value is passed).
inline Status encode_rows_map(CUtensorMap *map, const void *base, bool bf16, int64_t rows, int64_t cols, int64_t ld,
                              int box_rows) {
  std::string why;
  const auto encode = tensor_map_encoder(&why);
  if (encode == nullptr) return Status::Error(why);
  const cuuint64_t stride =
      rows == 1 ? static_cast<cuuint64_t>((cols * 2 + 15) / 16 * 16) : static_cast<cuuint64_t>(ld * 2);
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {stride};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r =
      encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2,
             const_cast<void *>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return Status::Error("encoding the activations' tensor map failed (CUresult " +
                         std::to_string(static_cast<int>(r)) + ") for " + std::to_string(rows) + " x " +
                         std::to_string(cols) + " elements, row stride " + std::to_string(ld));
  return Status::Ok();
}

// encode_rows_map through a small per-thread cache of the last maps it encoded. A map holds only
// the address, the shape, the stride, the element type and the box, so a call with the same five
// values gets a map identical to a fresh one (even if the memory was freed and handed out again
// in between); eager decode calls, which reuse their activation buffers, skip the driver call.
inline Status cached_rows_map(CUtensorMap *map, const void *base, bool bf16, int64_t rows, int64_t cols, int64_t ld,
                              int box_rows) {
  struct Entry {
    CUtensorMap map;
    const void *base = nullptr;
    int64_t rows = -1, cols = -1, ld = -1;
    int box_rows = -1;
    bool bf16 = false;
  };
  constexpr int kEntries = 8;
  thread_local Entry cache[kEntries];
  thread_local int next = 0;
  for (const Entry &e : cache)
    if (e.base == base && e.rows == rows && e.cols == cols && e.ld == ld && e.box_rows == box_rows && e.bf16 == bf16) {
      *map = e.map;
      return Status::Ok();
    }
  Status st = encode_rows_map(map, base, bf16, rows, cols, ld, box_rows);
  if (!st) return st;
  Entry &e = cache[next];
  next = (next + 1) % kEntries;
  e.map = *map, e.base = base, e.rows = rows, e.cols = cols, e.ld = ld, e.box_rows = box_rows, e.bf16 = bf16;
  return Status::Ok();
}

} // namespace sm90
} // namespace humming
