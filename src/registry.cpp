// Registry access, argument validation, the C++ default instance choice, and launch.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "humming/humming.h"
#include "humming/scheduler/moe.h"
#include "humming/scheduler/streamk.h"

namespace humming {

// Written by tools/gen_instances.py into the build tree (registry.cpp there).
namespace generated {
extern const InstanceInfo kInstances[];
extern const size_t kInstanceCount;
extern const char kBuildArchs[];
extern const char kBuildProfile[];
extern const DispatchTable kDispatchTables[];
extern const size_t kDispatchTableCount;
extern const DispatchRange kDispatchRanges[];
extern const size_t kDispatchRangeCount;
extern const TileCost kTileCosts[];
extern const size_t kTileCostCount;
} // namespace generated

#ifndef HUMMING_VERSION
#define HUMMING_VERSION "0.0.0"
#endif

const char *version() { return HUMMING_VERSION; }
const char *build_archs() { return generated::kBuildArchs; }
const char *build_profile() { return generated::kBuildProfile; }
int cuda_version() { return CUDART_VERSION; }

size_t instance_count() { return generated::kInstanceCount; }
const InstanceInfo *instance_at(size_t i) {
  return i < generated::kInstanceCount ? &generated::kInstances[i] : nullptr;
}

const InstanceInfo *find_instance(const std::string &name) {
  for (size_t i = 0; i < generated::kInstanceCount; ++i)
    if (name == generated::kInstances[i].name) return &generated::kInstances[i];
  return nullptr;
}

int current_device_cc(std::string *why) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  int major = 0, minor = 0;
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (e != cudaSuccess) {
    if (why) *why = std::string("no usable CUDA device: ") + cudaGetErrorString(e);
    cudaGetLastError(); // clear the sticky-free error so later calls start clean
    return -1;
  }
  return major * 10 + minor;
}

int current_device_sms() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return sms;
}

namespace {

// One item of a ";"-separated list of numbers with an optional letter suffix ("80;90a"), parsed in
// place (these lists are read on every launch, so nothing is allocated). Advances `p` past the
// item; false when the item has no digits.
bool next_list_item(const char *&p, int *value, char *suffix) {
  *value = 0;
  bool digits = false;
  while (*p >= '0' && *p <= '9') *value = *value * 10 + (*p++ - '0'), digits = true;
  *suffix = (*p != 0 && *p != ';') ? *p : 0;
  while (*p != 0 && *p != ';') ++p;
  if (*p == ';') ++p;
  return digits;
}

std::string sm_list(const char *archs) {
  std::string out, item;
  std::stringstream ss(archs);
  while (std::getline(ss, item, ';'))
    if (!item.empty()) out += (out.empty() ? "sm_" : ", sm_") + item;
  return out.empty() ? "no architectures" : out;
}

} // namespace

int max_shared_per_block(int cc) {
  switch (cc) {
  case 80:
  case 87:
    return 166912; // 163 KiB
  case 86:
  case 89:
  case 120:
  case 121:
    return 101376; // 99 KiB
  case 90:
  case 100:
  case 103:
    return 232448; // 227 KiB
  case 75:
    return 65536;
  case 70:
  case 72:
    return 98304;
  default:
    return 0; // not known here: the launch reports it if the device refuses
  }
}

bool instance_runs_on(const InstanceInfo &info, int cc, std::string *why) {
  // A block that needs more shared memory than the device gives one block cannot launch there.
  const int limit = max_shared_per_block(cc);
  if (limit > 0 && info.smem_bytes > limit) {
    if (why)
      *why = std::string(info.name) + " needs " + std::to_string(info.smem_bytes) +
             " bytes of shared memory per block; sm_" + std::to_string(cc) + " gives a block at most " +
             std::to_string(limit);
    return false;
  }
  // Machine code for sm_XY runs on devices of the same major version and minor >= Y; code for an
  // arch-specific target (90a, 100f) runs only on exactly that compute capability.
  for (const char *p = info.archs; *p != 0;) {
    int arch;
    char suffix;
    if (!next_list_item(p, &arch, &suffix)) continue;
    const bool specific = suffix == 'a' || suffix == 'f';
    if (specific ? arch == cc : (arch / 10 == cc / 10 && arch % 10 <= cc % 10)) return true;
  }
  if (why)
    *why = std::string(info.name) + " has machine code for " + sm_list(info.archs) + "; this device is sm_" +
           std::to_string(cc);
  return false;
}

namespace {

// Bytes of one expert's packed codes, scales and zero points (none: 0).
struct ExpertBytes {
  int64_t codes, scales, zeros;
};
ExpertBytes expert_bytes(const GemmArgs &a) {
  const WeightFormat &w = a.fmt.weight;
  const int64_t groups = a.dims.k_groups * a.dims.n_groups;
  return {a.dims.n_pad * a.dims.words_per_row * 4, w.has_scale() ? groups * w.scale.storage_bytes() : 0,
          w.zero == ZeroKind::kNone ? 0 : groups * (w.zero == ZeroKind::kInt ? 1 : w.scale.storage_bytes())};
}

} // namespace

void set_stacked_experts(GemmArgs &args, int32_t experts) {
  const ExpertBytes b = expert_bytes(args);
  args.experts = experts;
  args.expert_codes_stride = b.codes;
  args.expert_scales_stride = b.scales;
  args.expert_zeros_stride = b.zeros;
}

