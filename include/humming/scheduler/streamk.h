// Persistent stream-K scheduling with a deterministic fix-up.
//
// The work of a launch is output tiles x K units. A unit is lcm(tile K, scale group) inputs, so a
// scale group never straddles two blocks. Usually every block computes one whole tile (a plain
// launch). When a launch has very few tiles for a long K (plan_stream_k says when), it has more
// blocks than tiles (at most one per resident slot) and the tiles' units are spread evenly over
// them: block b owns units [sk_begin(b), sk_begin(b + 1)) in order, which may end one tile and
// start the next. (A plain launch is the same machinery with one data-parallel wave: block b
// computes tile b whole.)
// A tile whose units span several blocks is assembled from fp32 partials in block order
// (epilogue/streamk_fixup.h): each contributor writes its partial to its own workspace slot and
// counts itself on the tile's counter; in plain launches the last to count adds the partials and
// writes the output, in persistent ones the tile's first contributor waits for the others' count
// and does. The sum order never depends on which block finishes last, so results are bitwise
// identical run to run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "humming/format/dtype.h"
#include "humming/humming.h"

namespace humming {

struct StreamKPlan {
  int64_t tiles = 0;      // output tiles
  int64_t k_tiles = 0;    // K tiles of one output tile
  int64_t unit_tiles = 1; // K tiles per unit (the last unit of a tile may be shorter)
  int64_t units = 0;      // units per output tile
  int64_t blocks = 0;     // blocks launched
  int64_t dp_waves = 0;   // whole-tile waves before the stream-K part
  int64_t sk_tiles = 0;   // tiles of the stream-K part (the last ones)
  // Rows of tiles (along M) that walk in step: 0, or (an uneven spread-only plan of two or more
  // rows, unless HUMMING_LOCKSTEP_ROWS=0; see plan_persistent) the plan's tiles are in row-major order
  // and `blocks` is a multiple of it, so the blocks of every row take the same K units of the same
  // columns (the same weights) at the same time (for_each_dense_segment, backend/sm90/pipeline.h).
  int64_t step_rows = 0;
  HUMMING_HD int64_t dp_tiles() const { return dp_waves * blocks; }
  HUMMING_HD int64_t sk_units() const { return sk_tiles * units; }
  // First stream-K unit of block b; sk_begin(blocks) is the end.
  HUMMING_HD int64_t sk_begin(int64_t b) const { return b * sk_units() / blocks; }
  // The block that owns stream-K unit x (the largest b with sk_begin(b) <= x).
  HUMMING_HD int64_t sk_owner(int64_t x) const { return ((x + 1) * blocks - 1) / sk_units(); }
  // Workspace slot of block b's partial of stream-K tile t (0-based within the stream-K part): a
  // block contributes partials to at most two tiles, its first and its last.
  HUMMING_HD int64_t partial_slot(int64_t b, int64_t t) const { return 2 * b + (sk_begin(b) >= t * units ? 0 : 1); }
};

// A block's share as a list of segments: K tiles [kt_begin, kt_end) of one output tile. At most
// kMaxSegments (whole tiles of at most two data-parallel waves, then at most three tiles' units).
struct Segment {
  int tile;
  int kt_begin;
  int kt_end;
  int pad; // 16-byte records
};
constexpr int kMaxSegments = 6;

// Writes block b's segments to `out` (kMaxSegments entries) and returns their number.
HUMMING_HD int block_segments(const StreamKPlan &p, int64_t b, Segment *out) {
  int n = 0;
  for (int64_t w = 0; w < p.dp_waves && n < kMaxSegments; ++w)
    out[n++] = Segment{static_cast<int>(w * p.blocks + b), 0, static_cast<int>(p.k_tiles), 0};
  if (p.sk_tiles == 0) return n;
  int64_t x = p.sk_begin(b);
  const int64_t x_end = p.sk_begin(b + 1);
  while (x < x_end && n < kMaxSegments) {
    const int64_t t = x / p.units, first = t * p.units;
    const int64_t u_end = (x_end < first + p.units ? x_end : first + p.units) - first;
    const int64_t kt_end = u_end * p.unit_tiles < p.k_tiles ? u_end * p.unit_tiles : p.k_tiles;
    out[n++] = Segment{static_cast<int>(p.dp_tiles() + t), static_cast<int>((x - first) * p.unit_tiles),
                       static_cast<int>(kt_end), 0};
    x = first + u_end;
  }
  return n;
}

// Workspace: a fixed region of kStreamKCounters int tile counters, then fp32 partial slots of
// `rows` x `tile_n` (rows = min(tile rows, m)), two per block. The counters sit at the same place
// for every problem, so a buffer reused across launches of different shapes (GemmArgs::workspace)
// never finds partials where a later launch expects zero counters.
constexpr int64_t kStreamKCounters = 16384;
static_assert(kStreamKCounters * 4 <= static_cast<int64_t>(kWorkspaceZeroBytes), "counters lie in the zeroed part");

HUMMING_HD int *streamk_counters(void *workspace) { return static_cast<int *>(workspace); }
HUMMING_HD float *streamk_partials(void *workspace) {
  return reinterpret_cast<float *>(static_cast<char *>(workspace) + kStreamKCounters * 4);
}

// HUMMING_MIN_SLICE_K from the environment, or 0 when unset (read once per process; a tuning and
// diagnosis knob that overrides both minimums below).
inline int64_t min_slice_k_override() {
  static const int64_t value = [] {
    const char *env = std::getenv("HUMMING_MIN_SLICE_K");
    const long long v = env != nullptr ? std::atoll(env) : 0;
    return v >= 1 ? static_cast<int64_t>(v) : int64_t(0);
  }();
  return value;
}

// Fewest inputs a block's stream-K share keeps in a plain launch (plan_stream_k): 2048.
inline int64_t min_slice_k() {
  const int64_t v = min_slice_k_override();
  return v > 0 ? v : int64_t(2048);
}

// The same for persistent launches (plan_persistent), where a block keeps loading from one segment
// into the next, so a short share costs its fix-up but no pipeline refill. Two minimums, measured
// over the 25 layer shapes of bench_corpus.json at m = 1, 16, 64, 256 (H200, graph time, read
// flush, HUMMING_MIN_SLICE_K = 2048 / 1024 / 512 / 256):
// * kPersistentMinSliceK: the fewest inputs per block of a launch that is only a spread part
//   (fewer tiles than multiprocessors). 512 gave a geometric mean of 0.948 of the 2048 time
//   (1024: 0.956, 256: 0.950): 3584 x 3584 at m = 1, 16.5 us at 2048, 12.7 at 1024, 12.0 at 512;
//   576 x 7168, 15.6 / 12.8 / 13.5 / 15.3 (too many partials at 256).
// * kPersistentMinTailK: the fewest inputs per block of the stream-K tail after whole waves, below
//   which the tail is merged with the last whole wave. Merging spreads every tile of that wave and
//   pays their partials: 36864 x 7168 at m = 1 (144 tiles of t8x256, 12 in the tail) took 64.5 us
//   merged and 47.9 kept apart; 37888 x 3584 (16 tail tiles of 28 K tiles), 35.1 and 30.5;
//   10240 x 8192 at m = 256 (t128, 28 tail tiles), 94.9 and 76.5.
// HUMMING_MIN_SLICE_K overrides both.
constexpr int64_t kPersistentMinSliceK = 512;
constexpr int64_t kPersistentMinTailK = 256;
inline int64_t persistent_min_slice_k() {
  const int64_t v = min_slice_k_override();
  return v > 0 ? v : kPersistentMinSliceK;
}
inline int64_t persistent_min_tail_k() {
  const int64_t v = min_slice_k_override();
  return v > 0 ? v : kPersistentMinTailK;
}

// Stream-K mode from HUMMING_STREAM_K in the environment: 0 off (every block computes one whole
// tile), 1 (the default) when plan_stream_k's policy says so, 2 whenever a launch has fewer tiles
// than resident slots and K to split (to measure the policy). Read once per process; for tuning
// and diagnosis.
inline int stream_k_mode() {
  static const int value = [] {
    const char *env = std::getenv("HUMMING_STREAM_K");
    if (env == nullptr) return 1;
    const int v = std::atoi(env);
    return v <= 0 ? 0 : (v >= 2 ? 2 : 1);
  }();
  return value;
}

// Rows of an uneven spread walk in step (StreamKPlan::step_rows, plan_persistent) unless
// HUMMING_LOCKSTEP_ROWS=0 is in the environment. Read at each plan (a getenv, next to a launch's
// microseconds), so that a test can set it.
inline bool lockstep_rows_enabled() {
  const char *env = std::getenv("HUMMING_LOCKSTEP_ROWS");
  return env == nullptr || std::atoi(env) != 0;
}

// When stream-K is used (measured on the H200, graph time, scripts/time_shapes.py with
// HUMMING_STREAM_K=0 / 2, after the fix-up lost its per-element 64-bit divisions):
// * Tiles of several mma tiles per warp (t64, t128) gain whenever the launch leaves at least half
//   of the resident blocks idle: t128 (132 slots) on 8192 x 28672 took 662 us plain and 196 us
//   spread at m = 128, 663 and 350 us at m = 256 (64 tiles); 8192 x 8192 at m = 128, 196 and 74
//   us; t64 (264 slots) on 8192 x 8192 at m = 64, 71 and 47 us. With 112-128 tiles on 132 slots
//   spreading gained 0-4% or lost up to 7%; with 224 tiles on 264 slots, nothing.
// * Decode tiles (warps of one mma tile, two blocks per SM) gain only with very few tiles: 16 x 64
//   tiles on 1024 x 8192 (16 tiles) took 17.0 us plain and 15.3 us spread, while 64 tiles on 4096
//   x 4096 took 12.9 and 15.1 us, and 128 tiles on 8192 x 8192 21.2 and 24.4-28.2 us.
// So: at most one tile per two resident slots (one per eight for decode tiles), and K for at
// least two min_slice_k() slices.
constexpr int64_t kStreamKSlotsPerTile = 2;
constexpr int64_t kStreamKSlotsPerDecodeTile = 8;

// `tiles`: output tiles of the launch; `k_tiles`: K tiles of the padded weight (`tile_k` inputs
// each); `group_tiles`: K tiles per scale group (1 when the group is not larger than a tile);
// `sms`: multiprocessors; `blocks_per_sm`: blocks of the kernel one multiprocessor holds;
// `decode`: the kernel's warps hold one mma tile (latency-bound decode tiles; see above).
inline StreamKPlan plan_stream_k(int64_t tiles, int64_t k_tiles, int64_t tile_k, int64_t group_tiles, int sms,
                                 int blocks_per_sm, bool decode) {
  StreamKPlan p;
  p.tiles = tiles;
  p.k_tiles = k_tiles;
  p.unit_tiles = group_tiles > 1 ? group_tiles : 1;
  p.units = (k_tiles + p.unit_tiles - 1) / p.unit_tiles;
  const int64_t slots = static_cast<int64_t>(sms > 0 ? sms : 1) * (blocks_per_sm > 0 ? blocks_per_sm : 1);
  const int mode = stream_k_mode();
  const int64_t per_tile = decode ? kStreamKSlotsPerDecodeTile : kStreamKSlotsPerTile;
  const bool spread = mode == 2 ? tiles > 0 && tiles < slots && p.units > 1
                                : mode == 1 && tiles > 0 && tiles * per_tile <= slots && p.units > 1 &&
                                      k_tiles * tile_k >= 2 * min_slice_k();
  if (!spread) {
    p.blocks = tiles;
    p.dp_waves = 1;
    return p;
  }
  // Never fewer blocks than tiles; more only while each keeps min_slice_k inputs.
  const int64_t unit_k = p.unit_tiles * tile_k;
  const int64_t min_units = (min_slice_k() + unit_k - 1) / unit_k;
  const int64_t max_blocks = tiles * p.units / (min_units > 1 ? min_units : 1);
  if (decode) {
    // Decode tiles split each tile into the same number of blocks, so that every block owns one
    // segment of one tile: an even spread over all slots gives most blocks the ends of two tiles,
    // two short pipelines to fill and drain, which cost more than the idle slots it fills.
    int64_t splits = slots / tiles;
    if (splits > max_blocks / tiles) splits = max_blocks / tiles;
    if (splits < 2) {
      p.blocks = tiles;
      p.dp_waves = 1;
      return p;
    }
    p.blocks = tiles * splits;
  } else {
    const int64_t blocks = max_blocks < tiles ? tiles : max_blocks;
    p.blocks = blocks < slots ? blocks : slots;
  }
  p.sk_tiles = tiles;
  return p;
}

// Persistent launches (the sm90 backend: one warp-specialized block per multiprocessor whose
// producer keeps loading across the block's segments, so a block that ends one tile and starts
// the next pays no pipeline refill). Whole waves of tiles go to every block in turn; when the
// last wave would leave slots idle, its tiles are spread evenly over all blocks by K (stream-K),
// with the same deterministic fix-up as above. Below persistent_min_tail_k() inputs per block the
// tail wave is merged with the last whole one; launches of more than kPersistentMaxWaves waves keep the idle
// tail (at most a few per cent), which costs less than the partials of large tiles.
// HUMMING_PERSISTENT_MAX_WAVES overrides it (tuning and diagnosis). 64 rather than 8 since session
// 43: H100, GEMM alone, graph us, two interleaved runs of each (scripts/gpu_s43.sh PART=waves): the
// FP8 block tile t192n128s4 on 7168 x 16384 at m = 4096 (1232 tiles, its last wave a third full)
// 0.954x the time (787.6 -> 751.6 us), the per-channel t128x192 s5 there 0.969x, weight-only
// u4g128 t128 / t64 on 8192 x 8192 at m = 4096 0.985x / 0.976x; launches with no partial wave
// (18432 x 7168) unchanged; 0.995x in geometric mean over 16 points of 5 tiles (session 42:
// t192 0.93-1.01x over 4 layers). Not yet measured on the H200.
constexpr int64_t kPersistentMaxWaves = 64;
inline int64_t persistent_max_waves() {
  static const int64_t value = [] {
    const char *env = std::getenv("HUMMING_PERSISTENT_MAX_WAVES");
    const long long v = env != nullptr ? std::atoll(env) : 0;
    return v >= 1 ? static_cast<int64_t>(v) : kPersistentMaxWaves;
  }();
  return value;
}
// Tiles of kPersistentHeavyTileM tokens or more (the tensor-core-bound t128 / t256 of the sm90
// backend) spread a launch of fewer tiles than multiprocessors only while each tile has at least
// kPersistentHeavySlotsPerTile of them: with more tiles, the partials of such tiles (64 fp32 sums a
// thread) cost more than the idle multiprocessors. H200, u4g128 t128x128x128 at m = 256 (graph us,
// spread / one block per tile, session 13): 3584 x 3584 (56 tiles) 32.1 / 25.5, 4096 x 4096 (64)
// 33.8 / 28.4, 6144 x 4096 (96) 38.1 / 28.5, while 1536 x 7168 (24 tiles) took 32.8 spread and
// 42.4 plain.
constexpr int64_t kPersistentHeavyTileM = 128;
constexpr int64_t kPersistentHeavySlotsPerTile = 4;
// Except, where the caller asks (HeavySpread below: kWide for the weight-only kernels, kHalf for
// the W4A8 ones, where each was measured), for tiles of kPersistentHeavyTileM to
// 2 kPersistentHeavyTileM - 1 tokens (t128) in a launch of at most half as many tiles as slots
// with at least kPersistentHeavySpreadMinK inputs, or (kWide) at most two thirds as many with at
// least kPersistentHeavySpreadWideMinK: there a third of the multiprocessors or more would idle
// through a long K while the partials cost the same.
// H200, session 26, u4g128 t128x128x128 (graph us after a read flush, spread / one block per tile): one
// row of 64 tiles, 8192 x 28672 at m = 100 87.1 / 141.9 and 8192 x 8192 33.0 / 45.4; 40 tiles of
// 5120 x 13824 35.8 / 71.1; 48 of 6144 x 4096 22.3 / 25.7; two rows at m = 256, 64 tiles of
// 4096 x 14336 48.9 / 74.1 and of 4096 x 4096 23.0 / 25.9; 80 tiles gained over K = 13824 (5120 x
// 13824 at m = 256, 61.7 / 72.6) and 8192 (10240 x 8192 at m = 100, 43.4 / 45.9) but lost over
// 5120 (5120 x 5120 at m = 256, 31.8 / 30.8; 10240 x 5120 at m = 80 39.5 spread, 33.9 plain in
// session 16's sweep); 96 to 128 tiles lost (6144 x 4096 30.6 / 26.4, 7168 x 5120 38.7 / 31.7,
// 8192 x 8192 57.9 / 48.5 at m = 256). The kernel has changed since session 13's figures above:
// 4096 x 4096 at m = 256 now gains. K below 4096 (3584 x 3584) was not measured again and keeps
// one block per tile.
// The 8-bit activation kernels (H100, session 54, t128x128x128 forced, graph us after a read flush
// with the activations' quantization, whole tiles / this rule, HUMMING_STREAM_K=0 / 1): with 4-bit
// codes (e2m1 per channel x e4m3 per token) every launch of at most half as many tiles as slots
// gained: 5120 x 13824 at m = 128 (40 tiles) 48.5 / 31.5, 8192 x 8192 (64) 33.3 / 30.8, 4096 x
// 14336 at m = 128 / 256 (32 / 64) 50.0 / 32.3 and 52.8 / 41.9, 7168 x 16384 (56) 56.8 / 40.7,
// 3584 x 18944 at 128 / 256 (28 / 56) 63.2 / 33.4 and 66.3 / 46.1, 5120 x 5120 (40) 23.3 / 22.2;
// but the wide part lost over K = 8192 (10240 x 8192, 80 tiles, at m = 80 / 100 / 128: 31.9 /
// 34.2, 32.7 / 36.7, 33.7 / 38.4) and tied over 13824 (5120 x 13824 at m = 256, 51.6 / 52.3), so
// they take kHalf. With 8-bit codes it lost as often as it gained (e4m3 x e4m3 per channel, the
// same launches: 8192 x 8192 at 128 35.4 / 42.5, 5120 x 5120 21.6 / 26.4, 7168 x 16384 58.6 / 60.6
// against 3584 x 18944 54.2 / 46.5, 4096 x 14336 at 256 47.2 / 44.8; the wide part 5120 x 13824
// at 256 49.4 / 72.6; 128 x 128 blocks there 61.9 / 78.4, i8 x i8 52.5 / 69.0), so they keep kNone.
// Every W4A8 kernel takes kHalf. H200, session 55 (scripts/gpu_s55.sh, the same A/B): u4g128 in
// layout 4 and e2m1 per channel in the generic layout gained at every such launch, 5120 x 13824
// at m = 128 67.2 / 38.9 and 57.6 / 35.5, 4096 x 14336 at 128 / 256 69.5 / 38.5, 72.1 / 53.0
// and 59.5 / 35.6, 62.0 / 47.9, 3584 x 18944 at 128 / 256 88.4 / 41.2, 91.6 / 60.5 and 75.6 /
// 37.4, 78.4 / 54.2, 8192 x 8192 at 128 44.6 / 38.1 and 38.8 / 34.6; and the dispatcher's spread
// t128 on the deepest layers (8192 x 28672 and 8192 x 29568 at m = 65 to 128, e2m1 layout 4) took
// 59.9-65.0 us against 73.2-82.7 for t64, 89.9-95.4 whole and 75.0-85.5 for cuBLASLt FP8.
constexpr int64_t kPersistentHeavySpreadMinK = 4096;
constexpr int64_t kPersistentHeavySpreadWideMinK = 8192;
// Which launches of few t128 tiles a kernel spreads (the exception above).
enum class HeavySpread : uint8_t {
  kNone, // none: one block per tile, as kPersistentHeavySlotsPerTile says
  kHalf, // at most half as many tiles as slots over at least kPersistentHeavySpreadMinK inputs
  kWide, // those, and at most two thirds as many over at least kPersistentHeavySpreadWideMinK
};
// The 8-bit activation kernels' choice (kernel/sm90_a8_dense.cuh, and the dispatcher's estimates
// of them, src/registry.cpp), measured as above: kHalf for 4-bit codes on FP8 tensor cores
// (W4A8), kNone for 8-bit codes and integer activations.
constexpr HeavySpread a8_heavy_spread(int code_bits, bool int_acts) {
  return code_bits == 4 && !int_acts ? HeavySpread::kHalf : HeavySpread::kNone;
}
// Tiles of kPersistentMidTileM to kPersistentHeavyTileM - 1 tokens (t32, t64) spread such a launch
// only while each tile has at least kPersistentMidSlotsPerTile multiprocessors. H200, u4g128 bf16,
// session 13 (graph us after a read flush, spread / one block per tile, 8 layers of 1536 to 7168
// channels at m = 64, 128, 256): every launch of 80 to 128 tiles lost by spreading, by 4 to 30%
// (3584 x 3584, t64 at m = 256, 112 tiles: 27.0 / 21.3; t32 at m = 128, 112 tiles: 22.0 / 16.6;
// 5120 x 2880, t32 at m = 64, 80 tiles: 18.1 / 14.7), while every launch of 64 tiles or fewer
// gained (4096 x 4096, t64 at m = 128, 64 tiles: 21.1 / 23.0; 1536 x 7168, t32 at m = 64, 24 tiles:
// 15.6 / 26.4). The rule holds only up to kPersistentMidMaxK inputs, the deepest layer swept
// (a deeper K gains more from spreading for the same partials; measured only for W8A8, below, the
// others keep spreading), and only for launches of two or more rows of tiles, as every swept one
// was: a launch of one row (m up to the tile's height) is the nearest to memory-bound, where idle
// multiprocessors also leave DRAM bandwidth unused (unmeasured: those keep spreading).
// Decode tiles (t8, t16) spread a launch's last wave (or its only one) unless the launch is one
// row of tiles (m up to the tile's height) and that wave keeps at least kPersistentDecodeBusyNum /
// kPersistentDecodeBusyDen of the multiprocessors busy: a decode launch is bound by the weights'
// stream, which some 90 blocks already draw near DRAM's rate, so the idle ones cost less than the
// fix-ups of spread tiles. H100, session 49, GEMM alone, graph us after a read flush, the
// dispatcher's choice with this rule / with every partial wave spread as before
// (HUMMING_STREAM_K=2), the fix-up of epilogue/streamk_fixup.h in both: W4A8 e2m1 28672 x 8192
// at m = 1 / 16, 45.5 / 48.8 and 45.2 / 51.0; W4A16 u4g128 28672 x 8192 at m = 1 / 4 / 16,
// 48.8 / 53.3, 49.0 / 52.8, 46.7 / 54.4; 16384 x 2048 at m = 4 12.5 / 16.4 and 16384 x 3072
// 15.2 / 19.0 (t16x128, 128 whole tiles, against t8x256 spread); every other point measured
// (8192 x 8192, 8192 x 28672, 5120 x 13824, 4096 x 14336) keeps its plan, within 0.2 us.
// The threshold: with half the multiprocessors or fewer the spread wins or ties (whole tiles /
// spread, HUMMING_STREAM_K=0 / 1: 64 tiles of 128 channels on 8192 x 8192, W4A8 18.8 / 20.1 but
// W4A16 27.3 / 21.9, and W4A8 over K = 28672 50.0 / 47.3; 32 to 40 tiles 27-28 / 19-22), and a
// second wave of 92 of 132 (224 tiles of 128 on 28672 x 8192) gains (44.3 whole, 46.5 spread).
// Otherwise their partials are small and they need every multiprocessor's loads. (Launches of
// several rows keep spreading: the tile costs of the dispatcher's estimates were fitted to their
// spread plans, and none of them was timed with whole tiles.)
constexpr int64_t kPersistentDecodeBusyNum = 2;
constexpr int64_t kPersistentDecodeBusyDen = 3;
// The 8-bit activation kernels with 8-bit codes (W8A8) take the rule for two rows of t64 at any
// depth, and for the tail after whole waves too (MidSpread::kDeep, kPersistentDeepMidTileM below):
// their weights are twice the bytes of W4A8's and their spread rows read them apart
// (kRowsApartPenalty8 in humming.h). H100, session 56 (scripts/gpu_s55.sh PART=last, e4m3 x e4m3
// per channel, quantize + GEMM, graph us after a read flush, spread with the rows in step / whole
// tiles, HUMMING_STREAM_K=1 / 0), t64x128 and t64x192 over K = 13824 to 28672: launches of at most
// half as many tiles as multiprocessors gained by spreading (38 tiles 46.2 / 58.8, 44 41.5 / 48.0,
// 56 44.2 / 50.8, 64 38.5 / 40.1), those of 76 to 88 tiles lost up to 10 % or tied (76: 67.6 / 64.9
// and 67.7 / 62.4, 80: 45.9 / 45.3, 86: 128.0 / 116.7, 88: 59.1 / 59.6), and those of 108 to 128
// lost 9-21 % (66.4 / 60.7, 65.5 / 55.3, 70.4 / 62.5, 60.8 / 50.4, 121.8 / 101.8); after whole
// waves (four rows at m = 256, which keep the rule above, see kPersistentDeepMidTileM), tails of 20
// and 28 tiles gained (7168 x 16384 t64x192, 93.8 / 106.6; 5120 x 13824 t64x128, 65.8 / 69.5), 40
// tied (193.8 / 188.1) and 92 and 124 lost (106.9 / 94.6, 212.9 / 176.8).
constexpr int64_t kPersistentMidTileM = 32;
constexpr int64_t kPersistentMidSlotsPerTile = 2;
constexpr int64_t kPersistentMidMaxK = 8192;
// MidSpread::kDeep holds for launches of two rows of tiles of this many tokens or more (t64 at m =
// 65 to 128, as measured). Three rows and more (t64 from m = 129; t32, whose spread launches of
// several rows the estimates already charge, kRowsApartPenalty8) keep the rule above: the
// estimates' tile costs, fitted to spread plans, took their whole tiles where others were faster
// (H100, session 56, PART=c of scripts/gpu_s56.sh, its sweep, quantize + GEMM, graph us: t64 whole
// at m = 256 on 5120 x 13824, 3584 x 18944 and 4096 x 14336, 59.7 / 62.7 / 50.2 us against the t128
// that the spread plans left them, 53.5 / 58.0 / 47.6; t32 whole at m = 128 on 3584 x 18944 and
// 4096 x 14336, 51.5 / 42.8 against t64's 45.1 / 36.8). With it (PART=d of that script, the GEMM
// alone, graph us): the per-channel choices at m = 96 / 128 took t64x128 whole, 7168 x 16384 45.0 /
// 44.9 and 8192 x 28672 82.2 / 82.6 against 56.8 / 49.4 and 128.3 / 89.0 before (cuBLASLt FP8 49.7
// / 48.2 and 89.4 / 87.5); the 128 x 128 block-scaled t64x128 (PART=e, whole / spread) 56.7 / 71.9
// and 57.5 / 68.3 there, 95.1 / 141.0 and 96.3 / 125.9, 5120 x 13824 49.1 / 52.4 and 49.3 / 48.3.
constexpr int64_t kPersistentDeepMidTileM = 64;
// Where a kernel takes the rule for mid tiles above.
enum class MidSpread : uint8_t {
  kShallow, // up to kPersistentMidMaxK inputs, for a launch of one wave or less
  kDeep,    // for two rows of tiles of kPersistentDeepMidTileM tokens or more, at any depth and for
            // the tail after whole waves (8-bit codes on 8-bit activations)
};
// The 8-bit activation kernels' choice (measured as above): kDeep for 8-bit codes.
constexpr MidSpread a8_mid_spread(int code_bits) { return code_bits == 8 ? MidSpread::kDeep : MidSpread::kShallow; }

// `tiles`: output tiles of the launch; `k_tiles`: K tiles of one (`tile_k` inputs each); `sms`:
// multiprocessors; `tile_m`: tokens per tile (0: not known, as for a decode tile); `m_tiles`: rows
// of tiles along M (0: not known); `heavy`: which t128 launches take the exception above; `mid`:
// where the rule for mid tiles holds.
inline StreamKPlan plan_persistent(int64_t tiles, int64_t k_tiles, int64_t tile_k, int sms, int64_t tile_m = 0,
                                   int64_t m_tiles = 0, HeavySpread heavy = HeavySpread::kNone,
                                   MidSpread mid = MidSpread::kShallow) {
  StreamKPlan p;
  p.tiles = tiles;
  p.k_tiles = k_tiles;
  p.unit_tiles = 1;
  p.units = k_tiles;
  const int64_t slots = sms > 0 ? sms : 1;
  const int64_t min_units = (persistent_min_slice_k() + tile_k - 1) / tile_k;
  const int64_t min_tail_units = (persistent_min_tail_k() + tile_k - 1) / tile_k;
  const int64_t full = tiles / slots, rem = tiles % slots;
  const int64_t depth = k_tiles * tile_k;
  const bool mid_tile = tile_m >= kPersistentMidTileM && tile_m < kPersistentHeavyTileM;
  const bool deep_mid = mid == MidSpread::kDeep && mid_tile && tile_m >= kPersistentDeepMidTileM && m_tiles == 2;
  const bool mid_rule = deep_mid || (mid_tile && m_tiles >= 2 && depth <= kPersistentMidMaxK);
  const int64_t slots_per_tile = tile_m >= kPersistentHeavyTileM ? kPersistentHeavySlotsPerTile
                                 : mid_rule                      ? kPersistentMidSlotsPerTile
                                                                 : 1;
  const bool heavy_spread =
      heavy != HeavySpread::kNone && tile_m >= kPersistentHeavyTileM && tile_m < 2 * kPersistentHeavyTileM &&
      ((2 * tiles <= slots && depth >= kPersistentHeavySpreadMinK) ||
       (heavy == HeavySpread::kWide && 3 * tiles <= 2 * slots && depth >= kPersistentHeavySpreadWideMinK));
  const bool crowded = (full == 0 && tiles * slots_per_tile > slots && !heavy_spread) ||
                       (deep_mid && full > 0 && rem * slots_per_tile > slots) ||
                       (tile_m < kPersistentMidTileM && m_tiles == 1 &&
                        rem * kPersistentDecodeBusyDen >= slots * kPersistentDecodeBusyNum);
  const bool spread = stream_k_mode() != 0 && rem != 0 && full < persistent_max_waves() && k_tiles >= 2 &&
                      (stream_k_mode() == 2 || !crowded);
  if (!spread) {
    p.blocks = tiles < slots ? tiles : slots;
    p.dp_waves = p.blocks > 0 ? (tiles + p.blocks - 1) / p.blocks : 0;
    return p;
  }
  p.dp_waves = full;
  p.sk_tiles = rem;
  if (full > 0 && rem * p.units < slots * min_tail_units) { // too little K per block: one more wave spread
    p.dp_waves = full - 1;
    p.sk_tiles = rem + slots;
  }
  if (p.dp_waves == 0) {
    // Only the spread part: as many blocks as keep the minimum inputs each, never fewer than tiles.
    // Where every tile can get two or more blocks, each gets the same number, so that every block
    // owns one segment of one tile: 132 blocks over 32 tiles (t8x256 on 8192 x 8192, m = 1) took
    // 23.4 us where 128 blocks, 4 per tile, took 19.6.
    const int64_t most = min_units > 1 ? p.units / min_units : p.units;
    const int64_t splits = slots / p.sk_tiles < most ? slots / p.sk_tiles : most;
    if (splits >= 2) {
      p.blocks = p.sk_tiles * splits;
    } else {
      const int64_t by_k = p.sk_tiles * p.units / (min_units > 1 ? min_units : 1);
      const int64_t b = by_k < slots ? by_k : slots;
      p.blocks = b > p.sk_tiles ? b : p.sk_tiles;
      // An uneven spread of several rows of tiles (fewer than two blocks a tile, so most blocks end
      // one tile and start the next): in grouped order (scheduler/raster.h) the rows of one column
      // are neighbours, and each row's blocks reach the column's weights at other K at other times,
      // so each row may stream them from memory again, where whole tiles or an even split (every
      // tile's blocks at the same K) share them through L2. Walking the rows in step (row-major, a
      // whole number of blocks a row) shares them the same way. Session 54 saw the per-channel W8A8
      // t64x192 take 1.4-1.9x t128's time on such launches (H100: 7168 x 16384 at m = 128, 97.2 us
      // against 58.6; 3584 x 18944 at m = 256, 112.0 against 57.6) while its even splits ran fastest.
      // H200, session 55 (scripts/gpu_s55.sh, graph us after a read flush, in step / grouped): W4A8
      // e2m1 t64x128 on five deep layers at m = 128 and 256 gained nothing (geometric mean 1.000;
      // 7168 x 16384 46.5 / 46.4 and 79.2 / 79.3, 8192 x 28672 81.5 / 78.3 and 144.2 / 143.9): with
      // half the weight bytes, their second read is not what those launches wait for. The per-channel
      // W8A8 ones gain up to 1.7x (H100, session 56, PART=last of that script, t64x192 / t64x128 in
      // step against grouped: 7168 x 16384 at m = 128 67.6 / 65.5 against 97.3 / 87.2, 3584 x 18944
      // at m = 256 67.7 / 70.4 against 114.2 / 110.5, 5120 x 13824 at 256 66.4 against 115.4, 8192 x
      // 28672 at 128 128.0 against 185.4; the worst loss 8192 x 28672 t64x128 at 128, 121.8 against
      // 115.5); the W4A16 u4g128 t64x128 0.993x in geometric mean on the same layers at m = 96 / 128
      // / 256 (PART=g of scripts/gpu_s56.sh; 3584 x 18944 at 256 73.6 against 76.5, none slower than
      // 1.002x). The W8A8 ones in step still take longer than t128 or the same tiles whole, so the
      // estimates keep charging such launches (humming.h, kRowsApartPenalty8) and the dispatcher
      // seldom takes them; this is for the rest (forced instances, and estimates that miss).
      if (m_tiles >= 2 && p.sk_tiles == tiles && tiles % m_tiles == 0 && lockstep_rows_enabled()) {
        const int64_t stepped = p.blocks / m_tiles * m_tiles;
        if (stepped >= p.sk_tiles) {
          p.blocks = stepped;
          p.step_rows = m_tiles;
        }
      }
    }
  } else {
    p.blocks = slots;
  }
  // Every block would own at most one unit, or more blocks than multiprocessors would be needed
  // (a merged tail of short K): no spread.
  if (p.blocks >= p.sk_tiles * p.units || p.blocks > slots) {
    p.blocks = tiles < slots ? tiles : slots;
    p.dp_waves = (tiles + p.blocks - 1) / p.blocks;
    p.sk_tiles = 0;
    p.step_rows = 0;
  }
  return p;
}

// Calls f(tile, kt_begin, kt_end) for each segment of block b in order: its whole tiles of the
// data-parallel waves (the last wave of a plan without a stream-K part may be partial), then its
// share of the stream-K part. No limit on the count (plan_persistent may give many waves).
template <class F> HUMMING_HD void for_each_segment(const StreamKPlan &p, int64_t b, F f) {
  const int64_t dp_end = p.sk_tiles == 0 ? p.tiles : p.dp_tiles();
  for (int64_t w = 0; w < p.dp_waves; ++w) {
    const int64_t t = w * p.blocks + b;
    if (t < dp_end) f(t, int64_t(0), p.k_tiles);
  }
  if (p.sk_tiles == 0) return;
  int64_t x = p.sk_begin(b);
  const int64_t x_end = p.sk_begin(b + 1);
  while (x < x_end) {
    const int64_t t = x / p.units, first = t * p.units;
    const int64_t u_end = (x_end < first + p.units ? x_end : first + p.units) - first;
    f(p.dp_tiles() + t, (x - first) * p.unit_tiles,
      u_end * p.unit_tiles < p.k_tiles ? u_end * p.unit_tiles : p.k_tiles);
    x = first + u_end;
  }
}

inline size_t streamk_workspace_bytes(const StreamKPlan &p, int64_t rows, int64_t tile_n) {
  if (p.sk_tiles == 0) return 0;
  // No partials when every block owns whole tiles.
  if (p.sk_units() % p.blocks == 0 && (p.sk_units() / p.blocks) % p.units == 0) return 0;
  return static_cast<size_t>(kStreamKCounters) * 4 +
         static_cast<size_t>(2 * p.blocks) * static_cast<size_t>(rows) * static_cast<size_t>(tile_n) * 4;
}

} // namespace humming
