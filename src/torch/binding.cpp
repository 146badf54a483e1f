// The torch binding: turns tensors into pointers, extents and a stream, and calls libhumming.
// Ops are registered under torch.ops.humming; the torch-free parts (registry, formats, build facts)
// are plain pybind11 functions of humming_aot._C. Fake (meta) kernels live in humming_aot/ops.py.
#include <ATen/ATen.h>
#include <cuda_runtime_api.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/utils/pybind.h> // pybind11 casters for at::Tensor (gemm_eager)
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "humming/humming.h"

namespace py = pybind11;

namespace humming {
namespace {

// ---- error messages ------------------------------------------------------------------------------

// Messages are assembled here with std::to_string rather than streamed through c10::str: on the
// GPU machine's image, integers streamed by this module's inlined ostream code crashed the process
// (seen with torch 2.11 there; strings streamed fine), and an error message must never crash.
inline void append(std::string &s, const char *v) { s += v; }
inline void append(std::string &s, const std::string &v) { s += v; }
template <class T, std::enable_if_t<std::is_integral_v<T>, int> = 0> void append(std::string &s, T v) {
  s += std::to_string(v);
}
inline void append(std::string &s, at::IntArrayRef v) {
  s += "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  s += "]";
}
inline void append(std::string &s, at::ScalarType t) { s += c10::toString(t); }
inline void append(std::string &s, const at::Device &d) { s += d.str(); }
template <class... A> std::string msg(const A &...a) {
  std::string s;
  (append(s, a), ...);
  return s;
}
#define HUMMING_CHECK_VALUE(cond, ...) TORCH_CHECK_VALUE(cond, ::humming::msg(__VA_ARGS__))
#define HUMMING_CHECK_TYPE(cond, ...) TORCH_CHECK_TYPE(cond, ::humming::msg(__VA_ARGS__))

// ---- conversions ---------------------------------------------------------------------------------

// The torch dtype a tensor of values of type `t` is stored in. e8m0 is kept as raw exponent bytes.
at::ScalarType storage_type(DType t) {
  if (t == dtypes::f32) return at::kFloat;
  if (t == dtypes::f16) return at::kHalf;
  if (t == dtypes::bf16) return at::kBFloat16;
  if (t == dtypes::e4m3) return at::kFloat8_e4m3fn;
  if (t == dtypes::e5m2) return at::kFloat8_e5m2;
  if (t == dtypes::i8) return at::kChar;
  return at::kByte;
}

DType dtype_of(at::ScalarType s) {
  switch (s) {
  case at::kFloat:
    return dtypes::f32;
  case at::kHalf:
    return dtypes::f16;
  case at::kBFloat16:
    return dtypes::bf16;
  default:
    return dtypes::none;
  }
}

void check(const Status &st) { TORCH_CHECK_VALUE(st.ok, st.message); }

GemmFormat parse_gemm(const std::string &s) {
  GemmFormat f;
  check(parse_gemm_format(s, &f));
  return f;
}
WeightFormat parse_weight(const std::string &s) {
  WeightFormat f;
  check(parse_weight_format(s, &f));
  return f;
}
ActFormat parse_act(const std::string &s) {
  ActFormat f;
  check(parse_act_format(s, &f));
  return f;
}

void check_tensor(const at::Tensor &t, const char *what, at::ScalarType dtype, const at::Device &device) {
  HUMMING_CHECK_TYPE(t.scalar_type() == dtype, what, " must have dtype ", dtype, ", got ", t.scalar_type());
  HUMMING_CHECK_VALUE(t.device() == device, what, " is on ", t.device(), " but the activations are on ", device,
                      "; every tensor of one call must be on the same device");
}

void check_shape(const at::Tensor &t, const char *what, std::initializer_list<int64_t> shape) {
  const at::IntArrayRef want(shape); // compared in place: this runs several times per call
  HUMMING_CHECK_VALUE(t.sizes() == want, what, " has shape ", t.sizes(), "; expected ", want);
  HUMMING_CHECK_VALUE(t.is_contiguous(), what, " must be contiguous");
}

int device_sms(int index) {
  static std::array<int, 64> cache{};
  if (index < 0 || index >= 64) return current_device_sms();
  if (cache[index] == 0) cache[index] = current_device_sms();
  return cache[index];
}

int device_cc(int index) {
  static std::array<int, 64> cache{};
  if (index >= 0 && index < 64 && cache[index] != 0) return cache[index];
  std::string why;
  const int cc = current_device_cc(&why);
  TORCH_CHECK(cc > 0, why);
  if (index >= 0 && index < 64) cache[index] = cc;
  return cc;
}

// ---- gemm ----------------------------------------------------------------------------------------

// What one call site's strings and extents resolve to. A model calls the same few layers over and
// over, so each thread keeps the parsed format, the packed extents, the named instance and the
// default choice per M: the hot path then does no parsing and no registry search.
struct CallPlan {
  std::string fmt_text, instance_name;
  int64_t layout = 0, n = 0, k = 0;
  GemmFormat fmt;
  PackedDims dims;
  const InstanceInfo *named = nullptr;
  struct Choice {
    int64_t m;
    int device, cc, sms;
    const InstanceInfo *inst;
  };
  std::vector<Choice> chosen;
};

CallPlan &call_plan(const std::string &fmt_text, int64_t layout, int64_t n, int64_t k, const std::string &instance) {
  thread_local std::vector<std::unique_ptr<CallPlan>> plans;
  for (auto &p : plans)
    if (p->n == n && p->k == k && p->layout == layout && p->fmt_text == fmt_text && p->instance_name == instance)
      return *p;
  auto p = std::make_unique<CallPlan>();
  p->fmt = parse_gemm(fmt_text);
  check(packed_dims(static_cast<int>(layout), p->fmt.weight, n, k, &p->dims));
  if (!instance.empty()) {
    p->named = find_instance(instance);
    HUMMING_CHECK_VALUE(p->named != nullptr, "no compiled instance is named '", instance,
                        "'; humming_aot.registry.instances() lists the ", instance_count(), " of this build");
  }
  p->fmt_text = fmt_text, p->instance_name = instance, p->layout = layout, p->n = n, p->k = k;
  if (plans.size() >= 256) plans.clear(); // bounded: a model has far fewer distinct layers
  plans.push_back(std::move(p));
  return *plans.back();
}

// Stream-K scratch. The kernels need its first kWorkspaceZeroBytes zeroed only before first use
// (they return their tile counters to zero), so outside graph capture each (device, stream) keeps
// one buffer and reuses it: no memset launch per call. Kernels on one stream run in order, so they
// may share it. The kept buffers come from CUDA's stream-ordered allocator, not torch's: a first
// call on a new stream can happen while torch routes the thread's allocations to a graph pool
// (torch.compile's reduce-overhead warm-up runs eagerly on its own stream with the pool active), and
// a kept tensor allocated there is a persistent pool tensor that torch rejects ("tensor(s) in the
// cudagraph pool not tracked as outputs"). Growing frees the old buffer in stream order. Under graph
// capture a fresh buffer comes from torch's allocator, that is from the graph's pool (only its
// counter region zeroed), so a graph never points at a buffer that eager calls or another replay
// stream also use. The kept buffers (1 MiB to 256 MiB per stream that ran a stream-K launch) do
// not show in torch.cuda.memory_allocated.
void *kernel_workspace(const at::Device &dev, cudaStream_t stream, size_t bytes, at::Tensor *hold) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  TORCH_CHECK(cudaStreamIsCapturing(stream, &capture) == cudaSuccess, "cannot query the stream's capture state");
  constexpr size_t kKeepLimit = size_t(256) << 20; // larger scratch is not kept between calls
  const size_t zeroed = std::min(bytes, humming::kWorkspaceZeroBytes);
  if (capture != cudaStreamCaptureStatusNone || bytes > kKeepLimit) {
    *hold = at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions().device(dev).dtype(at::kByte));
    hold->narrow(0, 0, static_cast<int64_t>(zeroed)).zero_();
    return hold->data_ptr();
  }
  struct Kept {
    void *ptr = nullptr;
    size_t bytes = 0;
  };
  static std::mutex mu;
  // Never destroyed: releasing CUDA memory during interpreter shutdown is not safe.
  static auto *kept = new std::map<std::pair<int, cudaStream_t>, Kept>();
  const std::lock_guard<std::mutex> lock(mu);
  Kept &buf = (*kept)[{static_cast<int>(dev.index()), stream}];
  if (buf.ptr == nullptr || buf.bytes < bytes) {
    const size_t size = std::max(bytes, std::min(kKeepLimit, size_t(1) << 20));
    if (buf.ptr != nullptr) {
      TORCH_CHECK(cudaFreeAsync(buf.ptr, stream) == cudaSuccess, "freeing the stream-K scratch failed");
      buf = Kept{};
    }
    void *p = nullptr;
    const cudaError_t e = cudaMallocAsync(&p, size, stream);
    TORCH_CHECK(e == cudaSuccess, "allocating ", size, " bytes of stream-K scratch on ", dev,
                " failed: ", cudaGetErrorString(e));
    TORCH_CHECK(cudaMemsetAsync(p, 0, std::min(size, humming::kWorkspaceZeroBytes), stream) == cudaSuccess,
                "zeroing the stream-K scratch failed");
    buf = Kept{p, size};
  }
  return buf.ptr;
}

