// Split-K scheduling with a deterministic fix-up.
//
// When the output tiles alone cannot fill the GPU (decode: few rows, few tiles), K is cut into
// `splits` slices, one block per (tile, slice). Every block writes its fp32 partial tile to the
// workspace; the last block of a tile to finish (found with a per-tile counter) sums the partials
// in slice order 0, 1, ... and writes the output, then resets the counter. The sum order never
// depends on which block finishes last, so results are bitwise identical run to run. K is cut in
// units of lcm(tile K, scale group) that slices own whole (slice_tiles), so a scale group is never
// split.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstdint>

#include "humming/format/dtype.h"

namespace humming {

struct SplitPlan {
  int splits = 1;          // K slices per output tile
  int64_t unit_tiles = 1;  // K tiles per indivisible unit (a scale group may span several tiles)
  int64_t units = 0;       // units along K
  int64_t units_per_split = 0; // most units one slice owns
};

// Workspace: a fixed region of kSplitCounters int tile counters, then fp32 partials
// [splits][m][n_pad]. The counters sit at the same place for every problem, so a buffer reused
// across launches of different shapes (GemmArgs::workspace) never finds partials where a later
// launch expects zero counters; only launches with at most kSplitCounters tiles split K.
constexpr int64_t kSplitCounters = 16384;

HUMMING_HD int *splitk_counters(void *workspace) { return static_cast<int *>(workspace); }
HUMMING_HD float *splitk_partials(void *workspace) {
  return reinterpret_cast<float *>(static_cast<char *>(workspace) + kSplitCounters * 4);
}

// Upper bound on K slices per tile: 16, or HUMMING_MAX_SPLITS from the environment (read once per
// process; 1 turns split-K off). A tuning and diagnosis knob, not needed for correctness.
inline int split_limit() {
  static const int value = [] {
    const char *env = std::getenv("HUMMING_MAX_SPLITS");
    const int v = env != nullptr ? std::atoi(env) : 0;
    return v >= 1 && v <= 64 ? v : 16;
  }();
  return value;
}

// Fewest inputs a K slice keeps: 7168, or HUMMING_MIN_SLICE_K from the environment (read once per
// process; a tuning and diagnosis knob like HUMMING_MAX_SPLITS). Measured on the H200 (sm80 tiles,
// W4A16, scripts/time_shapes.py with HUMMING_MAX_SPLITS): a split launch costs about as much as 30
// more stages of a block, so slicing K = 8192 made every decode shape slower (8192 x 8192, M = 1:
// 39.8 us whole, 53.6 us in two slices), while K = 28672 gained up to four slices (105.9 -> 79.4 us).
inline int64_t min_slice_k() {
  static const int64_t value = [] {
    const char *env = std::getenv("HUMMING_MIN_SLICE_K");
    const long long v = env != nullptr ? std::atoll(env) : 0;
    return v >= 1 ? static_cast<int64_t>(v) : int64_t(7168);
  }();
  return value;
}

// `tiles`: output tiles of the launch; `k_tiles`: K tiles of the padded weight (`tile_k` inputs
// each); `group_tiles`: K tiles per scale group (1 when the group is not larger than a tile);
// `sms`: multiprocessors; `blocks_per_sm`: blocks of the kernel one multiprocessor holds.
inline SplitPlan plan_splits(int64_t tiles, int64_t k_tiles, int64_t tile_k, int64_t group_tiles, int sms,
                             int blocks_per_sm) {
  SplitPlan p;
  p.unit_tiles = group_tiles > 1 ? group_tiles : 1;
  p.units = (k_tiles + p.unit_tiles - 1) / p.unit_tiles;
  const int64_t slots = static_cast<int64_t>(sms > 0 ? sms : 1) * blocks_per_sm;
  int64_t splits = 1;
  if (tiles < slots && tiles <= kSplitCounters) {
    splits = slots / tiles;
    // Each slice keeps at least min_slice_k() inputs and two units of work.
    const int64_t by_k = k_tiles * tile_k / min_slice_k();
    int64_t max_splits = p.units / 2 < by_k ? p.units / 2 : by_k;
    if (max_splits < 1) max_splits = 1;
    if (splits > max_splits) splits = max_splits;
    if (splits > split_limit()) splits = split_limit();
    if (splits < 1) splits = 1;
  }
  p.splits = static_cast<int>(splits < p.units ? splits : p.units);
  p.units_per_split = (p.units + p.splits - 1) / p.splits;
  return p;
}

// Slices take units round robin: slice s owns units s, s + splits, s + 2 * splits, ... The slices
// of a tile run side by side, so at any moment they read neighbouring stretches of the same weight
// columns rather than stretches a whole slice apart (measured slower on the H200).
struct SliceTiles {
  int64_t unit_tiles;
  int splits;
  int slice;
  int64_t count; // K tiles this slice owns
  // The `i`-th K tile of the slice, i < count.
  HUMMING_HD int64_t operator[](int64_t i) const {
    const int64_t unit = slice + (i / unit_tiles) * splits;
    return unit * unit_tiles + i % unit_tiles;
  }
};

// Walks a slice's K tiles in order with additions only (SliceTiles::operator[] divides, which a
// kernel would pay once per stage).
struct SliceCursor {
  int64_t tile;       // the current K tile
  int64_t in_unit;    // its place inside its unit
  int64_t unit_tiles;
  int64_t jump;       // K tiles of the other slices' units between two units of this slice
  HUMMING_HD void advance() {
    ++tile;
    if (++in_unit == unit_tiles) {
      in_unit = 0;
      tile += jump;
    }
  }
};

HUMMING_HD SliceCursor slice_cursor(const SliceTiles &t) {
  return SliceCursor{static_cast<int64_t>(t.slice) * t.unit_tiles, 0, t.unit_tiles,
                     static_cast<int64_t>(t.splits - 1) * t.unit_tiles};
}

HUMMING_HD SliceTiles slice_tiles(const SplitPlan &p, int64_t k_tiles, int s) {
  const int64_t units = s < p.units ? (p.units - 1 - s) / p.splits + 1 : 0;
  int64_t count = units * p.unit_tiles;
  // The last unit may be cut short by the end of K.
  if (units > 0 && (p.units - 1) % p.splits == s) count -= p.units * p.unit_tiles - k_tiles;
  return SliceTiles{p.unit_tiles, p.splits, s, count};
}

inline size_t splitk_workspace_bytes(const SplitPlan &p, int64_t m, int64_t n_pad) {
  if (p.splits <= 1) return 0;
  const size_t partials = static_cast<size_t>(p.splits) * static_cast<size_t>(m) * static_cast<size_t>(n_pad) * 4;
  return static_cast<size_t>(kSplitCounters) * 4 + partials;
}

} // namespace humming
