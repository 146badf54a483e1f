// Tile scheduling for mixture-of-experts (grouped) GEMMs: the rows of the activations belong to
// experts, each expert multiplies its rows by its own weight, and no tile straddles two experts.
// The expert count and the rows of each expert are runtime data in device memory (counts change
// every step and the GPU writes them), never template parameters, and nothing here needs them on
// the host: a launch is sized by expert_tiles_at_most, and each persistent block walks its tiles
// with a cursor over the experts.
//
// Two row layouts:
// - contiguous: rows sorted by expert; expert e owns rows [offsets[e], offsets[e + 1]).
// - masked: a fixed capacity per expert (the CUDA-graph-friendly decode layout); expert e owns
//   rows [e * capacity, e * capacity + counts[e]) and the rest of its capacity is never read.
//
// Tile order: expert by expert; within an expert, n tile by n tile, the m tiles of one n tile
// consecutive. Blocks that take consecutive tiles (a persistent grid hands them out in turn) then
// share an expert's weight column through L2 while its rows are in flight.
#pragma once

#include <cstdint>

#include "humming/format/dtype.h"
#include "humming/scheduler/streamk.h"

namespace humming {

struct ExpertRows {
  const int32_t *offsets = nullptr; // contiguous: experts + 1 row offsets (nullptr: masked)
  const int32_t *counts = nullptr;  // masked: rows of each expert
  int64_t capacity = 0;             // masked: rows reserved for each expert
  int32_t experts = 0;

  // Rows [*begin, *end) of expert e.
  HUMMING_HD void rows(int32_t e, int64_t *begin, int64_t *end) const {
    if (offsets != nullptr) {
      *begin = offsets[e];
      *end = offsets[e + 1];
    } else {
      // A count outside [0, capacity] (bad input; nothing on the GPU can report it) is clipped, so
      // that an expert never reaches into the next one's slot.
      const int64_t count = counts[e];
      *begin = static_cast<int64_t>(e) * capacity;
      *end = *begin + (count < 0 ? 0 : count > capacity ? capacity : count);
    }
  }
};

struct ExpertTile {
  int32_t expert;
  int64_t m0;    // first row of the tile
  int64_t m_end; // one past its last row (at most m0 + tile_m; the expert's rows end there)
  int64_t n_tile;
};

// A block's position in the tile order: the expert it has reached and the index of that expert's
// first tile. Tiles must be asked for in increasing order (as a persistent block does).
struct ExpertCursor {
  int32_t expert = 0;
  int64_t first = 0;
};

// Tile `t` of the order above, for tiles of `tile_m` rows and `n_tiles` tiles along N; false when
// `t` is past the last tile. Cost: one step per expert passed since the cursor's last tile.
HUMMING_HD bool expert_tile(const ExpertRows &g, int tile_m, int64_t n_tiles, int64_t t, ExpertCursor *c,
                            ExpertTile *out) {
  while (c->expert < g.experts) {
    int64_t begin, end;
    g.rows(c->expert, &begin, &end);
    const int64_t m_tiles = end > begin ? (end - begin + tile_m - 1) / tile_m : 0;
    const int64_t tiles = m_tiles * n_tiles;
    if (t < c->first + tiles) {
      const int64_t local = t - c->first;
      const int64_t m0 = begin + (local % m_tiles) * tile_m;
      out->expert = c->expert;
      out->m0 = m0;
      out->m_end = m0 + tile_m < end ? m0 + tile_m : end;
      out->n_tile = local / m_tiles;
      return true;
    }
    c->first += tiles;
    ++c->expert;
  }
  return false;
}

#if defined(__CUDACC__)
// expert_tile for a whole warp (every lane active, the same arguments, the same answer in every
// lane): the lanes look at kExpertsPerLane experts each, so one step covers 128 experts for one
// L2 round trip (their row offsets or counts load together), where expert_tile takes one round
// trip per expert. A block's cursor passes every expert once over its tiles (its last request
// walks to the end to learn that no tile is left), so the scalar walk cost about 0.13 us per
// expert: 33 us of a 45 us launch with 256 experts at decode (H200, 1536 x 2048, 8 experts with
// rows). Same tiles, same order, same cursor as expert_tile.
constexpr int kExpertsPerLane = 4;

__device__ __forceinline__ bool expert_tile_warp(const ExpertRows &g, int tile_m, int64_t n_tiles, int64_t t,
                                                 ExpertCursor *c, ExpertTile *out) {
  constexpr unsigned kAll = 0xFFFFFFFFu;
  const int lane = static_cast<int>(threadIdx.x % 32);
  // Tiles of an expert's rows [b, e).
  const auto tiles_of = [&](int64_t b, int64_t e) { return e > b ? (e - b + tile_m - 1) / tile_m * n_tiles : 0; };
  while (c->expert < g.experts) {
    const int32_t e0 = c->expert + lane * kExpertsPerLane;
    // Row bounds as 32-bit values (rows < 2^31, as the kernels require): few registers, since the
    // producer warp that walks too has few.
    int32_t begin[kExpertsPerLane], end[kExpertsPerLane];
    int64_t mine = 0;
#pragma unroll
    for (int j = 0; j < kExpertsPerLane; ++j) {
      int64_t b = 0, e = 0;
      if (e0 + j < g.experts) g.rows(e0 + j, &b, &e);
      begin[j] = static_cast<int32_t>(b), end[j] = static_cast<int32_t>(e);
      mine += tiles_of(b, e);
    }
    // Tiles of this lane's experts and of every lower lane's (inclusive scan over the warp).
    int64_t upto = mine;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int64_t v = __shfl_up_sync(kAll, upto, d);
      if (lane >= d) upto += v;
    }
    const unsigned hit = __ballot_sync(kAll, upto > t - c->first);
    if (hit == 0) {
      c->first += __shfl_sync(kAll, upto, 31);
      c->expert += 32 * kExpertsPerLane;
      continue;
    }
    // The lane whose experts hold tile t finds which one; every lane takes its answer.
    const int src = __ffs(hit) - 1;
    int64_t first = c->first + upto - mine;
    int32_t expert = e0, e_begin = 0, e_end = 0;
#pragma unroll
    for (int j = 0; j < kExpertsPerLane; ++j) {
      const int64_t n = tiles_of(begin[j], end[j]);
      if (t < first + n) {
        expert = e0 + j, e_begin = begin[j], e_end = end[j];
        break;
      }
      first += n;
    }
    c->expert = __shfl_sync(kAll, expert, src);
    c->first = __shfl_sync(kAll, first, src);
    e_begin = __shfl_sync(kAll, e_begin, src);
    e_end = __shfl_sync(kAll, e_end, src);
    const int64_t m_tiles = (e_end - e_begin + tile_m - 1) / tile_m, at = t - c->first;
    out->expert = c->expert;
    out->m0 = e_begin + (at % m_tiles) * tile_m;
    out->m_end = out->m0 + tile_m < e_end ? out->m0 + tile_m : e_end;
    out->n_tile = at / m_tiles;
    return true;
  }
  return false;
}