at::Tensor gemm_impl(const at::Tensor &a, const at::Tensor &codes, const c10::optional<at::Tensor> &scales,
                     const c10::optional<at::Tensor> &zeros, const c10::optional<at::Tensor> &global_scale,
                     const c10::optional<at::Tensor> &a_scales, const c10::optional<at::Tensor> &bias,
                     const std::string &fmt_text, int64_t layout, int64_t n, int64_t k, const std::string &instance) {
  CallPlan &plan = call_plan(fmt_text, layout, n, k, instance);
  GemmArgs args;
  args.fmt = plan.fmt;
  args.layout = static_cast<int>(layout);
  args.dims = plan.dims;
  const PackedDims &d = args.dims;
  const at::Device dev = a.device();
  const WeightFormat &w = args.fmt.weight;

  HUMMING_CHECK_VALUE(a.dim() == 2, "activations must be 2-D [m, k], got ", a.dim(), "-D shape ", a.sizes(),
                      " (flatten leading dimensions first)");
  HUMMING_CHECK_VALUE(a.size(1) == k, "activations have ", a.size(1), " columns but the weight has k=", k);
  check_tensor(a, "activations", storage_type(args.fmt.act.type), dev);
  HUMMING_CHECK_VALUE(a.stride(1) == 1 || a.size(1) == 1, "activations must have unit stride along k, got strides ",
                      a.strides());
  HUMMING_CHECK_VALUE(a.size(0) <= 1 || a.stride(0) >= k, "activation row stride ", a.stride(0), " is below k=", k);
  args.m = a.size(0);
  args.a = a.data_ptr();
  args.lda = a.size(0) <= 1 ? k : a.stride(0);

  check_tensor(codes, "packed codes", at::kInt, dev);
  check_shape(codes, "packed codes", {d.n_pad, d.words_per_row});
  args.codes = reinterpret_cast<const uint32_t *>(codes.data_ptr());
  if (w.has_scale()) {
    HUMMING_CHECK_VALUE(scales.has_value(), "weight format ", to_string(w), " needs scales");
    check_tensor(*scales, "scales", storage_type(w.scale), dev);
    check_shape(*scales, "packed scales", {d.k_groups, d.n_groups});
    args.scales = scales->data_ptr();
  } else {
    HUMMING_CHECK_VALUE(!scales.has_value(), "weight format ", to_string(w), " takes no scales");
  }
  if (w.zero != ZeroKind::kNone) {
    HUMMING_CHECK_VALUE(zeros.has_value(), "weight format ", to_string(w), " needs zero points");
    check_tensor(*zeros, "zero points", w.zero == ZeroKind::kInt ? at::kByte : storage_type(w.scale), dev);
    check_shape(*zeros, "packed zero points", {d.k_groups, d.n_groups});
    args.zeros = zeros->data_ptr();
  } else {
    HUMMING_CHECK_VALUE(!zeros.has_value(), "weight format ", to_string(w), " takes no zero points");
  }
  if (w.global_scale) {
    HUMMING_CHECK_VALUE(global_scale.has_value(), "weight format ", to_string(w), " needs a global scale");
    check_tensor(*global_scale, "global scale", at::kFloat, dev);
    HUMMING_CHECK_VALUE(global_scale->numel() == 1, "the global scale holds one value, got ", global_scale->numel());
    args.global_scale = global_scale->data_ptr<float>();
  } else {
    HUMMING_CHECK_VALUE(!global_scale.has_value(), "weight format ", to_string(w), " takes no global scale");
  }
  if (args.fmt.act.granularity != ActScale::kNone) {
    HUMMING_CHECK_VALUE(a_scales.has_value(), "activation format ", to_string(args.fmt.act),
                        " needs activation scales (quantize with torch.ops.humming.quantize_act)");
    check_tensor(*a_scales, "activation scales", at::kFloat, dev);
    const int64_t group = args.fmt.act.granularity == ActScale::kGroup ? args.fmt.act.group_k : k;
    check_shape(*a_scales, "activation scales", {args.m, (k + group - 1) / group});
    args.a_scales = a_scales->data_ptr<float>();
    args.a_scale_cols = (k + group - 1) / group;
  } else {
    HUMMING_CHECK_VALUE(!a_scales.has_value(), "activation format ", to_string(args.fmt.act), " takes no scales");
  }
  if (bias.has_value()) {
    check_tensor(*bias, "bias", storage_type(args.fmt.out), dev);
    check_shape(*bias, "bias", {n});
    args.bias = bias->data_ptr();
  }
  at::Tensor out = at::empty({args.m, n}, a.options().dtype(storage_type(args.fmt.out)));
  args.out = out.data_ptr();
  args.ldo = n;

  if (dev.is_cpu()) {
    check(gemm_cpu(args));
    return out;
  }
  HUMMING_CHECK_VALUE(dev.is_cuda(), "humming.gemm runs on CPU or CUDA tensors, got ", dev);
  const c10::cuda::CUDAGuard guard(dev);
  const int index = dev.index();
  const int cc = device_cc(index);
  args.num_sms = device_sms(index);
  const InstanceInfo *inst = plan.named;
  if (inst == nullptr) {
    for (const auto &c : plan.chosen)
      if (c.m == args.m && c.device == index && c.cc == cc && c.sms == args.num_sms) inst = c.inst;
    // A cached choice can still refuse this call's pointers or strides (alignment): choose again.
    if (inst != nullptr && !inst->can_implement(args)) {
      std::string why;
      inst = select_instance(args, cc, args.num_sms, &why);
      HUMMING_CHECK_VALUE(inst != nullptr, why);
    } else if (inst == nullptr) {
      std::string why;
      inst = select_instance(args, cc, args.num_sms, &why);
      HUMMING_CHECK_VALUE(inst != nullptr, why);
      if (plan.chosen.size() >= 64) plan.chosen.clear();
      plan.chosen.push_back({args.m, index, cc, args.num_sms, inst});
    }
  }
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(index).stream();
  at::Tensor workspace; // holds scratch allocated for this call only
  const size_t ws = inst->workspace_bytes != nullptr ? inst->workspace_bytes(args) : 0;
  if (ws > 0) {
    args.workspace = kernel_workspace(dev, stream, ws, &workspace);
    args.workspace_bytes = ws;
  }
  check(gemm(args, *inst, stream));
  return out;
}