Status validate(const GemmArgs &a) {
  const WeightFormat &w = a.fmt.weight;
  if (a.m < 0) return Status::Error("m must be >= 0, got " + std::to_string(a.m));
  if (a.dims.n <= 0 || a.dims.k <= 0 || a.dims.words_per_row <= 0)
    return Status::Error("the packed weight extents are not set (call packed_dims first)");
  PackedDims expect;
  Status st = packed_dims(a.layout, w, a.dims.n, a.dims.k, &expect);
  if (!st) return st;
  if (expect.n_pad != a.dims.n_pad || expect.k_pad != a.dims.k_pad || expect.words_per_row != a.dims.words_per_row ||
      expect.k_groups != a.dims.k_groups || expect.n_groups != a.dims.n_groups)
    return Status::Error("the packed extents do not match weight format " + to_string(w) +
                         " with n=" + std::to_string(a.dims.n) + ", k=" + std::to_string(a.dims.k) + " in layout " +
                         layout_name(a.layout));
  if (a.m > 0 && a.a == nullptr) return Status::Error("the activation pointer is null");
  if (a.m > 0 && a.out == nullptr) return Status::Error("the output pointer is null");
  if (a.lda < a.dims.k)
    return Status::Error("activation row stride " + std::to_string(a.lda) + " is below k=" + std::to_string(a.dims.k));
  const int64_t out_cols = a.glu >= 0 ? a.dims.n / 2 : a.dims.n;
  if (a.ldo < out_cols)
    return Status::Error("output row stride " + std::to_string(a.ldo) + " is below the " + std::to_string(out_cols) +
                         " output columns");
  if (a.glu >= 0) {
    if (a.experts <= 0) return Status::Error("the gated activation epilogue (glu) runs in grouped (MoE) GEMMs only");
    if (a.glu > 1)
      return Status::Error("glu must be -1 (none), 0 (silu) or 1 (swiglu-oai), got " + std::to_string(a.glu));
    if (a.dims.n % 128 != 0)
      return Status::Error("the gated activation epilogue needs n = 2F with F a multiple of 64 (the gate and up "
                           "halves start on 64-channel blocks), got n=" +
                           std::to_string(a.dims.n));
  }
  if (a.codes == nullptr) return Status::Error("the packed codes pointer is null");
  if (w.has_scale() && a.scales == nullptr) return Status::Error("weight format " + to_string(w) + " needs scales");
  if (!w.has_scale() && a.scales != nullptr) return Status::Error("weight format " + to_string(w) + " takes no scales");
  if ((w.zero != ZeroKind::kNone) != (a.zeros != nullptr))
    return Status::Error(w.zero != ZeroKind::kNone ? "weight format " + to_string(w) + " needs zero points"
                                                   : "weight format " + to_string(w) + " takes no zero points");
  if (w.global_scale != (a.global_scale != nullptr))
    return Status::Error(w.global_scale ? "weight format " + to_string(w) + " needs a global scale"
                                        : "weight format " + to_string(w) + " takes no global scale");
  if (a.experts < 0) return Status::Error("the expert count must be >= 0, got " + std::to_string(a.experts));
  if (a.experts > 0) {
    if ((a.expert_offsets == nullptr) == (a.expert_counts == nullptr))
      return Status::Error("a grouped (MoE) GEMM takes either its expert row offsets (contiguous rows) or its "
                           "expert row counts (masked rows), not both or neither");
    if (a.expert_counts != nullptr && (a.expert_capacity <= 0 || a.m != a.experts * a.expert_capacity))
      return Status::Error(
          "a masked grouped (MoE) GEMM needs m = experts x capacity rows, got m=" + std::to_string(a.m) + ", " +
          std::to_string(a.experts) + " experts and capacity " + std::to_string(a.expert_capacity));
    if (a.bias != nullptr || a.global_scale != nullptr)
      return Status::Error("grouped (MoE) GEMMs take no bias or global scale yet");
    const auto [codes, scales, zeros] = expert_bytes(a);
    if (a.expert_codes_stride < codes || a.expert_scales_stride < scales || a.expert_zeros_stride < zeros)
      return Status::Error("the experts' weights overlap: per expert the codes take " + std::to_string(codes) +
                           " bytes, the scales " + std::to_string(scales) + " and the zero points " +
                           std::to_string(zeros) + "; the strides are " + std::to_string(a.expert_codes_stride) + ", " +
                           std::to_string(a.expert_scales_stride) + " and " + std::to_string(a.expert_zeros_stride));
  }
  const ActFormat &act = a.fmt.act;
  if (act.granularity == ActScale::kNone) {
    if (a.a_scales != nullptr) return Status::Error("activation format " + to_string(act) + " takes no scales");
  } else {
    const int64_t group = act.granularity == ActScale::kGroup ? act.group_k : a.dims.k;
    const int64_t cols = (a.dims.k + group - 1) / group;
    if (a.a_scales == nullptr && a.m > 0) return Status::Error("activation format " + to_string(act) + " needs scales");
    if (a.a_scale_cols != cols)
      return Status::Error("activation scales have " + std::to_string(a.a_scale_cols) + " columns; format " +
                           to_string(act) + " with k=" + std::to_string(a.dims.k) + " needs " + std::to_string(cols));
  }
  return Status::Ok();
}

namespace {

// Whether an instance runs grouped (MoE) GEMMs (and only those): its scheduler is "moe". (A
// plain comparison: select_instance asks it of every instance on every call.)
bool runs_experts(const InstanceInfo &i) { return std::strcmp(i.scheduler, "moe") == 0; }

// instance_matches without the message: select_instance tests every instance on every call.
bool instance_fits(const InstanceInfo &i, const GemmArgs &a) {
  const GemmFormat &f = a.fmt;
  return i.act_type == f.act.type.id() &&
         (i.act_granularity < 0 || i.act_granularity == static_cast<int>(f.act.granularity)) &&
         i.code_type == f.weight.code.id() && (i.group_k < 0 || i.group_k == f.weight.group_k) &&
         (i.group_n < 0 || i.group_n == f.weight.group_n) && i.scale_type == f.weight.scale.id() &&
         i.zero == static_cast<int>(f.weight.zero) &&
         (i.global_scale < 0 || i.global_scale == static_cast<int>(f.weight.global_scale)) &&
         i.out_type == f.out.id() && i.layout == a.layout && (a.experts > 0) == runs_experts(i);
}

} // namespace