// Rounds of a grouped launch's walk: round r's gridDim.x tiles of the order above go one to each
// block, block b taking the one at (b + r * kGroupedRoundTurn) % gridDim.x. Why turn: an expert's
// tiles come in multiples of its n tiles (12 or 16 for Qwen3-30B-A3B), and so do the grid's 132
// blocks, so with every gridDim.x-th tile from blockIdx.x a block met its experts' tiles at the
// same m place each time: some blocks took every partly filled last tile of an expert and others
// none, and on an H100 (session 60, ncu, W4A8 gate-up of Qwen3-30B-A3B at 4096 tokens) the
// multiprocessors were busy 79 % of the kernel's time against humming-kernels' 95 %. Turning each
// round mixes the places: 92 % busy, and the blocks that run an n tile's m tiles together share its
// weights in L2 (DRAM read 439 -> 269 MB; 353 -> 295 us under ncu); GEMM alone, random routing,
// turn 0 against 13: that gate-up 292.7 -> 249.5 us, its down 263.8 -> 216.3, Mixtral-8x7B's
// gate-up at 1024 tokens 515.3 -> 453.2; W4A16 the same way; the t80 launches (64 rows per expert)
// within 2 % (benchmarks/results/h100/tuning/h100-2026-12-07-s60-README.md). A prime step, so that
// its multiples do not share the tile counts' small factors; each round stays a permutation of its
// tiles, the tiles a block takes still increase (expert_tile's cursor), and launches of at most
// gridDim.x tiles (decode) walk as before.
constexpr int64_t kGroupedRoundTurn = 13;

