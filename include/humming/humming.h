// humming: the torch-free C++ API of libhumming.
//
// Describe a GEMM with format strings (the grammar of humming_aot.formats), pack a weight for a
// layout, pick a compiled instance from the registry and run it on a CUDA stream, or run the CPU
// reference that reads the same packed layout. Every entry point reports bad input through a
// Status with a sentence that says what is wrong and what is accepted; nothing aborts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "humming/format/dtype.h"

namespace humming {

// ---- status ----------------------------------------------------------------------------------

struct Status {
  bool ok = true;
  std::string message;
  static Status Ok() { return Status{}; }
  static Status Error(std::string msg) { return Status{false, std::move(msg)}; }
  explicit operator bool() const { return ok; }
};

// ---- formats ---------------------------------------------------------------------------------

enum class ZeroKind : int { kNone = 0, kInt = 1, kFloat = 2 };
enum class ActScale : int { kNone = 0, kToken = 1, kGroup = 2 };

struct WeightFormat {
  DType code = dtypes::e4m3;
  int group_k = 0;            // inputs per scale along K; 0 = one scale per output channel
  int group_n = 1;            // output channels per scale (block scales only)
  DType scale = dtypes::none; // id() == 0 when the codes are not scaled
  ZeroKind zero = ZeroKind::kNone;
  bool global_scale = false; // one more fp32 scale for the whole tensor
  bool has_scale() const { return scale.id() != 0; }
};

struct ActFormat {
  DType type = dtypes::bf16;
  ActScale granularity = ActScale::kNone; // quantized activations carry fp32 scales
  int group_k = 0;                        // inputs per scale when granularity is kGroup
};

struct GemmFormat {
  ActFormat act;
  WeightFormat weight;
  DType out = dtypes::bf16;
};

Status parse_dtype(const std::string &text, DType *out);
Status parse_weight_format(const std::string &text, WeightFormat *out);
Status parse_act_format(const std::string &text, ActFormat *out);
Status parse_gemm_format(const std::string &text, GemmFormat *out);
std::string to_string(DType t);
std::string to_string(const WeightFormat &f);
std::string to_string(const ActFormat &f);
std::string to_string(const GemmFormat &f);

// ---- packed layouts --------------------------------------------------------------------------

enum LayoutId : int {
  kLayoutGeneric = 1, // codes as a bit stream per output channel; read by the generic backend
  kLayoutSm80 = 2,    // mma.sync B fragments, one vector load per lane (4- and 8-bit codes)
  kLayoutSm90 = 3,    // WGMMA register A fragments, one vector load per thread (4- and 8-bit codes)
  kLayoutSm90A8 = 4,  // 128-input chunks in the FP8 / s8 WGMMA fragment order, K tile by K tile (4-bit codes)
};

// Logical and padded extents of a weight packed for one layout. Scales and zero points are stored
// [k_groups][n_groups] (K-group major) so that consecutive output channels are adjacent.
struct PackedDims {
  int64_t n = 0, k = 0;                               // logical output channels and inputs
  int64_t n_pad = 0, k_pad = 0;                       // padded to what the layout needs
  int64_t group_k = 0;                                // inputs per scale (k_pad when per channel)
  int64_t group_n = 1;                                // output channels per scale
  int64_t k_groups = 0, n_groups = 0;                 // padded scale grid
  int64_t k_groups_logical = 0, n_groups_logical = 0; // ceil(k / group_k), ceil(n / group_n)
  int64_t code_words = 0;                             // uint32 words of packed codes in all
  int64_t words_per_row = 0;                          // uint32 words of one output channel's codes
};

const char *layout_name(int layout);
bool known_layout(int layout); // one of the LayoutId values
Status packed_dims(int layout, const WeightFormat &fmt, int64_t n, int64_t k, PackedDims *out);

// Bits of one code of type `code` in the packed codes of layout `layout` (the CPU reference and
// tests read codes through it; the type matters where a layout orders a type's bits its own way).
uint32_t packed_code(int layout, const PackedDims &d, DType code, const uint32_t *packed, int64_t n, int64_t k);

// CPU packing: codes are uint8 bit patterns [n][k]; scales/zeros are [n_groups_logical]
// [k_groups_logical] elements of `elem_bytes` bytes (row-major, the logical orientation).
Status pack_codes_cpu(int layout, const WeightFormat &fmt, const PackedDims &d, const uint8_t *codes, uint32_t *packed);
Status unpack_codes_cpu(int layout, const WeightFormat &fmt, const PackedDims &d, const uint32_t *packed,
                        uint8_t *codes);
Status pack_groups_cpu(const PackedDims &d, int elem_bytes, const void *logical, void *packed);
Status unpack_groups_cpu(const PackedDims &d, int elem_bytes, const void *packed, void *logical);
// The same on the GPU (device pointers, enqueued on `stream`, a cudaStream_t).
Status pack_codes_cuda(int layout, const WeightFormat &fmt, const PackedDims &d, const uint8_t *codes, uint32_t *packed,
                       void *stream);
Status unpack_codes_cuda(int layout, const WeightFormat &fmt, const PackedDims &d, const uint32_t *packed,
                         uint8_t *codes, void *stream);
Status pack_groups_cuda(const PackedDims &d, int elem_bytes, const void *logical, void *packed, void *stream);
Status unpack_groups_cuda(const PackedDims &d, int elem_bytes, const void *packed, void *logical, void *stream);

// ---- GEMM problem ----------------------------------------------------------------------------

// out[m][n] = sum_k act(a)[m][k] * w[n][k] (+ bias[n]), fp32 accumulation.
// Bytes at the start of a GemmArgs::workspace that must be zero before its first use.
constexpr size_t kWorkspaceZeroBytes = 65536;

struct GemmArgs {
  GemmFormat fmt;
  int layout = kLayoutGeneric;
  PackedDims dims;         // from packed_dims(layout, fmt.weight, n, k)
  int64_t m = 0;           // rows of a and out
  const void *a = nullptr; // [m][k], row stride lda elements, type fmt.act.type
  int64_t lda = 0;
  const float *a_scales = nullptr; // [m][a_scale_cols] fp32 when the activation is quantized
  int64_t a_scale_cols = 0;
  const uint32_t *codes = nullptr;     // packed codes
  const void *scales = nullptr;        // [k_groups][n_groups], type fmt.weight.scale
  const void *zeros = nullptr;         // same grid; uint8 codes (int) or the scale type (float)
  const float *global_scale = nullptr; // one fp32 value in device (or host, for the CPU) memory
  const void *bias = nullptr;          // [n] of the output type, or null
  void *out = nullptr;                 // [m][n], row stride ldo elements, type fmt.out
  int64_t ldo = 0;
  // A mixture-of-experts (grouped) GEMM when experts > 0: expert e multiplies its rows of a by its
  // own weight and writes those rows of out. Its rows are either contiguous, rows
  // [expert_offsets[e], expert_offsets[e + 1]) (experts + 1 offsets rising from 0 to m), or masked,
  // rows [e * expert_capacity, e * expert_capacity + expert_counts[e]) with m = experts x capacity
  // (a fixed slot per expert, the CUDA-graph-friendly decode layout; the rest of a slot is neither
  // read into any sum nor written). Exactly one of expert_offsets and expert_counts is set; both live
  // in the memory of the device that runs the GEMM (the GPU may have written them: nothing reads
  // them on the host). Expert e's codes, scales and zero points start expert_*_stride bytes after
  // expert e - 1's (the pointers above are expert 0's; set_stacked_experts sets the strides of
  // experts stacked back to back). The grouped instances (scheduler "moe") of the sm90 weight-only
  // and 8-bit activation kernels (the latter read every expert's codes through one tensor map, so
  // they take only back-to-back codes) and the CPU reference run such GEMMs; no bias or global
  // scale yet.
  const int32_t *expert_offsets = nullptr;
  const int32_t *expert_counts = nullptr;
  int64_t expert_capacity = 0;
  int32_t experts = 0;
  int64_t expert_codes_stride = 0;  // bytes
  int64_t expert_scales_stride = 0; // bytes
  int64_t expert_zeros_stride = 0;  // bytes
  // Host-side hint for choosing the instance of a grouped GEMM (select_instance; no kernel reads it):
  // the rows routed to experts in all, before any padding (tokens x top_k), where the caller knows
  // it; -1 where it does not (the producer warp's walk over the experts' tiles is then kept).
  int64_t expert_assignments = -1;
  // Scratch for stream-K (InstanceInfo::workspace_bytes). Its first kWorkspaceZeroBytes bytes (or
  // all of it, if smaller) must be zero before its first use; launches leave them zero again (tile
  // counters back at zero), so one buffer per stream can be zeroed once and reused. The rest needs
  // no initialization. Launches on different streams that may overlap need buffers of their own.
  void *workspace = nullptr;
  size_t workspace_bytes = 0;
  int num_sms = 0; // multiprocessors of the device (schedulers size grids by it)
  // (Last, so that the fields before keep their offsets in the kernels' parameters.) Grouped
  // GEMMs: the experts' gated activation in the epilogue (the gate-up GEMM of a
  // mixture-of-experts layer) where glu >= 0, a MoeActivation kind (scheduler/moe_route.h: 0
  // silu(gate) x up, 1 gpt-oss's clamped SwiGLU with glu_limit and glu_alpha). The weight's n rows
  // are then F = n / 2 gate rows followed by F up rows (n a multiple of 128, so that both halves
  // start on a 64-channel block of layout 3), and out is [m][F] (row stride ldo >= F): gate and up
  // rounded to the output type, each plus its row of glu_bias (fp32 [experts][n], gate first; or
  // null) for the row's expert, then activated in fp32 and rounded once more: the values, bit for
  // bit, of the plain GEMM followed by moe_activation_cuda. Instances that cannot (the CPU reference,
  // tiles without the shared memory for it: InstanceInfo::can_implement says so) refuse it; -1:
  // the plain [m][n] output. Experimental (session 37: not yet run on a GPU); the torch op uses it
  // only in builds with +experimental.
  int32_t glu = -1;
  float glu_limit = 0.0f, glu_alpha = 0.0f;
  const float *glu_bias = nullptr;
  // 1 where the launch just before this GEMM on its stream only began once everything before it
  // had finished (a plain launch, or one of this library's chained kernels, which wait first:
  // quantize_act_cuda's) and nothing since has written the weight (codes and scales): the dense
  // sm90 8-bit activation kernels may then copy their first stages' weights before they wait for
  // that launch (backend/pdl.h), so the copies overlap it; the activations, their scales, the
  // output and the workspace still wait. 0 (the default): nothing is read before the wait.
  // QuantLinear's quantize-and-GEMM call sets it; other kernels ignore it.
  int32_t early_weights = 0;
};

// Checks every field of `args` that does not depend on an instance (extents, strides, null
// pointers, format rules). Run by gemm() and gemm_cpu().
Status validate(const GemmArgs &args);

// Sets a grouped GEMM's expert count and the strides of experts whose packed weights lie back to
// back (codes, scales and zero points each [experts][...], as the torch binding and
// humming_aot.moe.stack_experts stack them); args.fmt and args.dims first.
void set_stacked_experts(GemmArgs &args, int32_t experts);

// ---- registry --------------------------------------------------------------------------------

// One compiled kernel instance. Key fields use DType ids (0 = absent) and -1 for "any value".
struct InstanceInfo {
  const char *name;
  const char *backend;   // "generic", "sm80", ...
  const char *scheduler; // "dense", ...
  const char *archs;     // the real architectures its machine code was built for, e.g. "80;90a"
  uint32_t act_type;
  int act_granularity; // ActScale value, or -1: any
  uint32_t code_type;
  int group_k; // -1: any
  int group_n; // -1: any
  uint32_t scale_type;
  int zero;         // ZeroKind value
  int global_scale; // 0, 1, or -1: either
  uint32_t out_type;
  int layout;
  int tile_m, tile_n, tile_k, stages, threads;
  int smem_bytes;
  Status (*can_implement)(const GemmArgs &args);
  Status (*launch)(const GemmArgs &args, void *stream);
  // Bytes of workspace a launch with these arguments needs (0: none); see GemmArgs::workspace.
  size_t (*workspace_bytes)(const GemmArgs &args);
  // Loads the instance's kernels on the current device and sets their launch attributes, which
  // the first launch would otherwise do (CUDA loads a kernel's module on its first use: about
  // 2-5 ms). Null for instances with nothing to load.
  Status (*prepare)();
};

// The M-range dispatch tables of humming_aot/tables/*.json, compiled in by the generator. A table
// applies to devices whose compute capability is in `ccs` (";"-separated, "" = any) and whose
// multiprocessor count is `sms` (-1 = any); its ranges cover m <= m_max (-1 = no limit) for layers
// of at least n_min output channels (0 = any) and at most k_max inputs (0 = any) and list
// instance-name patterns ('*' and '?' wildcards, "|"-separated) in order of preference. The first
// range that covers a problem wins. In a range with `estimate` set, the instances the table's tile
// costs cover (sm90 weight-only, persistent launches) are chosen by estimated time first.
struct DispatchRange {
  int64_t m_max;
  int64_t n_min;
  int64_t k_max;
  const char *prefer;
  int estimate; // 1: choose by estimated_us among the instances the table's tile costs cover
};
// A table's measured cost of a persistent launch of one tile shape: estimated_us adds c[0], c[1]
// per thousand inputs of the busiest block, c[2] per segment of that block, c[3] when the
// launch has a stream-K part and c[4] per partial that the most split tile's last contributor
// adds up (a table may give four numbers: c[4] is then 0). Which kernels it covers
// (tile_cost_covers): act_bits 0, the weight-only ones (16-bit activations) of any code width (a table key "BMxBNxBK");
// otherwise those of these activation and code widths (a key "a8w4:BMxBNxBK"), which a table gives where their costs
// differ. batch: the stages per batch of the 8-bit activation kernels' tiles ("_b2" in their names and in the key), 1
// for every other tile.
struct TileCost {
  int tile_m, tile_n, tile_k;
  double c[5];
  int act_bits = 0, code_bits = 0, batch = 1;
};
// Whether `cost` applies to `instance` (its tile shape, batch and kernel class match).
bool tile_cost_covers(const TileCost &cost, const InstanceInfo &instance);
struct DispatchTable {
  const char *name;
  const char *ccs;
  int sms;
  const char *name_contains; // matched by the Python dispatcher only; C++ skips such tables
  size_t first_range;
  size_t range_count;
  size_t first_cost; // its TileCost entries (dispatch_cost_at)
  size_t cost_count;
};
size_t dispatch_table_count();
const DispatchTable *dispatch_table_at(size_t i);
const DispatchRange *dispatch_range_at(size_t i);
const TileCost *dispatch_cost_at(size_t i);
// The launch facts the cost model reads, for an instance that the model covers (backend sm90 with
// the dense scheduler: the persistent weight-only and 8-bit activation kernels) on `sms`
// multiprocessors: inputs of the busiest block, its segments, whether the launch has a stream-K
// part, (where `partials` is given) the most partials one tile's last contributor adds up (the
// most blocks that share a tile, less one; 0 without a stream-K part), and (where `rows_apart` is
// given) whether the launch spreads two or more rows of tiles over more blocks than tiles unevenly
// (not a whole number of blocks a tile): in grouped order (scheduler/raster.h) each row's blocks
// read the same weights at other K at other times; walked in step (StreamKPlan::step_rows, the
// default since session 56) they read them together but still took longer than whole tiles
// (kRowsApartPenalty8), so the fact does not depend on the walk. False for other instances.
bool persistent_launch_facts(const InstanceInfo &info, const GemmArgs &args, int sms, int64_t *inputs,
                             int64_t *segments, bool *stream_k, int64_t *partials = nullptr,
                             bool *rows_apart = nullptr);
// What estimated_us adds, as a fraction, to a launch of the 8-bit activation kernels with 8-bit
// codes (W8A8: e4m3 x e4m3, i8 x i8, the 128 x 128 blocks) whose rows are apart
// (persistent_launch_facts): the tile costs, fitted over every launch, put those at about 3.5 us
// per thousand inputs of the busiest block where they took 7.7-8.7 (t64x192, H200, session 18's
// sweep h200-2026-12-02-s18-sweep-a8-overlap-e4m3gc.json), so the estimates took t64x192 on deep
// layers at m = 96 to 256 where t128 was 1.4-1.6x faster (H100, session 54: 7168 x 16384 at
// m = 128, 97.2 us against 58.6). Session 55 (no GPU; the sweeps' own times): with this fraction
// the dispatcher's choices over that sweep are within 1.1 % of the fastest tile (geometric mean;
// worst 1.18x), was 2.8 % (worst 1.61x), and over the i8 x i8 sweep, which did not set it, 1.3 %
// (1.24x), was 3.1 % (1.63x); 27 choices of 400 change in each, none to a slower tile, 1.29x
// faster in geometric mean there (8192 x 28672 at m = 128: t64x192 144.4 us -> t128 89.8;
// 3584 x 3584 at m = 64, four rows of t16: 21.1 -> t32 17.2); the 128 x 128 block sweep 1.6 % ->
// 1.3 %. Any fraction from 0.2 to 2 gives the same (0.1: 1.8 %). The W4A8 kernels (4-bit codes,
// half the weight bytes) do not pay it: a penalty of 0.25 or more on their uneven two-row t32 /
// t64 spreads over K > 8192 made session 55's layout-4 u4g128 sweep's choices worse (0.17 % ->
// 0.25 %), and their rows in step gained nothing (scheduler/streamk.h, StreamKPlan::step_rows).
constexpr double kRowsApartPenalty8 = 0.5;
// `cost`'s estimate of that launch in microseconds (negative for an instance the model does not
// cover).
double estimated_us(const InstanceInfo &info, const GemmArgs &args, int sms, const TileCost &cost);

size_t instance_count();
const InstanceInfo *instance_at(size_t i);
const InstanceInfo *find_instance(const std::string &name);
// Whether `info` was built for this device (`cc` is major * 10 + minor, e.g. 90, 86) and fits its
// shared memory per block.
bool instance_runs_on(const InstanceInfo &info, int cc, std::string *why = nullptr);
// Most dynamic shared memory one block may use on compute capability `cc` (bytes, after opting in),
// or 0 when this build does not know the architecture.
int max_shared_per_block(int cc);
// Whether `info` computes the format of `args` (key fields only).
Status instance_matches(const InstanceInfo &info, const GemmArgs &args);
// The default choice, by the same rules as humming_aot.dispatch.choose: the first compiled table
// that fits the device (cc = major * 10 + minor, `sms` multiprocessors), its range for args.m, the
// first instance matching a preferred pattern among those that compute the format, run on `cc`
// and can implement `args`; with no pattern matching, fast backends before generic, then by name.
// nullptr with a reason when no instance qualifies.
const InstanceInfo *select_instance(const GemmArgs &args, int cc, int sms, std::string *why);
// The same, and no silent slow path: when the choice is an instance of the generic backend (correct
// for every format, far slower than a tensor-core kernel), `note` says so in a sentence naming the
// format, the device and the formats with fast kernels there (empty for a fast choice); with
// HUMMING_STRICT=1 in the environment such a choice is refused instead (nullptr, `why` says so).
const InstanceInfo *select_instance(const GemmArgs &args, int cc, int sms, std::string *why, std::string *note);
// Whether a grouped GEMM of `assignments` rows routed over `experts` experts, n output channels,
// should walk the experts' tiles with one producer thread (instances ending "_lone") rather than
// the producer's first warp, for tiles of tile_m x tile_n on `sms` multiprocessors: true where the
// launch is expected to have at least kLoneTilesPerSm tiles per multiprocessor (the experts a
// uniform routing touches, each in whole tiles of rows, times the channel tiles), scaled down by
// experts / kLoneWalkFullFromExperts below that many experts. A block's lone thread steps through
// every expert once (about 0.13 us each), so the walk's cost grows with the experts and a few
// experts' walk pays off at a few tiles per block. Measured on the H200 (session 19, Qwen3-30B-A3B
// and DeepSeek-V3 experts, u4g128, 1 to 16384 tokens): the lone walk takes 0.77-0.88x the time
// from 11 tiles per multiprocessor up, and 1.07-2x below 7 (a thread walking the experts alone
// adds latency when each block has only a few tiles). Session 28 (same, the 256-channel tiles,
// per GEMM): Mixtral-8x7B (8 experts) took 0.77-0.88x already from 0.6 tiles per multiprocessor
// (4 tokens, down: 65.4 against 75.5 us; 64 tokens, down in t16: 172.0 against 222.5).
constexpr double kLoneTilesPerSm = 8, kLoneWalkFullFromExperts = 128;
bool grouped_walk_alone(int64_t assignments, int32_t experts, int64_t n, int tile_m, int tile_n, int sms);
// Whether a grouped GEMM that would run tiles of tile_m x tile_n should run tiles of the same
// height and twice the channels instead (a "wide" twin: four consumer warpgroups where the tile had
// two, so twice the warps per multiprocessor hide the dequantization's latency): true where the
// launch of tile_m x tile_n tiles is expected (as grouped_walk_alone counts them) to have more than
// kWideFromTilesPerSm tiles per multiprocessor, so that half as many wide tiles still keep most of
// them busy. Measured on the H200 (session 27, u4g128 bf16, t8x128 against t8x256, graph us per
// GEMM): Qwen3-30B-A3B at 1 token (94 and 124 narrow tiles on 132 multiprocessors) 15.0 / 10.6
// against 17.6 / 11.8 (gate-up / down); DeepSeek-V3 at 1 token (256 and 448) 58.8 / 41.6 against
// 43.6 / 30.3; Qwen3 at 8 tokens (about 300 and 400) 49.7 / 36.7 against 42.1 / 30.0.
constexpr double kWideFromTilesPerSm = 1;
bool grouped_tiles_wide(int64_t assignments, int32_t experts, int64_t n, int tile_m, int tile_n, int sms);
// Whether a grouped GEMM that would run tiles of tile_m x tile_n should run tiles of the same height
// and 1.5 times the channels instead (a "mid" twin: three consumer warpgroups where the tile had
// two; where a height has no wide twin, as t80, whose four-consumer t80x256 spills): true where
// the mid tiles' rounds over the multiprocessors (ceil(expected tiles / sms), as grouped_walk_alone
// counts the tiles), each round 1.5 times the channels, come to at most kMidRoundsRatio times the
// tile's rounds. A warpgroup's per-stage and per-tile work that does not grow with its channels is
// then shared by more of them (humming-kernels runs 80 x 256 tiles there); where the tiles make
// few rounds, the mid tile's longer rounds are not made up by fewer of them. Measured on an H100
// (session 61, scripts/gpu_s61.sh PART=c, GEMM alone, random routing, us, t80x192 against the t80x128
// the height rule took; lone walks): W4A8 e2m1gc Qwen3-30B-A3B at 1024 tokens gate-up 105.5 /
// 100.5 (warp walk) against 113.1, down 73.6 against 90.1; gpt-oss-120b at 2048 441.9 / 234.2
// against 496.0 / 258.2; DeepSeek-V3 at 2048 1423.7 / 806.1 against 1492.2 / 990.4; Mixtral-8x7B at
// 256 gate-up 201.7 against 210.1, but its down GEMM (256 narrow tiles on 132 multiprocessors, two
// rounds either way) 116.4 against 92.6, which the rule keeps narrow. W4A16 u4g128 the same way
// (Qwen3 140.2 / 96.2 against 151.4 / 102.3; gpt-oss 613.6 / 320.9 against 659.8 / 347.9; Mixtral's
// down 181.8 against 136.7, kept narrow) but for DeepSeek-V3's gate-up (K = 7168), 2304.3 against
// 2177.2, whose down GEMM gains more (1144.7 against 1238.0); the rule's choice in the next call
// (PART=d) ran that gate-up in 2117.4.
constexpr double kMidRoundsRatio = 1.1;
bool grouped_tiles_mid(int64_t assignments, int32_t experts, int64_t n, int tile_m, int tile_n, int sms);
// Whether a grouped GEMM of `assignments` routed rows over `experts` experts, n_pad x k_pad, should
// run the twin of its tile that splits each tile's K into shares (instances ending "_ks",
// scheduler/moe.h grouped_k_shares) for tiles of tile_m x tile_n x tile_k on `sms` multiprocessors:
// true where the launch's bound on its tiles (expert_tiles_at_most, with the routed rows as its
// rows) leaves room for at least kSplitFromShares shares of each. A decode launch of few experts
// on a narrow, deep layer otherwise runs on a few blocks, each drawing one tile's weight alone.
// Measured on an H100 (session 37, u4g128 bf16, graph us per GEMM, the 256-channel split twin
// against the default choice): Mixtral-8x7B's down GEMM at 1 token (2 experts x 16 tiles, 4
// shares) 31.6 against 57.0; at 2 tokens (a bound of 4 experts: 2 shares) 44.0 against 44.6, and
// at 2 shares elsewhere no gain (Qwen3-30B-A3B at 1 token 15.8 / 11.3 against 14.4 / 9.9,
// gpt-oss-120b's down 17.9 against 17.4), so the split waits for 4.
constexpr int64_t kSplitFromShares = 4;
bool grouped_split_k(int64_t assignments, int32_t experts, int64_t n_pad, int64_t k_pad, int tile_m, int tile_n,
                     int tile_k, int sms);
// The row tiles of height tile_m one expert of a grouped GEMM is expected to run when its rows are
// Poisson with mean mean_rows (a uniform routing's counts, which spread about sqrt(mean_rows) around
// it): E[ceil(X / tile_m)]; 0 where mean_rows is not positive; tile_m must be positive. The grouped
// tile height is the one of least expected work, these tiles times one tile's cost: the device
// table's cost per input of the dense tile of that shape (TileCost c1, the time of one tile in a
// full launch; the grouped kernels are the dense ones walking experts), or where the table has none
// for a height, for every height, tile_m + kGroupedRowTileFixedRows rows (what a tile costs beyond
// its rows: the weight's reads and dequantization, which do not shrink with its height). Why not the
// lowest tile that holds the mean: about half the experts then get a second, mostly empty row tile
// that costs a whole tile's dequantization. Measured on an H100 (session 29, scripts/bench_moe.py
// --impls humming-aot-heights: every tile height near the mean, u4g128 bf16, Qwen3-30B-A3B,
// DeepSeek-V3, Mixtral-8x7B and gpt-oss-120b at 8 to 2048 tokens, the 31 points with at most 256
// rows per expert; tools/fit_grouped_heights.py; benchmarks/results/h100/tuning/
// h100-2026-12-05-s29-README.md): with the H200 table's tile costs the pick is 1.006 of the
// fastest height in geometric mean by the sum of the two GEMMs' graph times, the fastest at 30
// points (DeepSeek-V3 at 2048 tokens: t128, 1.21x t64's time; by the layer's one replay t128 is
// the faster), 1.002 by the layer's time (worst 1.04); rows plus 40 to 56 give 1.004 (worst 1.06:
// t64 at 64 rows per expert, where t128 is faster); the lowest tile that holds the mean, the rule
// before, 1.066 (worst 1.43x: Mixtral-8x7B at 64 tokens, t16 against t32). The grouped-only
// heights 24, 48 and 80 (session 40), which no dense tile shares, take the line between the table's
// costs of the heights either side; with them the rule's pick took 0.92x the time of its pick
// without them in geometric mean over 6 points (H100, u4g128 bf16: Qwen3-30B-A3B at 1024 tokens t80
// 250.6 against t128 302.5 us, Mixtral-8x7B at 256 t80 432.1 against 545.7; at most 1.4 % slower).
// So does 144 (session 59; dev tiles since session 60); on a side where the build has no grouped height with
// a table cost, the table's nearest height of that kernel class and tile width (t144 W4A8 without
// the experimental t192: the dense t192's cost).
double expected_row_tiles(double mean_rows, int tile_m);
constexpr double kGroupedRowTileFixedRows = 48;
// The default instance of a grouped GEMM whose experts hold about rows_per_expert rows each (host
// knowledge, e.g. tokens x top_k / E): up to kGroupedLowestTileTo rows per expert, the grouped
// instance of the tile height of least expected work (expected_row_tiles; the lower height where
// two cost the same), the narrowest channel tile of that height (the first in name order); above,
// where K is at least kGroupedTwoBlockMinK, the tallest tile of two 64-channel blocks a warpgroup
// (t176x256x64, the tile humming-kernels runs there), its lone walk where built, taken as it is;
// else select_instance's choice for a dense GEMM of that many rows among the grouped instances.
// Measured on an H100 (session 65, scripts/moe_spill.py --w4a16, random routing, GEMM alone, graph
// us, both instance orders; benchmarks/results/h100/tuning/h100-2026-12-08-s65-README.md), 1024
// rows per expert, t176x256x64 lone / t128x128x128 lone / t256x128x64 lone (the dense choice on
// Mixtral): Mixtral-8x7B at 4096 tokens gate-up (K = 4096) 2580 / 2707 / 2998, down (K = 14336)
// 1269 / 1371 / 1376; Qwen3-30B-A3B at 16384 gate-up (K = 2048) 1252 / 1278 / 1431, down (K = 768)
// 795 / 742 / 988: a shallow K pays the two-block tile's longer epilogue (2 x 88 sums a thread)
// over too few stages. (Session 63: the grouped t256 lost to t128 at every point past 256 rows.)
// Then, below it, the variant this call's routed rows ask for (grouped_pick, from
// args.expert_assignments: the wide twin, the lone walk). The dense estimates see one layer's tiles
// fill the GPU and pick lower tiles there, where a grouped launch has every touched expert's tiles:
// measured on the H200 (session 19, u4g128 bf16, gate-up + down, graph us), the lowest holding tile
// took 0.83x (Qwen3-30B-A3B, 1024 tokens: 64 rows per expert), 0.85x (4096: 256 rows) and 0.86x
// (DeepSeek-V3, 4096 tokens: 128 rows) the time of the dense choice, and 1.015x at 32 rows
// (DeepSeek-V3, 1024 tokens); at 512 and 1024 rows it was 1.045x and 0.96x, so the dense choice
// stays there; up to 16 rows both choices were the same tile (the dense tables prefer 256-channel
// decode tiles for wide layers, which for grouped GEMMs grouped_pick chooses from the routed rows
// instead).
constexpr int64_t kGroupedLowestTileTo = 256;
// The padded K from which a grouped GEMM past kGroupedLowestTileTo rows per expert takes the
// tallest two-block tile (select_grouped_instance): 2048 and deeper gained, 768 lost (session 65).
constexpr int64_t kGroupedTwoBlockMinK = 1024;
// The twin of grouped instance `grouped` whose producer walks the experts' tiles alone (its name +
// "_lone"), where the build has it and it can run `args` on `cc`; nullptr otherwise.
const InstanceInfo *lone_twin(const InstanceInfo &grouped, const GemmArgs &args, int cc);
// The twin of grouped instance `grouped` with twice its tile's channels (the same kernel, format,
// tile height, depth and walk), where the build has it and it can run `args` on `cc`; else nullptr.
const InstanceInfo *wide_twin(const InstanceInfo &grouped, const GemmArgs &args, int cc);
// The twin of grouped instance `grouped` with 1.5 times its tile's channels (three consumer
// warpgroups where it has two; the same kernel, format, height and walk), where the build has it
// and it can run `args` on `cc`; else nullptr.
const InstanceInfo *mid_twin(const InstanceInfo &grouped, const GemmArgs &args, int cc);
// The twin of grouped instance `grouped` that splits its tiles' K into shares (its name + "_ks"),
// where the build has it and it can run `args` on `cc`; nullptr otherwise.
const InstanceInfo *split_twin(const InstanceInfo &grouped, const GemmArgs &args, int cc);
// The instances a grouped GEMM whose tile is `base` may run, found once per choice (registry
// searches) so that each call picks among them with plain comparisons (grouped_pick): the tile and
// its lone twin, its wide twin (grouped_tiles_wide) and that one's lone twin, its mid twin
// (grouped_tiles_mid) and that one's lone twin, and the K-split twins of the tile and of the wide
// one (grouped_split_k); nullptr where the build lacks one.
struct GroupedVariants {
  const InstanceInfo *base = nullptr, *lone = nullptr, *wide = nullptr, *wide_lone = nullptr;
  const InstanceInfo *mid = nullptr, *mid_lone = nullptr;
  const InstanceInfo *split = nullptr, *wide_split = nullptr;
};
GroupedVariants grouped_variants(const InstanceInfo &base, const GemmArgs &args, int cc);
// The variant for this call's routed rows (args.expert_assignments; where it is not positive the
// base tile with its producer warp's walk): the K-split twin (the wide tile's where built: fewer
// tiles, more shares) where grouped_split_k asks for it; else the wide tile where
// grouped_tiles_wide asks for it, or else the mid tile where grouped_tiles_mid asks for it, then
// that tile's lone walk where grouped_walk_alone asks for it.
const InstanceInfo *grouped_pick(const GroupedVariants &variants, const GemmArgs &args, int sms);
const InstanceInfo *select_grouped_instance(const GemmArgs &args, int64_t rows_per_expert, int cc, int sms,
                                            std::string *why);
// The note select_instance gives for `chosen` (empty unless it belongs to the generic backend).
std::string slow_path_note(const InstanceInfo &chosen, const GemmArgs &args, int cc);

// Loads `instance`'s kernels on the current CUDA device (InstanceInfo::prepare), so that its first
// launch costs no module load; an error where there is no usable device or it cannot run there.
Status prepare_instance(const InstanceInfo &instance);

// Validates, checks the instance against the arguments, launches on `stream` (a cudaStream_t).
Status gemm(const GemmArgs &args, const InstanceInfo &instance, void *stream);
// The CPU reference: reads the packed layout, fp32 accumulation, host pointers.
Status gemm_cpu(const GemmArgs &args);

// ---- activation quantization -----------------------------------------------------------------

// codes[m][k] = encode(x / scale), scale = amax / max(type) per token or per K group (1 where
// amax is 0); x is f32, f16 or bf16 with row stride ldx. scales is [m][ceil(k / group)] fp32.
Status quantize_act_cpu(const ActFormat &fmt, DType x_type, const void *x, int64_t m, int64_t k, int64_t ldx,
                        void *codes, float *scales);
Status quantize_act_cuda(const ActFormat &fmt, DType x_type, const void *x, int64_t m, int64_t k, int64_t ldx,
                         void *codes, float *scales, void *stream);

// ---- mixture-of-experts routing ------------------------------------------------------------------
// T tokens routed to top_k of E experts each; assignment a = t * top_k + j is token t's j-th choice.
// Each step has a CPU reference and a CUDA implementation (one stream, no host synchronization, no
// allocation: CUDA-graph capturable) that agree: the same experts and rows, and bitwise the same
// combine; the top-k weights agree to fp32 rounding (the two expf differ in the last bit).

// Top-k selection from router logits [tokens][experts] (row stride ld elements; f32, f16 or bf16):
// scores are the softmax over the experts or the sigmoid of each logit; experts rank by score
// (plus `bias`, if given, for the choice only), ties to the lower id; weights [tokens][top_k] are
// the chosen scores (divided by their sum with renormalize, then times `scaling`), ids
// [tokens][top_k] best first. With n_group > 0, DeepSeek-V3's group-limited choice (noaux_tc):
// the experts form n_group equal groups, each ranked by the sum of its two best choice values
// (score plus bias; moe_route::group_choice), ties to the lower group; experts outside the
// topk_group best groups count 0 for the choice. The CUDA version takes groups up to 256 experts
// and 32 groups.
struct MoeTopk {
  const void *logits = nullptr;
  DType logits_type;
  int64_t tokens = 0, ld = 0;
  int32_t experts = 0, top_k = 0;
  bool sigmoid = false, renormalize = true;
  const float *bias = nullptr;         // [experts] or null
  int32_t n_group = 0, topk_group = 0; // group-limited choice where n_group > 0
  float scaling = 1.0f;                // the weights' factor (DeepSeek's routed_scaling_factor)
  float *weights = nullptr;
  int32_t *ids = nullptr;
};
Status moe_topk_cpu(const MoeTopk &args);
Status moe_topk_cuda(const MoeTopk &args, void *stream);
// The group-limited choice's arguments as both versions take them (n_group 0, or dividing the
// experts with topk_group in [1, n_group]); the CUDA version adds its limits.
Status moe_topk_check_groups(const MoeTopk &args);

// Groups the assignments ids [assignments] (expert ids) by expert into blocks of block_m rows;
// within an expert, assignments keep their order. Outputs (capacity = align_capacity, the most
// rows any routing needs): sorted_ids [capacity] (the assignment of each row; `assignments` in
// padding rows), block_expert [capacity / block_m] (-1 past the rows in use), num_padded [1] (rows
// in use), positions [assignments] (the row of each assignment), counts [experts], offsets
// [experts + 1] (each expert's first row). Ids outside [0, experts) count as the nearest expert
// (callers check them where they can). The CUDA version needs moe_align_workspace_bytes of
// scratch, whose contents need no initialization.
struct MoeAlign {
  const int32_t *ids = nullptr;
  int64_t assignments = 0;
  int32_t experts = 0, block_m = 1;
  int32_t *sorted_ids = nullptr, *block_expert = nullptr, *num_padded = nullptr, *positions = nullptr;
  int32_t *counts = nullptr, *offsets = nullptr;
  void *workspace = nullptr;
  size_t workspace_bytes = 0;
};
size_t moe_align_workspace_bytes(int64_t assignments, int32_t experts);
Status moe_align_cpu(const MoeAlign &args);
Status moe_align_cuda(const MoeAlign &args, void *stream);

// out[r] = x[sorted_ids[r] / top_k] for the rows of an alignment (capacity rows of `hidden`
// elements of `type`, x's row stride ldx), zeros in padding rows (sorted_ids[r] >= assignments).
Status moe_permute_cpu(DType type, const void *x, int64_t hidden, int64_t ldx, const int32_t *sorted_ids,
                       int64_t capacity, int64_t assignments, int32_t top_k, void *out);
Status moe_permute_cuda(DType type, const void *x, int64_t hidden, int64_t ldx, const int32_t *sorted_ids,
                        int64_t capacity, int64_t assignments, int32_t top_k, void *out, void *stream);

// quantize_act of moe_permute's rows in one pass: codes [capacity][k] and scales [capacity][ceil(k /
// group)] equal, bit for bit, to quantize_act of the rows moe_permute would write (token
// sorted_ids[r] / top_k of x, f32, f16 or bf16 with row stride ldx; zeros in padding rows, which
// get scale 1 and zero codes), without those 16-bit rows: the rows an expert GEMM with 8-bit
// activations reads, from the tokens' activations.
Status moe_permute_quantize_cpu(const ActFormat &fmt, DType x_type, const void *x, int64_t k, int64_t ldx,
                                const int32_t *sorted_ids, int64_t capacity, int64_t assignments, int32_t top_k,
                                void *codes, float *scales);
Status moe_permute_quantize_cuda(const ActFormat &fmt, DType x_type, const void *x, int64_t k, int64_t ldx,
                                 const int32_t *sorted_ids, int64_t capacity, int64_t assignments, int32_t top_k,
                                 void *codes, float *scales, void *stream);

// out[t] = sum over j of weights[t][j] x y[positions[t * top_k + j]], in fp32, j = 0 first (one
// product, then one add per term: no fused multiply-add), rounded once to `type` (f32, f16 or
// bf16; y [rows][hidden] and out contiguous). With a bias [experts][hidden] (fp32) and the
// assignments' experts ids [tokens x top_k], each term is weights[t][j] x (y[...] + bias[ids[...]])
// (the add, then the product: the experts' output bias of the down GEMM). A position outside
// [0, rows) or an id outside [0, experts) is an error on the CPU; the GPU, which cannot report
// them, adds nothing for such a position and takes the nearest expert for such an id (it never
// reads outside y or the bias).
Status moe_combine_cpu(DType type, const void *y, int64_t rows, int64_t hidden, const int32_t *positions,
                       const float *weights, int64_t tokens, int32_t top_k, void *out, const float *bias = nullptr,
                       const int32_t *ids = nullptr, int32_t experts = 0);
Status moe_combine_cuda(DType type, const void *y, int64_t rows, int64_t hidden, const int32_t *positions,
                        const float *weights, int64_t tokens, int32_t top_k, void *out, void *stream,
                        const float *bias = nullptr, const int32_t *ids = nullptr, int32_t experts = 0);

// The experts' activation between their GEMMs: out[r][c] = activate(gate, up) (scheduler/moe_route.h,
// kind silu or swiglu-oai with its limit and alpha) of gate = h[r][c] + bias[e][c] and up =
// h[r][inter + c] + bias[e][inter + c], in fp32, rounded once to out_type; h [rows][2 x inter] of
// h_type (rows ldh elements apart), out [rows][inter] contiguous. e is row r's expert, from
// offsets [experts + 1] (expert_of_row) where given, else 0; bias [experts][2 x inter] fp32 or
// null (no bias). One pass instead of the conversions, slices and elementwise ops the same
// formula takes in torch.
struct MoeActivation {
  DType h_type, out_type;
  const void *h = nullptr;
  int64_t rows = 0, inter = 0, ldh = 0;
  const float *bias = nullptr;
  const int32_t *offsets = nullptr;
  int32_t experts = 1;
  int32_t kind = 0;
  float limit = 0.0f, alpha = 0.0f;
  void *out = nullptr;
};
Status moe_activation_cpu(const MoeActivation &args);
Status moe_activation_cuda(const MoeActivation &args, void *stream);

// ---- build facts -----------------------------------------------------------------------------

const char *version();
const char *build_archs();   // e.g. "80;90a"
const char *build_profile(); // ci | dev | full
int cuda_version();          // CUDART_VERSION the library was built with
// Compute capability of the current device (major * 10 + minor), or -1 with a reason.
int current_device_cc(std::string *why);
int current_device_sms();

} // namespace humming