Status instance_matches(const InstanceInfo &i, const GemmArgs &a) {
  if (instance_fits(i, a)) return Status::Ok();
  const GemmFormat &f = a.fmt;
  std::string diff;
  if (i.act_type != f.act.type.id())
    diff = "activation type " + to_string(f.act.type);
  else if (i.act_granularity >= 0 && i.act_granularity != static_cast<int>(f.act.granularity))
    diff = "activation scale granularity";
  else if (i.code_type != f.weight.code.id())
    diff = "weight code type " + to_string(f.weight.code);
  else if (i.group_k >= 0 && i.group_k != f.weight.group_k)
    diff = "K group size " + std::to_string(f.weight.group_k);
  else if (i.group_n >= 0 && i.group_n != f.weight.group_n)
    diff = "N group size " + std::to_string(f.weight.group_n);
  else if (i.scale_type != f.weight.scale.id())
    diff = "scale type " + to_string(f.weight.scale);
  else if (i.zero != static_cast<int>(f.weight.zero))
    diff = "zero point kind";
  else if (i.global_scale >= 0 && i.global_scale != static_cast<int>(f.weight.global_scale))
    diff = "global scale";
  else if (i.out_type != f.out.id())
    diff = "output type " + to_string(f.out);
  else if (i.layout != a.layout)
    diff = std::string("weight layout: the weight is packed for layout ") + std::to_string(a.layout) + " (" +
           layout_name(a.layout) + "), the instance reads layout " + std::to_string(i.layout) + " (" +
           layout_name(i.layout) + ")";
  else if (a.experts > 0 && !runs_experts(i))
    diff = "it runs dense GEMMs; grouped (MoE) GEMMs run on the grouped instances (scheduler moe)";
  else if (a.experts == 0 && runs_experts(i))
    diff = "it runs grouped (MoE) GEMMs only (scheduler moe: humming.moe_gemm), not dense ones";
  if (diff.empty()) return Status::Ok();
  return Status::Error(std::string("instance ") + i.name + " does not compute " + to_string(f) + " (" + diff + ")");
}

size_t dispatch_table_count() { return generated::kDispatchTableCount; }
const DispatchTable *dispatch_table_at(size_t i) {
  return i < generated::kDispatchTableCount ? &generated::kDispatchTables[i] : nullptr;
}
const DispatchRange *dispatch_range_at(size_t i) {
  return i < generated::kDispatchRangeCount ? &generated::kDispatchRanges[i] : nullptr;
}
const TileCost *dispatch_cost_at(size_t i) {
  return i < generated::kTileCostCount ? &generated::kTileCosts[i] : nullptr;
}

bool persistent_launch_facts(const InstanceInfo &info, const GemmArgs &args, int sms, int64_t *inputs,
                             int64_t *segments, bool *stream_k, int64_t *partials, bool *rows_apart) {
  const int act_bits = static_cast<int>(DType::from_id(info.act_type).bits);
  if (std::strcmp(info.backend, "sm90") != 0 || std::strcmp(info.scheduler, "dense") != 0 ||
      (act_bits != 16 && act_bits != 8))
    return false;
  // The plan kernel/sm90_dense.cuh and sm90_a8_dense.cuh launch (Kernel::plan): persistent,
  // stream-K for the tail, over whole K tiles (the weight-only kernels' padded K is a multiple of
  // theirs; the 8-bit ones round up), spreading few t128 tiles over a deep K as HeavySpread says:
  // kWide for the weight-only kernels (16-bit activations), a8_heavy_spread for the 8-bit ones
  // (kHalf for W4A8), and mid tiles as MidSpread says (a8_mid_spread: kDeep for W8A8). The a8w4
  // tile costs are fitted to sweeps of those plans (session 55, h200-2026-12-07-s55-sweep-w4a8-*-l4.json).
  const int64_t m_tiles = (args.m + info.tile_m - 1) / info.tile_m;
  const int64_t n_tiles = (args.dims.n_pad + info.tile_n - 1) / info.tile_n;
  const int64_t k_tiles = (args.dims.k_pad + info.tile_k - 1) / info.tile_k;
  const HeavySpread heavy =
      act_bits == 16 ? HeavySpread::kWide
                     : a8_heavy_spread(static_cast<int>(args.fmt.weight.code.bits), args.fmt.act.type == dtypes::i8);
  const MidSpread mid =
      act_bits == 16 ? MidSpread::kShallow : a8_mid_spread(static_cast<int>(args.fmt.weight.code.bits));
  const StreamKPlan p = plan_persistent(m_tiles * n_tiles, k_tiles, info.tile_k, sms, info.tile_m, m_tiles, heavy, mid);
  int64_t most = 0, segs = 0;
  for (int64_t b = 0; b < p.blocks; ++b) {
    int64_t len = 0, count = 0;
    for_each_segment(p, b, [&](int64_t, int64_t kb, int64_t ke) {
      len += ke - kb;
      ++count;
    });
    if (len > most) most = len, segs = count;
  }
  *inputs = most * info.tile_k;
  *segments = segs;
  *stream_k = p.sk_tiles > 0;
  if (partials != nullptr) {
    // A stream-K tile's contributors: the owners of its first and last units and every block between.
    int64_t most_partials = 0;
    for (int64_t t = 0; t < p.sk_tiles; ++t)
      most_partials = std::max(most_partials, p.sk_owner((t + 1) * p.units - 1) - p.sk_owner(t * p.units));
    *partials = most_partials;
  }
  if (rows_apart != nullptr) *rows_apart = m_tiles >= 2 && p.dp_waves == 0 && p.sk_tiles > 0 && p.blocks % p.tiles != 0;
  return true;
}

