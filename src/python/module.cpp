// humming_aot._C: the torch-free half of the Python binding (pybind11, no torch headers and no
// libtorch): the registry, the formats, the build facts and the device facts the Python dispatcher
// needs. The torch ops are humming_aot/_torch_ops.so (src/torch/ops.cpp, on torch's stable ABI), so
// neither part of the package is tied to the torch it was built with.
#include <cuda_runtime_api.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "humming/humming.h"

namespace py = pybind11;

namespace humming {
namespace {

void check(const Status &st) {
  if (!st.ok) throw py::value_error(st.message);
}

int device_sms(int index) {
  static int cache[64] = {};
  if (index < 0 || index >= 64) return current_device_sms();
  if (cache[index] == 0) cache[index] = current_device_sms();
  return cache[index];
}

// Makes CUDA device `device` current for its lifetime and restores the previous one.
struct DeviceScope {
  int previous = -1;
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous) != cudaSuccess) previous = -1, cudaGetLastError();
    if (cudaSetDevice(device) != cudaSuccess) {
      cudaGetLastError();
      throw py::value_error("CUDA device " + std::to_string(device) + " cannot be made current");
    }
  }
  ~DeviceScope() {
    if (previous >= 0) cudaSetDevice(previous);
  }
  DeviceScope(const DeviceScope &) = delete;
  DeviceScope &operator=(const DeviceScope &) = delete;
};

py::dict instance_dict(const InstanceInfo &i) {
  py::dict d;
  d["name"] = i.name;
  d["backend"] = i.backend;
  d["scheduler"] = i.scheduler;
  d["archs"] = i.archs;
  d["act_type"] = to_string(DType::from_id(i.act_type));
  d["act_granularity"] = i.act_granularity;
  d["code_type"] = to_string(DType::from_id(i.code_type));
  d["group_k"] = i.group_k;
  d["group_n"] = i.group_n;
  d["scale_type"] = to_string(DType::from_id(i.scale_type));
  d["zero"] = i.zero == 0 ? "none" : (i.zero == 1 ? "int" : "float");
  d["global_scale"] = i.global_scale;
  d["out_type"] = to_string(DType::from_id(i.out_type));
  d["layout"] = i.layout;
  d["tile"] = py::make_tuple(i.tile_m, i.tile_n, i.tile_k);
  d["stages"] = i.stages;
  d["threads"] = i.threads;
  d["smem_bytes"] = i.smem_bytes;
  return d;
}

// Registry look-ups for the pybind functions (no tensors: a problem described by its extents).
const InstanceInfo &named_instance(const std::string &name) {
  const InstanceInfo *i = find_instance(name);
  if (!i) throw py::value_error("no compiled instance is named '" + name + "'");
  return *i;
}

GemmArgs described_problem(const std::string &fmt, int layout, int64_t n, int64_t k, int64_t m) {
  GemmArgs args;
  Status st = parse_gemm_format(fmt, &args.fmt);
  if (st) st = packed_dims(layout, args.fmt.weight, n, k, &args.dims);
  if (!st) throw py::value_error(st.message);
  args.layout = layout;
  args.m = m;
  args.lda = k;
  args.ldo = n;
  return args;
}

// A dense kernel of `backend` with this tile shape for the cost model (persistent_launch_facts,
// estimated_us), which reads the tile, the backend, the scheduler and the activation type; the
// name points into static storage and `backend` must outlive the result.
InstanceInfo described_tile(const std::string &backend, int tile_m, int tile_n, int tile_k, const GemmArgs &args) {
  if (tile_m <= 0 || tile_n <= 0 || tile_k <= 0) throw py::value_error("tile extents must be positive");
  InstanceInfo info{};
  info.name = "";
  info.backend = backend.c_str();
  info.scheduler = "dense";
  info.act_type = args.fmt.act.type.id();
  info.code_type = args.fmt.weight.code.id();
  info.tile_m = tile_m, info.tile_n = tile_n, info.tile_k = tile_k;
  return info;
}

template <class F, class P> std::string normalize(const std::string &s, P parse) {
  F f;
  const Status st = parse(s, &f);
  if (!st) throw py::value_error(st.message);
  return to_string(f);
}

} // namespace
} // namespace humming