// A persistent block's share of a grouped launch's whole tiles: one tile per round (above), f(tile)
// for each, its rows clipped to [0, m) so that offsets or counts past the activations never reach
// memory (a tile that starts outside them is skipped). Lone: one thread walks (expert_tile); else
// every lane of the warp calls this together and gets the same tiles (expert_tile_warp).
template <bool Lone, class F>
__device__ __forceinline__ void for_each_expert_tile(const ExpertRows &g, int tile_m, int64_t n_tiles, int64_t m, F f) {
  ExpertCursor cursor;
  ExpertTile et;
  const int64_t grid = gridDim.x;
  // (b + r * kGroupedRoundTurn) % grid, kept as it turns: no 64-bit division per tile.
  int64_t place = blockIdx.x;
  for (int64_t r = 0;; ++r) {
    const int64_t t = r * grid + place;
    place += kGroupedRoundTurn;
    while (place >= grid) place -= grid;
    bool more;
    if constexpr (Lone)
      more = expert_tile(g, tile_m, n_tiles, t, &cursor, &et);
    else
      more = expert_tile_warp(g, tile_m, n_tiles, t, &cursor, &et);
    if (!more) return;
    if (et.m0 >= 0 && et.m0 < m) {
      if (et.m_end > m) et.m_end = m;
      f(et);
    }
  }
}
#endif

// The rows of each expert of a GEMM's arguments (GemmArgs: expert_offsets or expert_counts and
// expert_capacity).
template <class Args> HUMMING_HD ExpertRows expert_rows(const Args &a) {
  ExpertRows g;
  g.offsets = a.expert_offsets;
  g.counts = a.expert_counts;
  g.capacity = a.expert_capacity;
  g.experts = a.experts;
  return g;
}

// A bound on the tile count that needs no expert's rows: `rows` rows in all (contiguous: the
// assignments, tokens x top_k; masked: experts x capacity) fill at most rows / tile_m whole m tiles,
// and each expert with rows (at most min(experts, rows) of them) at most one partial one. A
// persistent launch takes min(SMs, this) blocks; at decode (few rows, many experts) the second
// term keeps the bound near the tiles that exist.
HUMMING_HD int64_t expert_tiles_at_most(int64_t rows, int32_t experts, int tile_m, int64_t n_tiles) {
  return (rows / tile_m + (rows < experts ? rows : experts)) * n_tiles;
}

// The plan of a grouped launch of whole tiles, which its blocks find themselves
// (for_each_expert_tile): k_tiles K tiles per tile (units: the same, one unit of work per K tile),
// and as the tile count a bound that needs no expert's rows (expert_tiles_at_most over the launch's
// m rows), one block per tile of it up to one per multiprocessor. No stream-K part: no workspace.
HUMMING_HD StreamKPlan grouped_plan(int64_t m, int32_t experts, int tile_m, int64_t n_tiles, int64_t k_tiles,
                                    int64_t num_sms) {
  StreamKPlan p;
  p.k_tiles = p.units = k_tiles;
  p.tiles = expert_tiles_at_most(m, experts, tile_m, n_tiles);
  const int64_t sms = num_sms > 0 ? num_sms : 1;
  p.blocks = p.tiles < sms ? p.tiles : sms;
  return p;
}

// The K shares of each tile of a grouped launch whose tiles split K (the kernels' K-split
// scheduler kind, instances ending _ks): as many as let every share have a block of its own
// (tiles_bound x shares <= sms, tiles_bound from expert_tiles_at_most), each at least
// kGroupedSplitMinKTiles K tiles deep; 1 (whole tiles) where the tiles alone fill the GPU. Why:
// a decode launch of few experts and a narrow layer has fewer tiles than multiprocessors, and a
// tile's one block cannot draw its weight's bytes at the rate the GPU's memory gives (Mixtral-8x7B
// at one token: 2 experts x 32 down tiles of 128 channels on 132 multiprocessors; session 28).
constexpr int64_t kGroupedSplitMinKTiles = 8;
HUMMING_HD int64_t grouped_k_shares(int64_t tiles_bound, int64_t k_tiles, int64_t sms) {
  if (tiles_bound <= 0 || sms <= 0) return 1;
  int64_t shares = sms / tiles_bound;
  const int64_t deep = k_tiles / kGroupedSplitMinKTiles;
  if (shares > deep) shares = deep;
  return shares < 1 ? 1 : shares;
}

// K tiles [*kt0, *kt1) of share `share` of `shares` over k_tiles (as even as whole tiles allow).
HUMMING_HD void grouped_k_share(int64_t k_tiles, int64_t share, int64_t shares, int64_t *kt0, int64_t *kt1) {
  *kt0 = share * k_tiles / shares;
  *kt1 = (share + 1) * k_tiles / shares;
}

} // namespace humming
