// The dense tile scheduler: one block per output tile, tiles in row-major order of the grid.
// (Persistent and stream-K variants come with the fast backends.)
#pragma once

#include <cstdint>

#include "humming/format/dtype.h"

namespace humming {

// Largest gridDim.y a launch may use.
constexpr int64_t kMaxGridRows = 65535;

struct DenseTile {
  int64_t m0; // first output row of the tile
  int64_t n0; // first output channel of the tile
};

HUMMING_HD DenseTile dense_tile(uint32_t block_x, uint32_t block_y, int block_m, int block_n) {
  return DenseTile{static_cast<int64_t>(block_y) * block_m, static_cast<int64_t>(block_x) * block_n};
}

HUMMING_HD int64_t dense_grid_rows(int64_t m, int block_m) { return (m + block_m - 1) / block_m; }
HUMMING_HD int64_t dense_grid_cols(int64_t n, int block_n) { return (n + block_n - 1) / block_n; }

} // namespace humming