// ---- pack / unpack -------------------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor, at::Tensor> pack_weight_impl(const at::Tensor &codes_in,
                                                                const c10::optional<at::Tensor> &scales,
                                                                const c10::optional<at::Tensor> &zeros,
                                                                const std::string &wfmt, int64_t layout) {
  const WeightFormat w = parse_weight(wfmt);
  HUMMING_CHECK_VALUE(codes_in.dim() == 2, "codes must be 2-D [n, k], got shape ", codes_in.sizes());
  HUMMING_CHECK_TYPE(codes_in.scalar_type() == at::kByte, "codes must be uint8 bit patterns, got ",
                     codes_in.scalar_type());
  PackedDims d;
  check(packed_dims(static_cast<int>(layout), w, codes_in.size(0), codes_in.size(1), &d));
  const at::Device dev = codes_in.device();
  HUMMING_CHECK_VALUE(dev.is_cpu() || dev.is_cuda(), "pack_weight runs on CPU or CUDA tensors, got ", dev);
  const at::Tensor codes = codes_in.contiguous();
  // The packers keep each code's low bits only: a wider code would change silently. (One
  // reduction, and on a GPU one synchronization, per packed weight.)
  const int bits = static_cast<int>(w.code.bits);
  if (bits < 8 && codes.numel() > 0) {
    const int64_t widest = codes.max().item<int64_t>();
    HUMMING_CHECK_VALUE(widest < (int64_t(1) << bits), "code ", widest, " does not fit in the ", bits,
                        " bits of weight format ", wfmt, "; codes are 0..", (1 << bits) - 1);
  }
  at::Tensor packed = at::empty({d.n_pad, d.words_per_row}, codes.options().dtype(at::kInt));
  at::Tensor out_scales = at::empty({0}, codes.options());
  at::Tensor out_zeros = at::empty({0}, codes.options());
  c10::optional<c10::cuda::CUDAGuard> guard;
  void *stream = nullptr;
  if (dev.is_cuda()) {
    guard.emplace(dev);
    stream = c10::cuda::getCurrentCUDAStream(dev.index()).stream();
  }
  auto *packed_ptr = reinterpret_cast<uint32_t *>(packed.data_ptr());
  check(dev.is_cpu() ? pack_codes_cpu(static_cast<int>(layout), w, d, codes.data_ptr<uint8_t>(), packed_ptr)
                     : pack_codes_cuda(static_cast<int>(layout), w, d, codes.data_ptr<uint8_t>(), packed_ptr, stream));
  auto pack_grid = [&](const at::Tensor &t_in, const char *what, at::ScalarType dtype) {
    check_tensor(t_in, what, dtype, dev);
    const at::Tensor t = t_in.contiguous();
    HUMMING_CHECK_VALUE(t.dim() == 2 && t.size(0) == d.n_groups_logical && t.size(1) == d.k_groups_logical, what,
                        " have shape ", t.sizes(), "; weight format ", to_string(w), " with n=", d.n, ", k=", d.k,
                        " needs [", d.n_groups_logical, ", ", d.k_groups_logical, "]");
    at::Tensor out = at::empty({d.k_groups, d.n_groups}, t.options());
    const int bytes = static_cast<int>(t.element_size());
    check(dev.is_cpu() ? pack_groups_cpu(d, bytes, t.data_ptr(), out.data_ptr())
                       : pack_groups_cuda(d, bytes, t.data_ptr(), out.data_ptr(), stream));
    return out;
  };
  if (w.has_scale()) {
    HUMMING_CHECK_VALUE(scales.has_value(), "weight format ", wfmt, " needs scales");
    out_scales = pack_grid(*scales, "scales", storage_type(w.scale));
  } else {
    HUMMING_CHECK_VALUE(!scales.has_value(), "weight format ", wfmt, " takes no scales");
  }
  if (w.zero != ZeroKind::kNone) {
    HUMMING_CHECK_VALUE(zeros.has_value(), "weight format ", wfmt, " needs zero points");
    out_zeros = pack_grid(*zeros, "zero points", w.zero == ZeroKind::kInt ? at::kByte : storage_type(w.scale));
  } else {
    HUMMING_CHECK_VALUE(!zeros.has_value(), "weight format ", wfmt, " takes no zero points");
  }
  return {packed, out_scales, out_zeros};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> unpack_weight_impl(const at::Tensor &packed_in, const at::Tensor &scales,
                                                                  const at::Tensor &zeros, const std::string &wfmt,
                                                                  int64_t layout, int64_t n, int64_t k) {
  const WeightFormat w = parse_weight(wfmt);
  PackedDims d;
  check(packed_dims(static_cast<int>(layout), w, n, k, &d));
  const at::Device dev = packed_in.device();
  check_tensor(packed_in, "packed codes", at::kInt, dev);
  check_shape(packed_in, "packed codes", {d.n_pad, d.words_per_row});
  at::Tensor codes = at::empty({n, k}, packed_in.options().dtype(at::kByte));
  c10::optional<c10::cuda::CUDAGuard> guard;
  void *stream = nullptr;
  if (dev.is_cuda()) {
    guard.emplace(dev);
    stream = c10::cuda::getCurrentCUDAStream(dev.index()).stream();
  }
  const auto *packed_ptr = reinterpret_cast<const uint32_t *>(packed_in.data_ptr());
  check(dev.is_cpu()
            ? unpack_codes_cpu(static_cast<int>(layout), w, d, packed_ptr, codes.data_ptr<uint8_t>())
            : unpack_codes_cuda(static_cast<int>(layout), w, d, packed_ptr, codes.data_ptr<uint8_t>(), stream));
  auto unpack_grid = [&](const at::Tensor &t, const char *what, at::ScalarType dtype) {
    check_tensor(t, what, dtype, dev);
    check_shape(t, what, {d.k_groups, d.n_groups});
    at::Tensor out = at::empty({d.n_groups_logical, d.k_groups_logical}, t.options());
    const int bytes = static_cast<int>(t.element_size());
    check(dev.is_cpu() ? unpack_groups_cpu(d, bytes, t.data_ptr(), out.data_ptr())
                       : unpack_groups_cuda(d, bytes, t.data_ptr(), out.data_ptr(), stream));
    return out;
  };
  at::Tensor out_scales = at::empty({0}, packed_in.options().dtype(at::kByte));
  at::Tensor out_zeros = at::empty({0}, packed_in.options().dtype(at::kByte));
  if (w.has_scale()) out_scales = unpack_grid(scales, "packed scales", storage_type(w.scale));
  if (w.zero != ZeroKind::kNone)
    out_zeros = unpack_grid(zeros, "packed zero points", w.zero == ZeroKind::kInt ? at::kByte : storage_type(w.scale));
  return {codes, out_scales, out_zeros};
}

// ---- activation quantization ---------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor> quantize_act_impl(const at::Tensor &x, const std::string &afmt) {
  const ActFormat f = parse_act(afmt);
  HUMMING_CHECK_VALUE(f.granularity != ActScale::kNone, "activation format ", afmt,
                      " is not quantized; quantize_act takes e4m3, e5m2 or i8 with -pt or -g{K}");
  HUMMING_CHECK_VALUE(x.dim() == 2, "activations must be 2-D [m, k], got shape ", x.sizes());
  const DType xt = dtype_of(x.scalar_type());
  HUMMING_CHECK_TYPE(xt.id() != 0, "activations to quantize must be float32, float16 or bfloat16, got ",
                     x.scalar_type());
  HUMMING_CHECK_VALUE(x.size(1) > 0, "activations must have k > 0 columns");
  HUMMING_CHECK_VALUE(x.stride(1) == 1 || x.size(1) == 1, "activations must have unit stride along k");
  const int64_t m = x.size(0), k = x.size(1);
  const int64_t group = f.granularity == ActScale::kGroup ? f.group_k : k;
  at::Tensor codes = at::empty({m, k}, x.options().dtype(storage_type(f.type)));
  at::Tensor scales = at::empty({m, (k + group - 1) / group}, x.options().dtype(at::kFloat));
  const int64_t ldx = m <= 1 ? k : x.stride(0);
  if (x.device().is_cpu()) {
    check(quantize_act_cpu(f, xt, x.data_ptr(), m, k, ldx, codes.data_ptr(), scales.data_ptr<float>()));
  } else {
    HUMMING_CHECK_VALUE(x.device().is_cuda(), "quantize_act runs on CPU or CUDA tensors, got ", x.device());
    const c10::cuda::CUDAGuard guard(x.device());
    check(quantize_act_cuda(f, xt, x.data_ptr(), m, k, ldx, codes.data_ptr(), scales.data_ptr<float>(),
                            c10::cuda::getCurrentCUDAStream(x.device().index()).stream()));
  }
  return {codes, scales};
}