namespace {

// The stages per batch of an instance, from its name's "_b<batch>" part (the part after the stage
// count, which later parts such as "_l4" or "_lone" may follow), or 1. Read in place: estimates ask
// it of every candidate against every tile cost of the table. (Sessions before 47 read only a
// final "_b<batch>", so layout-4 tiles, "..._s8_b2_l4", took the costs of their unbatched twins.)
int name_batch(const char *name) {
  for (const char *p = std::strstr(name, "_b"); p != nullptr; p = std::strstr(p + 1, "_b")) {
    const char *c = p + 2;
    int batch = 0;
    while (*c >= '0' && *c <= '9') batch = batch * 10 + (*c++ - '0');
    if (c != p + 2 && (*c == 0 || *c == '_')) return batch > 0 ? batch : 1;
  }
  return 1;
}

// Whether `cost` is of `i`'s kernel class (activation and code widths) and batch, whatever its shape.
bool tile_cost_class_covers(const TileCost &cost, const InstanceInfo &i) {
  if (cost.batch != name_batch(i.name)) return false;
  const int act = static_cast<int>(DType::from_id(i.act_type).bits);
  if (cost.act_bits == 0) return act == 16;
  return cost.act_bits == act && cost.code_bits == static_cast<int>(DType::from_id(i.code_type).bits);
}

} // namespace

bool tile_cost_covers(const TileCost &cost, const InstanceInfo &i) {
  if (cost.tile_m != i.tile_m || cost.tile_n != i.tile_n || cost.tile_k != i.tile_k) return false;
  return tile_cost_class_covers(cost, i);
}

double estimated_us(const InstanceInfo &info, const GemmArgs &args, int sms, const TileCost &cost) {
  int64_t inputs = 0, segments = 0, partials = 0;
  bool stream_k = false, rows_apart = false;
  if (!persistent_launch_facts(info, args, sms, &inputs, &segments, &stream_k, &partials, &rows_apart)) return -1;
  const double us = cost.c[0] + cost.c[1] * static_cast<double>(inputs) / 1000 +
                    cost.c[2] * static_cast<double>(segments) + (stream_k ? cost.c[3] : 0) +
                    cost.c[4] * static_cast<double>(partials);
  const bool w8a8 = args.fmt.act.type.bits == 8 && args.fmt.weight.code.bits == 8;
  return rows_apart && w8a8 && us > 0 ? us * (1 + kRowsApartPenalty8) : us;
}

namespace {

// Glob match with '*' (any run) and '?' (one character), as fnmatchcase for those two.
bool glob_match(const char *p, const char *s) {
  const char *star = nullptr, *resume = nullptr;
  while (*s) {
    if (*p == '?' || (*p && *p != '*' && *p == *s)) {
      ++p;
      ++s;
    } else if (*p == '*') {
      star = p++;
      resume = s;
    } else if (star) {
      p = star + 1;
      s = ++resume;
    } else {
      return false;
    }
  }
  while (*p == '*') ++p;
  return *p == 0;
}

// Whether the ";"-separated list of integers holds `value`.
bool list_contains(const char *list, int value) {
  for (const char *p = list; *p != 0;) {
    int item;
    char suffix;
    if (next_list_item(p, &item, &suffix) && item == value) return true;
  }
  return false;
}

const DispatchTable *table_for(int cc, int sms) {
  for (size_t i = 0; i < generated::kDispatchTableCount; ++i) {
    const DispatchTable &t = generated::kDispatchTables[i];
    if (t.ccs[0] != 0 && !list_contains(t.ccs, cc)) continue;
    if (t.sms >= 0 && t.sms != sms) continue;
    if (t.name_contains[0] != 0) continue;
    return &t;
  }
  return nullptr;
}

// The table's cost of an instance: the one of its kernel class, else the weight-only one (for
// 16-bit activations); nullptr where none covers it.
const TileCost *tile_cost(const DispatchTable &t, const InstanceInfo &i) {
  const TileCost *plain = nullptr;
  for (size_t c = t.first_cost; c < t.first_cost + t.cost_count; ++c) {
    const TileCost &tc = generated::kTileCosts[c];
    if (!tile_cost_covers(tc, i)) continue;
    if (tc.act_bits != 0) return &tc;
    plain = &tc;
  }
  return plain;
}

// Launches of more rows of tiles than this are outside what the tile costs were fitted to
// (scripts/sweep_tiles.py times no such launch by default), so estimates leave them out ...
constexpr int64_t kEstimateMaxTileRows = 16;
// ... except for the weight-only (16-bit activation) tiles of at least kEstimateTallTile tokens, up
// to kEstimateMaxTallTileRows rows: session 64's sweeps timed them up to m = 16384 (128 rows of
// t128; H100, benchmarks/results/h100/tuning/h100-2026-12-07-s64-README.md), where the costs
// fitted at 16 rows still chose within 1 % of the fastest tile, while past 16 rows the patterns'
// t256 had taken 1.12-1.16x the fastest tile's time in geometric mean (m = 3072 to 16384).
constexpr int64_t kEstimateMaxTallTileRows = 128;
constexpr int kEstimateTallTile = 128;

// The most rows of tiles an estimate covers for instance `i` (humming_aot.dispatch mirrors it).
int64_t estimate_max_tile_rows(const InstanceInfo &i) {
  const bool tall = i.tile_m >= kEstimateTallTile && DType::from_id(i.act_type).bits >= 16;
  return tall ? kEstimateMaxTallTileRows : kEstimateMaxTileRows;
}

// An estimate range's choice (humming_aot.dispatch._estimates follows the same rule): among the
// candidates the table's tile costs cover with a positive estimate and whose launch has at most
// estimate_max_tile_rows rows of tiles, none taller than kEstimateMaxPad times the lowest of their
// tile heights that holds args.m, the lowest estimate; ties to the first in name order. nullptr
// when none qualifies.
// A taller tile pads its last rows' tensor work only (their activations are loaded as far as m
// reaches, backend/sm90/stage_loads.h), so where fewer, taller tiles keep more multiprocessors busy
// it may be the faster: H200 session 27, 16384 x 2048 at m = 40, t128 16.8 us against t64 21.2
// (16384 x 3072: 21.7 against 24.9). Twice the height was the widest the sweeps timed everywhere
// (scripts/sweep_tiles.py skips tiles more than 4x taller than m); over session 27's three sweeps
// it changed only those four choices (tests/test_generator.py).
constexpr int64_t kEstimateMaxPad = 2;
const InstanceInfo *estimated_choice(const DispatchTable &t, const std::vector<const InstanceInfo *> &candidates,
                                     const GemmArgs &args, int sms) {
  std::vector<std::pair<const InstanceInfo *, double>> covered; // with their estimates
  int64_t cap = 0, tallest = 0;
  for (const InstanceInfo *c : candidates) {
    const TileCost *tc = tile_cost(t, *c);
    if (tc == nullptr || (args.m + c->tile_m - 1) / c->tile_m > estimate_max_tile_rows(*c)) continue;
    const double us = estimated_us(*c, args, sms, *tc);
    // A kernel the model does not cover (-1), or a fit extrapolated past its points to a time that
    // is not positive (a8w8 8x256x128 at m = 64 on 4160 x 4096: -5.2 us): outside the model.
    if (!(us > 0)) continue;
    covered.push_back({c, us});
    if (c->tile_m >= args.m && (cap == 0 || c->tile_m < cap)) cap = c->tile_m;
    tallest = std::max<int64_t>(tallest, c->tile_m);
  }
  if (cap == 0) cap = tallest;
  const InstanceInfo *best = nullptr;
  double best_us = 0;
  for (const auto &[c, us] : covered)
    if (c->tile_m <= kEstimateMaxPad * cap && (best == nullptr || us < best_us)) best = c, best_us = us;
  return best;
}

} // namespace