PYBIND11_MODULE(_C, m) {
  using namespace humming;
  m.doc() = "humming_aot._C: the torch-free registry, formats and build facts (the ops are torch.ops.humming)";
  m.def("instances", [] {
    py::list out;
    for (size_t i = 0; i < instance_count(); ++i) out.append(instance_dict(*instance_at(i)));
    return out;
  });
  m.def("build_info", [] {
    py::dict d;
    d["version"] = version();
    d["archs"] = build_archs();
    d["profile"] = build_profile();
    d["cuda_version"] = cuda_version();
    d["instance_count"] = instance_count();
    d["torch_version"] = HUMMING_TORCH_VERSION;
    d["torch_abi"] = HUMMING_TORCH_ABI;
    d["torch_target"] = HUMMING_TORCH_TARGET;
    return d;
  });
  m.def("packed_dims", [](const std::string &wfmt, int layout, int64_t n, int64_t k) {
    WeightFormat w;
    Status st = parse_weight_format(wfmt, &w);
    PackedDims d;
    if (st) st = packed_dims(layout, w, n, k, &d);
    if (!st) throw py::value_error(st.message);
    py::dict r;
    r["n"] = d.n;
    r["k"] = d.k;
    r["n_pad"] = d.n_pad;
    r["k_pad"] = d.k_pad;
    r["group_k"] = d.group_k;
    r["group_n"] = d.group_n;
    r["k_groups"] = d.k_groups;
    r["n_groups"] = d.n_groups;
    r["words_per_row"] = d.words_per_row;
    return r;
  });
  m.def("layout_name", [](int layout) { return std::string(layout_name(layout)); });
  m.def("normalize_weight_format",
        [](const std::string &s) { return normalize<WeightFormat>(s, &parse_weight_format); });
  m.def("normalize_act_format", [](const std::string &s) { return normalize<ActFormat>(s, &parse_act_format); });
  m.def("normalize_gemm_format", [](const std::string &s) { return normalize<GemmFormat>(s, &parse_gemm_format); });
  m.def("device_cc", [] {
    std::string why;
    const int cc = current_device_cc(&why);
    return py::make_tuple(cc, why);
  });
  // Whether instance `name` computes `fmt` for this problem (key fields and its can_implement
  // rules, no pointers involved): what the Python dispatcher offers and explain() reports.
  m.def("check_instance",
        [](const std::string &name, const std::string &fmt, int layout, int64_t n, int64_t k, int64_t m) {
          const InstanceInfo &i = named_instance(name);
          const GemmArgs args = described_problem(fmt, layout, n, k, m);
          Status st = instance_matches(i, args);
          if (st) st = i.can_implement(args);
          return py::make_tuple(st.ok, st.message);
        });
  // Stream-K scratch instance `name` needs for this problem on the current CUDA device (0: no
  // tile is assembled from partials), as the binding computes it before a launch. Tests use it to
  // know a case exercises the fix-up.
  m.def("workspace_bytes",
        [](const std::string &name, const std::string &fmt, int layout, int64_t n, int64_t k, int64_t m) {
          const InstanceInfo &i = named_instance(name);
          GemmArgs args = described_problem(fmt, layout, n, k, m);
          check(instance_matches(i, args));
          args.num_sms = device_sms(-1);
          return i.workspace_bytes != nullptr ? i.workspace_bytes(args) : size_t(0);
        });
  // What the cost model of an estimate range reads (humming::persistent_launch_facts) for a
  // kernel of `backend` with this tile shape on a described problem and `sms` multiprocessors:
  // (inputs of the busiest block, its segments, stream-K part or not, the most partials of a tile's
  // fix-up, rows of tiles apart), or None where the model does not cover the kernel. By tile shape,
  // not instance name, so that a sweep of instances this build lacks can be scored
  // (tools/table_regret.py).
  m.def("persistent_launch_facts",
        [](const std::string &backend, int tile_m, int tile_n, int tile_k, const std::string &fmt, int layout,
           int64_t n, int64_t k, int64_t m, int sms) -> py::object {
          const GemmArgs args = described_problem(fmt, layout, n, k, m);
          const InstanceInfo info = described_tile(backend, tile_m, tile_n, tile_k, args);
          int64_t inputs = 0, segments = 0, partials = 0;
          bool stream_k = false, rows_apart = false;
          if (!persistent_launch_facts(info, args, sms, &inputs, &segments, &stream_k, &partials, &rows_apart))
            return py::none();
          return py::make_tuple(inputs, segments, stream_k, partials, rows_apart);
        });
  // A tile cost's estimate of that launch in microseconds (humming::estimated_us, which the C++
  // dispatcher uses: one rule for both), `cost` four or five numbers; negative where the model does
  // not cover the kernel.
  m.def("estimated_us", [](const std::vector<double> &cost, const std::string &backend, int tile_m, int tile_n,
                           int tile_k, const std::string &fmt, int layout, int64_t n, int64_t k, int64_t m, int sms) {
    if (cost.size() != 4 && cost.size() != 5) throw py::value_error("a tile cost has four or five numbers");
    const GemmArgs args = described_problem(fmt, layout, n, k, m);
    const InstanceInfo info = described_tile(backend, tile_m, tile_n, tile_k, args);
    TileCost tc{tile_m, tile_n, tile_k, {0, 0, 0, 0, 0}};
    std::copy(cost.begin(), cost.end(), tc.c);
    return estimated_us(info, args, sms, tc);
  });
  // The C++ default choice (humming::select_instance) for a described device: kept equal to
  // humming_aot.dispatch.choose_for by a test.
  m.def("select_instance", [](const std::string &fmt, int layout, int64_t n, int64_t k, int64_t m, int cc, int sms) {
    GemmArgs args = described_problem(fmt, layout, n, k, m);
    args.num_sms = sms;
    std::string why;
    const InstanceInfo *i = select_instance(args, cc, sms, &why);
    if (!i) throw py::value_error(why);
    return std::string(i->name);
  });
  // The C++ default choice of a grouped GEMM (humming::select_grouped_instance, then grouped_pick
  // for `assignments` routed rows; -1: unknown) over `experts` experts for a described device, as
  // humming.moe_gemm makes it: what the benchmarks record and the tests check.
  m.def("select_grouped_instance", [](const std::string &fmt, int layout, int64_t n, int64_t k, int64_t rows_per_expert,
                                      int32_t experts, int64_t assignments, int cc, int sms) {
    if (experts <= 0) throw py::value_error("a grouped GEMM needs at least one expert, got " + std::to_string(experts));
    GemmArgs args = described_problem(fmt, layout, n, k, std::max<int64_t>(1, rows_per_expert) * experts);
    args.num_sms = sms;
    set_stacked_experts(args, experts); // as humming.moe_gemm stacks them
    args.expert_assignments = assignments;
    std::string why;
    const InstanceInfo *i = select_grouped_instance(args, rows_per_expert, cc, sms, &why);
    if (!i) throw py::value_error(why);
    return std::string(i->name);
  });
  // The row tiles one expert of a grouped GEMM is expected to run (humming::expected_row_tiles) and
  // the fixed part of a tile's cost where the table has none, in rows: what the grouped height
  // choice weighs, for tests and tuning.
  m.def("expected_row_tiles", [](double mean_rows, int tile_m) {
    if (tile_m <= 0) throw py::value_error("a tile height must be positive, got " + std::to_string(tile_m));
    return expected_row_tiles(mean_rows, tile_m);
  });
  m.attr("grouped_row_tile_fixed_rows") = kGroupedRowTileFixedRows;
  m.attr("rows_apart_penalty_8") = kRowsApartPenalty8;
  // The variant of grouped instance `name` (its wide twin, lone walk: humming::grouped_pick) that a
  // grouped GEMM of `assignments` routed rows over `experts` experts runs for a described device:
  // the default choice with the tile height fixed, for benchmarks that time every height.
  m.def("grouped_variant", [](const std::string &name, const std::string &fmt, int layout, int64_t n, int64_t k,
                              int32_t experts, int64_t assignments, int cc, int sms) {
    if (experts <= 0) throw py::value_error("a grouped GEMM needs at least one expert, got " + std::to_string(experts));
    const InstanceInfo &base = named_instance(name);
    GemmArgs args = described_problem(fmt, layout, n, k, std::max<int64_t>(1, assignments));
    args.num_sms = sms;
    set_stacked_experts(args, experts); // as humming.moe_gemm stacks them
    args.expert_assignments = assignments;
    check(instance_matches(base, args));
    const InstanceInfo *i = grouped_pick(grouped_variants(base, args, cc), args, sms);
    return std::string(i->name);
  });
  // Loads instance `name`'s kernels on CUDA device `device` (humming::prepare_instance): (ok, why).
  m.def("prepare_instance", [](const std::string &name, int device) {
    const InstanceInfo &i = named_instance(name);
    const DeviceScope scope(device);
    const Status st = prepare_instance(i);
    return py::make_tuple(st.ok, st.message);
  });
  m.def("instance_runs_on", [](const std::string &name, int cc) {
    const InstanceInfo *i = find_instance(name);
    if (!i) throw py::value_error("no compiled instance is named '" + name + "'");
    std::string why;
    const bool ok = instance_runs_on(*i, cc, &why);
    return py::make_tuple(ok, why);
  });
}