// ---- pybind11 helpers ----------------------------------------------------------------------------

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

template <class F, class P> std::string normalize(const std::string &s, P parse) {
  F f;
  const Status st = parse(s, &f);
  if (!st) throw py::value_error(st.message);
  return to_string(f);
}

} // namespace
} // namespace humming

TORCH_LIBRARY(humming, m) {
  // Dense GEMM. `instance` names a compiled instance ("" = the library's own choice); MoE GEMMs
  // will be separate ops (moe_gemm_*) with expert offsets, sharing the argument order.
  m.def("gemm(Tensor a, Tensor codes, Tensor? scales, Tensor? zeros, Tensor? global_scale, Tensor? a_scales, "
        "Tensor? bias, str fmt, int layout, int n, int k, str instance='') -> Tensor");
  m.def("pack_weight(Tensor codes, Tensor? scales, Tensor? zeros, str weight_format, int layout) -> "
        "(Tensor, Tensor, Tensor)");
  m.def("unpack_weight(Tensor codes, Tensor scales, Tensor zeros, str weight_format, int layout, int n, int k) -> "
        "(Tensor, Tensor, Tensor)");
  m.def("quantize_act(Tensor x, str act_format) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(humming, CPU, m) {
  m.impl("gemm", &humming::gemm_impl);
  m.impl("pack_weight", &humming::pack_weight_impl);
  m.impl("unpack_weight", &humming::unpack_weight_impl);
  m.impl("quantize_act", &humming::quantize_act_impl);
}

TORCH_LIBRARY_IMPL(humming, CUDA, m) {
  m.impl("gemm", &humming::gemm_impl);
  m.impl("pack_weight", &humming::pack_weight_impl);
  m.impl("unpack_weight", &humming::unpack_weight_impl);
  m.impl("quantize_act", &humming::quantize_act_impl);
}

PYBIND11_MODULE(_C, m) {
  using namespace humming;
  m.doc() = "humming_aot._C: torch ops under torch.ops.humming, plus the torch-free registry and build facts";
  // QuantLinear's eager path: the implementation behind torch.ops.humming.gemm, called without
  // the dispatcher, whose boxing of twelve arguments costs several microseconds per call. Python
  // takes it only where the dispatcher would add nothing (humming_aot/layers.py: plain tensors, no
  // autograd, no torch.compile tracing, no dispatch or function modes).
  m.def("gemm_eager", &gemm_impl, py::arg("a"), py::arg("codes"), py::arg("scales"), py::arg("zeros"),
        py::arg("global_scale"), py::arg("a_scales"), py::arg("bias"), py::arg("fmt"), py::arg("layout"), py::arg("n"),
        py::arg("k"), py::arg("instance") = "");
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
  // Loads instance `name`'s kernels on CUDA device `device` (humming::prepare_instance): (ok, why).
  m.def("prepare_instance", [](const std::string &name, int device) {
    const InstanceInfo &i = named_instance(name);
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    const Status st = prepare_instance(i);
    return py::make_tuple(st.ok, st.message);
  });
  // The stream-K scratch of CUDA device `device`'s current stream, allocated and zeroed now (the
  // buffer kernel_workspace keeps), so that a first GEMM call pays neither the allocation nor the
  // fill kernel's module load.
  m.def("warm_workspace", [](int device) {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    const at::Device dev(at::kCUDA, static_cast<c10::DeviceIndex>(device));
    at::Tensor hold;
    kernel_workspace(dev, c10::cuda::getCurrentCUDAStream(dev.index()).stream(), 1, &hold);
  });
  m.def("instance_runs_on", [](const std::string &name, int cc) {
    const InstanceInfo *i = find_instance(name);
    if (!i) throw py::value_error("no compiled instance is named '" + name + "'");
    std::string why;
    const bool ok = instance_runs_on(*i, cc, &why);
    return py::make_tuple(ok, why);
  });
}