namespace {

// The tiles of tile_m x tile_n a grouped GEMM of `assignments` rows routed over `experts` experts
// is expected to launch: the experts a uniform routing touches on average, each in whole tiles of
// rows (at least as many row tiles as the rows fill), times the channel tiles of n. 0 where a count
// is unknown or not positive.
double expected_grouped_tiles(int64_t assignments, int32_t experts, int64_t n, int tile_m, int tile_n) {
  if (assignments <= 0 || experts <= 0 || tile_m <= 0 || tile_n <= 0) return 0;
  const double e = experts;
  const double touched = e * (1.0 - std::pow(1.0 - 1.0 / e, static_cast<double>(assignments)));
  const double row_tiles = std::max(touched, std::ceil(static_cast<double>(assignments) / tile_m));
  return row_tiles * static_cast<double>((n + tile_n - 1) / tile_n);
}

} // namespace

double expected_row_tiles(double mean_rows, int tile_m) {
  if (!(mean_rows > 0)) return 0;
  // E[ceil(X / tile_m)] over the Poisson probabilities (in logarithms: exp(-mean) underflows past
  // about 700 rows), from and to 12 standard deviations either side of the mean, where what is
  // left out is below 1e-30 of the sum.
  const double spread = 12 * std::sqrt(mean_rows) + 16;
  const int64_t first = std::max<int64_t>(1, static_cast<int64_t>(mean_rows - spread));
  const int64_t last = static_cast<int64_t>(mean_rows + spread) + 1;
  double tiles = 0;
  for (int64_t x = first; x <= last; ++x) {
    const double p = std::exp(static_cast<double>(x) * std::log(mean_rows) - mean_rows - std::lgamma(x + 1.0));
    tiles += static_cast<double>((x + tile_m - 1) / tile_m) * p;
  }
  return tiles;
}

bool grouped_walk_alone(int64_t assignments, int32_t experts, int64_t n, int tile_m, int tile_n, int sms) {
  const double tiles = expected_grouped_tiles(assignments, experts, n, tile_m, tile_n);
  const double scale = std::min(1.0, static_cast<double>(experts) / kLoneWalkFullFromExperts);
  return sms > 0 && tiles > 0 && tiles >= kLoneTilesPerSm * scale * sms;
}

bool grouped_tiles_wide(int64_t assignments, int32_t experts, int64_t n, int tile_m, int tile_n, int sms) {
  const double tiles = expected_grouped_tiles(assignments, experts, n, tile_m, tile_n);
  return sms > 0 && tiles > kWideFromTilesPerSm * sms;
}

bool grouped_tiles_mid(int64_t assignments, int32_t experts, int64_t n, int tile_m, int tile_n, int sms) {
  if (sms <= 0) return false;
  const double narrow = expected_grouped_tiles(assignments, experts, n, tile_m, tile_n);
  const double mid = expected_grouped_tiles(assignments, experts, n, tile_m, tile_n * 3 / 2);
  if (narrow <= 0 || mid <= 0) return false;
  return 1.5 * std::ceil(mid / sms) <= kMidRoundsRatio * std::ceil(narrow / sms);
}

bool grouped_split_k(int64_t assignments, int32_t experts, int64_t n_pad, int64_t k_pad, int tile_m, int tile_n,
                     int tile_k, int sms) {
  if (assignments <= 0 || experts <= 0 || tile_m <= 0 || tile_n <= 0 || tile_k <= 0 || sms <= 0) return false;
  // The kernel's own count (sm90::Dense::plan), with the routed rows for the launch's rows: the
  // contiguous layout's rows are the routed ones, padded by nothing the bound would see.
  const int64_t bound = expert_tiles_at_most(assignments, experts, tile_m, (n_pad + tile_n - 1) / tile_n);
  return grouped_k_shares(bound, k_pad / tile_k, sms) >= kSplitFromShares;
}

namespace {

// Whether `info` could be chosen for `args` on `cc` (the filters of select_instance).
bool candidate(const InstanceInfo &info, const GemmArgs &args, int cc) {
  return instance_fits(info, args) && instance_runs_on(info, cc, nullptr) && info.can_implement(args);
}

// Whether instance `i`'s name ends with `suffix` (the grouped twins are told apart by name).
bool name_ends(const InstanceInfo &i, const char *suffix) {
  const std::string name = i.name;
  const size_t n = std::strlen(suffix);
  return name.size() >= n && name.compare(name.size() - n, n, suffix) == 0;
}

// Whether the producer of grouped instance `i` walks the experts' tiles alone (its name ends _lone).
bool walks_alone(const InstanceInfo &i) { return name_ends(i, "_lone"); }

// Whether grouped instance `i` splits its tiles' K into shares (its name ends _ks): chosen only as
// the split twin of a warp-walk tile (grouped_pick, grouped_split_k), never as a base tile.
bool splits_k(const InstanceInfo &i) { return name_ends(i, "_ks"); }

// Whether sm90 weight-only instance `i` gives each consumer warpgroup two 64-channel blocks
// (kernel/sm90_dense.cuh Blocks = 2, session 62): more channels than 64 a consumer warpgroup (its
// threads are a producer warpgroup and the consumers). Such a tile is a default choice only as a
// dense tile whose cost the device table has (the estimate ranges then weigh it like any other:
// t176x256x64 since session 64), or where nothing else computes the format (select_instance); never
// a height of the grouped height rule or a wide or mid twin (their grouped times were measured
// against the one-block tiles case by case, and no rule says where they win); a caller's instance=
// takes any of them.
bool two_blocks(const InstanceInfo &i) {
  return std::strcmp(i.backend, "sm90") == 0 && DType::from_id(i.act_type).bits >= 16 &&
         i.tile_n > 64 * (i.threads / 128 - 1);
}

} // namespace

