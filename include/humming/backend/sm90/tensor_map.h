// Host side of the sm90 backend's tensor copies: encoding a tensor map (the descriptor a TMA
// copy reads) for a row-major matrix of 16-bit or 8-bit elements. The driver's encoder is looked up
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

// Element types of the maps: the 16-bit activations of the weight-only kernels, and bytes (8-bit
// activations and the row-major 8-bit weights of the FP8 kernels).
enum class MapElem : int { kF16 = 0, kBf16 = 1, kByte = 2 };

constexpr int map_elem_bytes(MapElem e) { return e == MapElem::kByte ? 1 : 2; }

// A map of `rows` x `cols` elements (row stride `ld` elements) read in boxes of `box_rows` rows x
// `box_bytes` bytes, in the swizzle of that width: 128 (the row of the 128-byte swizzle the WGMMA
// descriptors read), or 64 (the 4-bit weights of the 8-bit activation kernels, which threads read
// into registers: the 64-byte swizzle keeps their reads free of bank conflicts). Elements past the
// matrix read as zeros. The row stride must be a multiple of
// 16 bytes unless there is one row (then it is not used, and any valid value is passed).
inline Status encode_rows_map(CUtensorMap *map, const void *base, MapElem elem, int64_t rows, int64_t cols, int64_t ld,
                              int box_rows, int box_bytes = 128) {
  std::string why;
  const auto encode = tensor_map_encoder(&why);
  if (encode == nullptr) return Status::Error(why);
  const int64_t bytes = map_elem_bytes(elem);
  const cuuint64_t stride =
      rows == 1 ? static_cast<cuuint64_t>((cols * bytes + 15) / 16 * 16) : static_cast<cuuint64_t>(ld * bytes);
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {stride};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_bytes / bytes), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUtensorMapDataType type = elem == MapElem::kByte   ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : elem == MapElem::kBf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                            : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult r =
      encode(map, type, 2, const_cast<void *>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
             box_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return Status::Error("encoding a tensor map failed (CUresult " + std::to_string(static_cast<int>(r)) + ") for " +
                         std::to_string(rows) + " x " + std::to_string(cols) + " elements, row stride " +
                         std::to_string(ld));
  return Status::Ok();
}

// What a map holds besides the driver's bytes: a map encoded from the same seven values is
// identical to a fresh one (even if the memory was freed and handed out again in between).
struct MapKey {
  const void *base = nullptr;
  int64_t rows = -1, cols = -1, ld = -1;
  int box_rows = -1, box_bytes = 128;
  MapElem elem = MapElem::kF16;
  bool operator==(const MapKey &o) const {
    return base == o.base && rows == o.rows && cols == o.cols && ld == o.ld && box_rows == o.box_rows &&
           box_bytes == o.box_bytes && elem == o.elem;
  }
};
struct MapEntry {
  CUtensorMap map;
  MapKey key;
};

// encode_rows_map through a small per-thread cache of the last maps it encoded (activations, and
// the outputs of the tiles with staged stores: eager calls, which reuse their buffers, skip the
// driver call; 16 entries, as a launch with staged stores takes two).
inline Status cached_rows_map(CUtensorMap *map, const void *base, MapElem elem, int64_t rows, int64_t cols, int64_t ld,
                              int box_rows) {
  constexpr int kEntries = 16;
  thread_local MapEntry cache[kEntries];
  thread_local int next = 0;
  const MapKey key{base, rows, cols, ld, box_rows, 128, elem};
  for (const MapEntry &e : cache)
    if (e.key == key) {
      *map = e.map;
      return Status::Ok();
    }
  Status st = encode_rows_map(map, base, elem, rows, cols, ld, box_rows);
  if (!st) return st;
  MapEntry &e = cache[next];
  next = (next + 1) % kEntries;
  e.map = *map, e.key = key;
  return Status::Ok();
}

// The same for weights, whose maps are encoded once per packed weight and box: a per-thread
// direct-mapped cache of 512 maps indexed by the weight's address, so a model's layers (each with
// its own weight) find theirs with one comparison instead of a scan or a driver call per launch.
inline Status cached_weight_map(CUtensorMap *map, const void *base, MapElem elem, int64_t rows, int64_t cols,
                                int64_t ld, int box_rows, int box_bytes = 128) {
  constexpr int kEntries = 512;
  thread_local MapEntry cache[kEntries];
  const MapKey key{base, rows, cols, ld, box_rows, box_bytes, elem};
  // Allocations are at least 256-byte aligned: drop those bits, then mix in the box.
  const uintptr_t h = (reinterpret_cast<uintptr_t>(base) >> 8) * 0x9E3779B1u + static_cast<uintptr_t>(box_rows);
  MapEntry &e = cache[(h >> 4) % kEntries];
  if (e.key == key) {
    *map = e.map;
    return Status::Ok();
  }
  Status st = encode_rows_map(map, base, elem, rows, cols, ld, box_rows, box_bytes);
  if (!st) return st;
  e.map = *map, e.key = key;
  return Status::Ok();
}

} // namespace sm90
} // namespace humming
