// The order in which the dense launches of both sm90 kernels visit their output tiles. Row-major
// order (all of one row of tiles, then the next) makes every row of tiles stream the whole weight
// from memory again, which for large batches is more traffic than the tensor cores need (28672 x
// 8192 e4m3 weights, 64 rows of 128 tokens: 15 GB). Grouped order walks kRasterRows rows of tiles
// together, row fastest, so the blocks that run at the same time share each weight tile through
// L2 (and a group's activations stay there while it walks the channels).
#pragma once

#include <cstdint>

#include "humming/format/dtype.h"

namespace humming {

// Rows of tiles a group walks together: 8 rows of 128 tokens are 1024 tokens (8 MiB of 8-bit
// activations at k = 8192), which with the weight tiles of one wave of blocks fits the H200's L2.
// H100, session 43 (scripts/gpu_s43.sh PART=raster, GEMM alone at m = 4096 / 8192): 4 and 16 rows
// within 2 % of 8 on the 8-bit kernel's FP8 tiles, none better throughout.
constexpr int64_t kRasterRows = 8;

struct TileCoord {
  int64_t row; // tile row (tokens)
  int64_t col; // tile column (channels)
};

// Tile `t` of a grid of `rows` x `cols` tiles in grouped order: groups of kRasterRows rows (the
// last one shorter), each walked column by column, row fastest. A bijection of [0, rows * cols).
HUMMING_HD TileCoord grouped_tile(int64_t t, int64_t rows, int64_t cols) {
  const int64_t group = t / (kRasterRows * cols), first = group * kRasterRows;
  const int64_t height = rows - first < kRasterRows ? rows - first : kRasterRows;
  const int64_t within = t - first * cols;
  return TileCoord{first + within % height, within / height};
}

// Tile `t` of a grid of `rows` x `cols` tiles walked row by row (StreamKPlan::step_rows).
HUMMING_HD TileCoord row_major_tile(int64_t t, int64_t cols) { return TileCoord{t / cols, t % cols}; }

} // namespace humming