namespace {

// The instance named as `grouped` with `suffix`, where it could run args on cc.
const InstanceInfo *suffixed_twin(const InstanceInfo &grouped, const char *suffix, const GemmArgs &args, int cc) {
  const InstanceInfo *twin = find_instance(std::string(grouped.name) + suffix);
  return twin != nullptr && candidate(*twin, args, cc) ? twin : nullptr;
}

} // namespace

const InstanceInfo *lone_twin(const InstanceInfo &grouped, const GemmArgs &args, int cc) {
  return suffixed_twin(grouped, "_lone", args, cc);
}

namespace {

// The instance with `channels` channels per tile that is otherwise `grouped`'s tile: the same
// kernel, tile height and walk (candidate checks the format against args); only the channels (and
// so the consumer warpgroups) more, and the ring maybe shallower to fit shared memory (t16x256: 7
// stages).
const InstanceInfo *channels_twin(const InstanceInfo &grouped, int channels, const GemmArgs &args, int cc) {
  if (!runs_experts(grouped)) return nullptr;
  for (size_t i = 0; i < generated::kInstanceCount; ++i) {
    const InstanceInfo &w = generated::kInstances[i];
    if (w.tile_n == channels && w.tile_m == grouped.tile_m && w.tile_k == grouped.tile_k &&
        std::strcmp(w.backend, grouped.backend) == 0 && std::strcmp(w.scheduler, grouped.scheduler) == 0 &&
        walks_alone(w) == walks_alone(grouped) && splits_k(w) == splits_k(grouped) && !two_blocks(w) &&
        candidate(w, args, cc))
      return &w;
  }
  return nullptr;
}

} // namespace

const InstanceInfo *wide_twin(const InstanceInfo &grouped, const GemmArgs &args, int cc) {
  return channels_twin(grouped, 2 * grouped.tile_n, args, cc);
}

const InstanceInfo *mid_twin(const InstanceInfo &grouped, const GemmArgs &args, int cc) {
  return grouped.tile_n % 2 == 0 ? channels_twin(grouped, grouped.tile_n * 3 / 2, args, cc) : nullptr;
}

const InstanceInfo *split_twin(const InstanceInfo &grouped, const GemmArgs &args, int cc) {
  return suffixed_twin(grouped, "_ks", args, cc);
}

GroupedVariants grouped_variants(const InstanceInfo &chosen, const GemmArgs &args, int cc) {
  GroupedVariants v;
  v.base = &chosen;
  if (!runs_experts(chosen)) return v;
  v.lone = lone_twin(chosen, args, cc);
  v.wide = wide_twin(chosen, args, cc);
  if (v.wide != nullptr) v.wide_lone = lone_twin(*v.wide, args, cc);
  v.mid = mid_twin(chosen, args, cc);
  if (v.mid != nullptr) v.mid_lone = lone_twin(*v.mid, args, cc);
  v.split = split_twin(chosen, args, cc);
  if (v.wide != nullptr) v.wide_split = split_twin(*v.wide, args, cc);
  return v;
}

const InstanceInfo *grouped_pick(const GroupedVariants &v, const GemmArgs &args, int sms) {
  if (v.base == nullptr) return nullptr;
  const InstanceInfo *split = v.wide_split != nullptr ? v.wide_split : v.split;
  if (split != nullptr && grouped_split_k(args.expert_assignments, args.experts, args.dims.n_pad, args.dims.k_pad,
                                          split->tile_m, split->tile_n, split->tile_k, sms))
    return split;
  const InstanceInfo *tile = v.base, *lone = v.lone;
  if (v.wide != nullptr &&
      grouped_tiles_wide(args.expert_assignments, args.experts, args.dims.n, tile->tile_m, tile->tile_n, sms))
    tile = v.wide, lone = v.wide_lone;
  else if (v.mid != nullptr &&
           grouped_tiles_mid(args.expert_assignments, args.experts, args.dims.n, tile->tile_m, tile->tile_n, sms))
    tile = v.mid, lone = v.mid_lone;
  if (lone != nullptr &&
      grouped_walk_alone(args.expert_assignments, args.experts, args.dims.n, tile->tile_m, tile->tile_n, sms))
    return lone;
  return tile;
}

namespace {

// `chosen`, or for a grouped GEMM the variant its size asks for (grouped_pick).
const InstanceInfo *grouped_variant_choice(const InstanceInfo *chosen, const GemmArgs &args, int cc, int sms) {
  if (args.experts <= 0 || chosen == nullptr || !runs_experts(*chosen)) return chosen;
  return grouped_pick(grouped_variants(*chosen, args, cc), args, sms);
}

} // namespace

const InstanceInfo *select_instance(const GemmArgs &args, int cc, int sms, std::string *why) {
  std::string reasons;
  std::vector<const InstanceInfo *> candidates;
  for (size_t i = 0; i < generated::kInstanceCount; ++i) {
    const InstanceInfo &info = generated::kInstances[i];
    if (!instance_fits(info, args)) continue;
    std::string r;
    if (!instance_runs_on(info, cc, &r)) {
      reasons += r + "; ";
      continue;
    }
    Status st = info.can_implement(args);
    if (!st) {
      reasons += std::string(info.name) + ": " + st.message + "; ";
      continue;
    }
    candidates.push_back(&info);
  }
  // Two-block tiles (two_blocks) only as dense tiles the table has a cost for, or where nothing
  // else computes the format.
  const DispatchTable *table = table_for(cc, sms);
  const auto unweighed = [&](const InstanceInfo *c) {
    return two_blocks(*c) && (runs_experts(*c) || table == nullptr || tile_cost(*table, *c) == nullptr);
  };
  if (std::any_of(candidates.begin(), candidates.end(), [&](const InstanceInfo *c) { return !unweighed(c); }))
    candidates.erase(std::remove_if(candidates.begin(), candidates.end(), unweighed), candidates.end());
  if (candidates.empty()) {
    if (why)
      *why = "no compiled instance computes " + to_string(args.fmt) + " on sm_" + std::to_string(cc) +
             " (this build has " + std::to_string(generated::kInstanceCount) + " instances for " +
             sm_list(generated::kBuildArchs) + ", profile " + generated::kBuildProfile + ")" +
             (reasons.empty() ? "" : ": " + reasons);
    return nullptr;
  }
  // The table's choice (or the registry's order), then the walk a grouped GEMM's size asks for.
  const auto pick = [&]() -> const InstanceInfo * {
    if (const DispatchTable *t = table) {
      size_t r = t->first_range;
      const size_t last = t->first_range + t->range_count - 1;
      const auto covers = [&](const DispatchRange &d) {
        return (d.m_max < 0 || args.m <= d.m_max) && args.dims.n >= d.n_min && (d.k_max <= 0 || args.dims.k <= d.k_max);
      };
      while (r < last && !covers(generated::kDispatchRanges[r])) ++r;
      if (generated::kDispatchRanges[r].estimate)
        if (const InstanceInfo *c = estimated_choice(*t, candidates, args, sms)) return c;
      std::stringstream prefs(generated::kDispatchRanges[r].prefer);
      std::string pattern;
      while (std::getline(prefs, pattern, '|'))
        for (const InstanceInfo *c : candidates)
          if (glob_match(pattern.c_str(), c->name)) return c;
      // (The binding caches choices per problem, so this string work is not on its hot path.)
    }
    // Registry order is name order; fast backends first.
    for (const InstanceInfo *c : candidates)
      if (std::string(c->backend) != "generic") return c;
    return candidates.front();
  };
  return grouped_variant_choice(pick(), args, cc, sms);
}

namespace {

// One tile's cost per grouped height (select_grouped_instance): the table's (TileCost c1) where it
// has one; for a height between two it has (the grouped-only heights 24, 48, 80 and 144, which no
// dense tile shares) the straight line between those two in the tile's rows, as a tile's cost is its
// rows plus a fixed part; where a height has neither, rows plus kGroupedRowTileFixedRows for every
// height (one unit for all, so that the heights compare). The heights either side are the build's
// grouped heights with a table cost, else (on a side where the build has none) the table's costs of
// that kernel class and tile width at other heights: a build whose tallest grouped W4A8 tile is t144
// has no t192 (experimental), whose dense cost the table has (session 59).
std::vector<double> grouped_height_costs(const std::vector<const InstanceInfo *> &heights, const DispatchTable *table) {
  const size_t n = heights.size();
  std::vector<double> cost(n, 0.0);
  std::vector<bool> known(n, false); // the table's own, the only ones a line is drawn between
  for (size_t j = 0; table != nullptr && j < n; ++j)
    if (const TileCost *c = tile_cost(*table, *heights[j])) cost[j] = c->c[1], known[j] = true;
  for (size_t j = 0; j < n; ++j) {
    if (known[j]) continue;
    const int m = heights[j]->tile_m;
    // The nearest heights with a table cost either side, and those costs (height 0: none).
    int lo = 0, hi = 0;
    double c_lo = 0, c_hi = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!known[i]) continue;
      const int h = heights[i]->tile_m;
      if (h < m && (lo == 0 || h > lo)) lo = h, c_lo = cost[i];
      if (h > m && (hi == 0 || h < hi)) hi = h, c_hi = cost[i];
    }
    const bool build_lo = lo != 0, build_hi = hi != 0;
    for (size_t c = 0; table != nullptr && (!build_lo || !build_hi) && c < table->cost_count; ++c) {
      const TileCost &tc = generated::kTileCosts[table->first_cost + c];
      if (tc.tile_n != heights[j]->tile_n || !tile_cost_class_covers(tc, *heights[j])) continue;
      const int h = tc.tile_m;
      if (!build_lo && h < m && (lo == 0 || h > lo)) lo = h, c_lo = tc.c[1];
      if (!build_hi && h > m && (hi == 0 || h < hi)) hi = h, c_hi = tc.c[1];
    }
    if (lo == 0 || hi == 0) {
      for (size_t i = 0; i < n; ++i) cost[i] = heights[i]->tile_m + kGroupedRowTileFixedRows;
      return cost;
    }
    cost[j] = c_lo + static_cast<double>(m - lo) / (hi - lo) * (c_hi - c_lo);
  }
  return cost;
}

} // namespace

const InstanceInfo *select_grouped_instance(const GemmArgs &args, int64_t rows_per_expert, int cc, int sms,
                                            std::string *why) {
  GemmArgs like = args;
  like.m = std::max<int64_t>(1, rows_per_expert);
  if (like.m <= kGroupedLowestTileTo) {
    // Per height, the narrowest channel tile (t8x128 before t8x256: grouped_pick widens it), the
    // first in name order among equals (the warp walk's name before its _lone twin); no K-split tile (_ks)
    // and no two-block tile (two_blocks).
    std::vector<const InstanceInfo *> heights;
    for (size_t i = 0; i < generated::kInstanceCount; ++i) {
      const InstanceInfo &info = generated::kInstances[i];
      if (splits_k(info) || two_blocks(info) || !candidate(info, like, cc)) continue;
      auto same =
          std::find_if(heights.begin(), heights.end(), [&](const InstanceInfo *h) { return h->tile_m == info.tile_m; });
      if (same == heights.end())
        heights.push_back(&info);
      else if (info.tile_n < (*same)->tile_n)
        *same = &info;
    }
    const std::vector<double> cost = grouped_height_costs(heights, table_for(cc, sms));
    const InstanceInfo *lowest = nullptr;
    double lowest_work = 0;
    for (size_t j = 0; j < heights.size(); ++j) {
      const InstanceInfo *h = heights[j];
      const double work = expected_row_tiles(static_cast<double>(like.m), h->tile_m) * cost[j];
      // Works within a millionth are equal: the lower height, which pads less.
      if (lowest == nullptr || work < lowest_work * (1 - 1e-6) ||
          (work <= lowest_work * (1 + 1e-6) && h->tile_m < lowest->tile_m))
        lowest = h, lowest_work = work;
    }
    if (lowest != nullptr) return grouped_variant_choice(lowest, like, cc, sms);
  } else if (like.dims.k_pad >= kGroupedTwoBlockMinK) {
    // Past the height rule, on a deep K: the tallest two-block tile, its lone walk where built (its
    // warp walk spills), as it is (grouped_pick has no twin of it to move to).
    const InstanceInfo *tall = nullptr;
    for (size_t i = 0; i < generated::kInstanceCount; ++i) {
      const InstanceInfo &info = generated::kInstances[i];
      // (candidate keeps grouped instances only: like has experts.)
      if (!two_blocks(info) || splits_k(info) || !candidate(info, like, cc)) continue;
      if (tall == nullptr || info.tile_m > tall->tile_m ||
          (info.tile_m == tall->tile_m && walks_alone(info) && !walks_alone(*tall)))
        tall = &info;
    }
    if (tall != nullptr) return tall;
  }
  return select_instance(like, cc, sms, why);
}

namespace {

// The format an instance computes, as text (humming_aot.dispatch.instance_format spells it alike):
// "g*" where it takes any K group, "-*" after a quantized activation type.
std::string instance_format_text(const InstanceInfo &i) {
  std::string w = to_string(DType::from_id(i.code_type));
  if (i.scale_type != 0) {
    w += i.group_k < 0 ? "g*" : (i.group_k == 0 ? "gc" : "g" + std::to_string(i.group_k));
    if (i.group_n > 1) w += "n" + std::to_string(i.group_n);
    w += "-s" + to_string(DType::from_id(i.scale_type));
    w += i.zero == 1 ? "-zi" : (i.zero == 2 ? "-zf" : "");
  }
  const DType act = DType::from_id(i.act_type);
  const bool quantized = act.bits <= 8;
  return "a-" + to_string(act) + (quantized ? "-*" : "") + "_w-" + w + "_c-" + to_string(DType::from_id(i.out_type));
}

bool strict_mode() {
  const char *env = std::getenv("HUMMING_STRICT");
  return env != nullptr && env[0] != '\0' && std::string(env) != "0";
}

} // namespace

std::string slow_path_note(const InstanceInfo &chosen, const GemmArgs &args, int cc) {
  if (std::string(chosen.backend) != "generic") return "";
  std::vector<std::string> fast;
  for (size_t i = 0; i < generated::kInstanceCount; ++i) {
    const InstanceInfo &info = generated::kInstances[i];
    if (std::string(info.backend) == "generic" || !instance_runs_on(info, cc, nullptr)) continue;
    const std::string f = instance_format_text(info);
    if (std::find(fast.begin(), fast.end(), f) == fast.end()) fast.push_back(f);
  }
  std::sort(fast.begin(), fast.end());
  std::string list;
  for (const std::string &f : fast) list += (list.empty() ? "" : ", ") + f;
  return to_string(args.fmt) + " runs on the slow fallback (generic backend, " + chosen.name + ") on sm_" +
         std::to_string(cc) + ": no fast kernel of this build computes it there for this problem. " +
         (list.empty() ? std::string("This build has no fast kernels for sm_") + std::to_string(cc) + "."
                       : "Formats with fast kernels on this device: " + list + ".") +
         " Set HUMMING_STRICT=1 to make this an error.";
}

const InstanceInfo *select_instance(const GemmArgs &args, int cc, int sms, std::string *why, std::string *note) {
  const InstanceInfo *chosen = select_instance(args, cc, sms, why);
  if (note != nullptr) note->clear();
  if (chosen == nullptr) return nullptr;
  const std::string n = slow_path_note(*chosen, args, cc);
  if (!n.empty() && strict_mode()) {
    if (why != nullptr) *why = n + " (refused: HUMMING_STRICT is set)";
    return nullptr;
  }
  if (note != nullptr) *note = n;
  return chosen;
}

Status prepare_instance(const InstanceInfo &instance) {
  std::string why;
  const int cc = current_device_cc(&why);
  if (cc < 0) return Status::Error(why);
  if (!instance_runs_on(instance, cc, &why)) return Status::Error(why);
  return instance.prepare != nullptr ? instance.prepare() : Status::Ok();
}

Status gemm(const GemmArgs &args, const InstanceInfo &instance, void *stream) {
  Status st = validate(args);
  if (!st) return st;
  st = instance_matches(instance, args);
  if (!st) return st;
  std::string why;
  const int cc = current_device_cc(&why);
  if (cc < 0) return Status::Error(why);
  if (!instance_runs_on(instance, cc, &why)) return Status::Error(why);
  st = instance.can_implement(args);
  if (!st) return Status::Error(std::string(instance.name) + " cannot run this problem: " + st.message);
  const size_t need = instance.workspace_bytes != nullptr ? instance.workspace_bytes(args) : 0;
  if (need > 0 && (args.workspace == nullptr || args.workspace_bytes < need))
    return Status::Error(std::string(instance.name) + " needs " + std::to_string(need) +
                         " bytes of workspace for this problem (its first 64 KiB zeroed), got " +
                         std::to_string(args.workspace_bytes));
  return instance.launch(args, stream);
}

} // namespace humming
