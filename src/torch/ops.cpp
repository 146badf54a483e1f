// The torch ops of humming_aot (torch.ops.humming.*) on torch's stable ABI: this library
// (humming_aot/_torch_ops.so) uses only torch's stable C shim and its header-only C++ wrappers
// (torch/csrc/stable, torch/headeronly), built for the oldest torch the package supports
// (TORCH_TARGET_VERSION, 2.11), so one build loads into that torch and every later one. It turns
// tensors into pointers, extents and a stream and calls libhumming; the torch-free parts (registry,
// formats, build facts) are the pybind11 module humming_aot._C, and the fake (meta) kernels live in
// humming_aot/ops.py.
//
// Errors: a bad argument throws std::invalid_argument, which reaches Python as ValueError (pybind11
// maps it so; the stable ABI has no typed torch errors, so dtype mistakes are ValueErrors too); a
// failed CUDA call or an internal error throws std::runtime_error (RuntimeError).
#include <cuda_runtime_api.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "humming/humming.h"
#include "humming/scheduler/moe_route.h"

namespace humming {
namespace torch_ops {
namespace {

using torch::headeronly::ScalarType;
using Tensor = torch::stable::Tensor;

// ---- error messages ------------------------------------------------------------------------------

inline void append(std::string &s, const char *v) { s += v; }
inline void append(std::string &s, const std::string &v) { s += v; }
template <class T, std::enable_if_t<std::is_integral_v<T>, int> = 0> void append(std::string &s, T v) {
  s += std::to_string(v);
}
inline void append(std::string &s, torch::headeronly::IntHeaderOnlyArrayRef v) {
  s += "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  s += "]";
}
inline void append(std::string &s, ScalarType t) { s += torch::headeronly::toString(t); }
inline void append(std::string &s, const torch::stable::Device &d) {
  if (d.is_cpu()) {
    s += "cpu";
  } else if (d.is_cuda()) {
    s += "cuda:" + std::to_string(static_cast<int>(d.index()));
  } else {
    s += "device type " + std::to_string(static_cast<int>(d.type()));
  }
}
template <class... A> std::string msg(const A &...a) {
  std::string s;
  (append(s, a), ...);
  return s;
}

// Argument errors (ValueError in Python) and failures (RuntimeError).
template <class... A> void require(bool cond, const A &...a) {
  if (!cond) throw std::invalid_argument(msg(a...));
}
template <class... A> void ensure(bool cond, const A &...a) {
  if (!cond) throw std::runtime_error(msg(a...));
}
void check(const Status &st) { require(st.ok, st.message); }

// ---- conversions ---------------------------------------------------------------------------------

// The torch dtype a tensor of values of type `t` is stored in. e8m0 is kept as raw exponent bytes.
ScalarType storage_type(DType t) {
  if (t == dtypes::f32) return ScalarType::Float;
  if (t == dtypes::f16) return ScalarType::Half;
  if (t == dtypes::bf16) return ScalarType::BFloat16;
  if (t == dtypes::e4m3) return ScalarType::Float8_e4m3fn;
  if (t == dtypes::e5m2) return ScalarType::Float8_e5m2;
  if (t == dtypes::i8) return ScalarType::Char;
  return ScalarType::Byte;
}

DType dtype_of(ScalarType s) {
  switch (s) {
  case ScalarType::Float:
    return dtypes::f32;
  case ScalarType::Half:
    return dtypes::f16;
  case ScalarType::BFloat16:
    return dtypes::bf16;
  default:
    return dtypes::none;
  }
}

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

bool same_device(const torch::stable::Device &a, const torch::stable::Device &b) {
  return a.type() == b.type() && a.index() == b.index();
}

// `ref` names the tensor whose device the call runs on (the activations of a GEMM, the codes of a
// pack or an unpack).
void check_tensor(const Tensor &t, const char *what, ScalarType dtype, const torch::stable::Device &device,
                  const char *ref = "the activations") {
  require(t.scalar_type() == dtype, what, " must have dtype ", dtype, ", got ", t.scalar_type());
  require(same_device(t.device(), device), what, " is on ", t.device(), " but ", ref, " are on ", device,
          "; every tensor of one call must be on the same device");
}

void check_shape(const Tensor &t, const char *what, std::initializer_list<int64_t> shape) {
  const torch::headeronly::IntHeaderOnlyArrayRef want(shape);
  const auto got = t.sizes();
  bool same = got.size() == want.size();
  for (size_t i = 0; same && i < want.size(); ++i) same = got[i] == want[i];
  require(same, what, " has shape ", got, "; expected ", want);
  require(t.is_contiguous(), what, " must be contiguous");
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
  ensure(cc > 0, why);
  if (index >= 0 && index < 64) cache[index] = cc;
  return cc;
}

// A contiguous tensor of `sizes` and `dtype` on `dev`, straight from the shim's
// empty_strided (the stable new_empty goes through the dispatcher: more host time per call).
Tensor empty_on(const torch::stable::Device &dev, std::initializer_list<int64_t> sizes, ScalarType dtype) {
  std::array<int64_t, 4> shape{}, strides{};
  const int64_t dims = static_cast<int64_t>(sizes.size());
  std::copy(sizes.begin(), sizes.end(), shape.begin());
  int64_t step = 1;
  for (int64_t i = dims - 1; i >= 0; --i) strides[i] = step, step *= std::max<int64_t>(shape[i], 1);
  AtenTensorHandle out = nullptr;
  ensure(aoti_torch_empty_strided(dims, shape.data(), strides.data(), static_cast<int32_t>(dtype),
                                  static_cast<int32_t>(dev.type()), static_cast<int32_t>(dev.index()),
                                  &out) == AOTI_TORCH_SUCCESS,
         "allocating a tensor of ", dims, " dimensions on ", dev, " failed");
  return Tensor(out);
}

// The current stream torch keeps for CUDA device `index` (the stable C shim's accessor).
cudaStream_t current_stream(int index) {
  void *stream = nullptr;
  ensure(aoti_torch_get_current_cuda_stream(index, &stream) == AOTI_TORCH_SUCCESS,
         "cannot get torch's current CUDA stream of device ", index);
  return static_cast<cudaStream_t>(stream);
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
    int64_t m; // rows (grouped GEMMs: the rows per expert the choice was made for)
    int device, cc, sms;
    bool grouped;
    const InstanceInfo *inst;
    // Grouped GEMMs: inst (the base tile) and its twins (the lone walk, the wide tile), where the build
    // has them; each call then picks among them from its routed rows (grouped_pick).
    GroupedVariants variants;
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
    require(p->named != nullptr, "no compiled instance is named '", instance,
            "'; humming_aot.registry.instances() lists the ", instance_count(), " of this build");
  }
  p->fmt_text = fmt_text, p->instance_name = instance, p->layout = layout, p->n = n, p->k = k;
  if (plans.size() >= 256) plans.clear(); // bounded: a model has far fewer distinct layers
  plans.push_back(std::move(p));
  return *plans.back();
}

// A new stream-K scratch buffer of `bytes` from CUDA's stream-ordered allocator, its counter region
// (the first kWorkspaceZeroBytes) zeroed, both in `stream`'s order; on failure nothing is left
// allocated and the error is cleared (the caller reports it).
cudaError_t new_zeroed_scratch(void **p, size_t bytes, cudaStream_t stream) {
  *p = nullptr;
  cudaError_t e = cudaMallocAsync(p, bytes, stream);
  if (e == cudaSuccess) e = cudaMemsetAsync(*p, 0, std::min(bytes, kWorkspaceZeroBytes), stream);
  if (e != cudaSuccess) {
    if (*p != nullptr) cudaFreeAsync(*p, stream);
    *p = nullptr;
    cudaGetLastError();
  }
  return e;
}

// HUMMING_GRAPH_SCRATCH (read at each captured launch that takes scratch): unset or 1, a captured
// graph's stream-K scratch comes from GraphScratch below (the default since session 52); 0, from the
// graph's pool, its counter region zeroed by a fill captured before each such launch (the behavior
// up to session 51), kept as a way back should a driver refuse the user objects or the allocation.
bool graph_scratch_owned() {
  const char *v = std::getenv("HUMMING_GRAPH_SCRATCH");
  return v == nullptr || std::string(v) != "0";
}

// The largest stream-K scratch a captured launch takes from GraphScratch by default; larger
// launches take the graph's pool as before. A graph's own buffer is memory of that graph alone,
// while the pool's is lent to the next allocation of the capture as soon as the launch is queued
// (and torch lets captures share a pool): a server that captures one graph per batch size (tens of them) would
// hold a buffer in each. The fill that GraphScratch saves costs about 1-3 us (GraphScratch below),
// which matters where the GEMM takes 20-60 us: tiles of up to 64 tokens, whose scratch is two fp32
// tiles per block (t8x256: 2 MiB over 132 blocks; t16x256 and t32x128: 4.1 MiB; t64x128: 8.3
// MiB), and the 128-token tiles that spread over K (scheduler/streamk.h, HeavySpread): 16.5 MiB
// over 132 blocks plus 64 KiB of counters, so 17 MiB holds them too. The limit was 16 MiB up to
// session 54, which gave those the pool and its fill; the W4A8 ones run 30-45 us since then. H200,
// session 55 (scripts/gpu_s55.sh, graph us after a read flush, e2m1 per channel x e4m3 per token,
// t128 spread, HUMMING_GRAPH_SCRATCH_MAX_MIB 16 / 17): the two launches over 16 MiB 31.5 / 29.4
// (4096 x 14336, m = 128) and 41.7 / 39.5 (m = 256), the six under it within 0.2 us. So each
// graph of a batch of up to 255 tokens holds a buffer of 2-17 MiB (and a larger one beside it
// where a later launch of the graph needs more: take() keeps what earlier launches point at), and
// the others nothing. HUMMING_GRAPH_SCRATCH_MAX_MIB (read at each captured launch that takes
// scratch; whole MiB, 0 to 1024) moves the limit, for servers that trade memory either way.
constexpr size_t kGraphScratchMaxBytes = size_t(17) << 20;
size_t graph_scratch_max_bytes() {
  const char *v = std::getenv("HUMMING_GRAPH_SCRATCH_MAX_MIB");
  if (v == nullptr || *v == '\0') return kGraphScratchMaxBytes;
  char *end = nullptr;
  const long mib = std::strtol(v, &end, 10);
  require(*end == '\0' && mib >= 0 && mib <= 1024,
          "HUMMING_GRAPH_SCRATCH_MAX_MIB must be a whole number of MiB from 0 to 1024, got '", v, "'");
  return static_cast<size_t>(mib) << 20;
}

// A captured graph's stream-K scratch: one buffer per stream and capture sequence, from CUDA's
// stream-ordered allocator, its counter region zeroed once while the capture runs (by a memset on
// a stream of our own, outside the capture) and held by the graph through a CUDA user object, whose
// destructor (which may make no CUDA call) queues it for the next call outside capture to free.
// Why not a buffer from the graph's pool, zeroed by a captured fill: that fill became a node that
// every replay ran between the kernel before the GEMM and the GEMM, which then waited on it instead
// of overlapping the kernel before (programmatic launch, backend/pdl.h). Measured on an H100
// (session 51, W4A8 e2m1 per channel, 8192 x 8192 at m = 1, whose plan splits K: quantize + GEMM
// after a sleep kernel, graph us): 20.8 against 17.7 for the same launches eagerly; 28672 x 8192,
// whose whole tiles take no scratch, 44.8 against 44.0. With this class (session 52, same points,
// two runs each): 8192 x 8192 at m = 1 / 16 19.8 / 20.2 against 20.9 / 22.8, 5120 x 13824 20.9 /
// 21.7 against 23.7 / 24.2; W4A16 u4g128 after a sleep the same within 0.2 us but 8192 x 8192 at
// m = 1, 19.9 against 19.1. The kernels on one stream of a graph run in order, so they share the
// buffer, as eager calls share the kept one.
class GraphScratch {
public:
  static GraphScratch &get() {
    static auto *g = new GraphScratch(); // never destroyed: freeing CUDA memory at exit is not safe
    return *g;
  }

  // Scratch of at least `bytes` for a launch on `stream`, which is capturing sequence `id` into
  // `graph`, on device `index`.
  void *take(int index, cudaStream_t stream, unsigned long long id, cudaGraph_t graph, size_t bytes) {
    const std::lock_guard<std::mutex> lock(mu_);
    Slot &slot = slots_[{index, stream}];
    if (slot.id == id && slot.ptr != nullptr && slot.bytes >= bytes) return slot.ptr;
    // A new buffer (a first launch of this capture, or a larger one: the launches before keep the
    // old, which the graph holds as well). The capture forbids allocations and synchronization on
    // the capturing thread in its default mode; they touch no capturing stream here.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    ensure(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess, "cannot relax the stream capture mode");
    void *p = nullptr;
    cudaStream_t &zeroing = zeroing_[index]; // the caller's device guard has selected device `index`
    cudaError_t e = zeroing != nullptr ? cudaSuccess : cudaStreamCreateWithFlags(&zeroing, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = new_zeroed_scratch(&p, bytes, zeroing);
    if (e == cudaSuccess) e = cudaStreamSynchronize(zeroing);
    cudaUserObject_t holder = nullptr;
    if (e == cudaSuccess)
      e = cudaUserObjectCreate(&holder, p, &GraphScratch::released, 1, cudaUserObjectNoDestructorSync);
    if (e == cudaSuccess) e = cudaGraphRetainUserObject(graph, holder, 1, cudaGraphUserObjectMove);
    cudaThreadExchangeStreamCaptureMode(&mode);
    if (e != cudaSuccess) {
      cudaGetLastError(); // reported here, not left for the next call
      // A holder the graph did not take still has our reference: releasing it queues p (released).
      if (holder != nullptr)
        cudaUserObjectRelease(holder, 1);
      else if (p != nullptr)
        cudaFreeAsync(p, zeroing);
      ensure(false, "preparing ", bytes, " bytes of stream-K scratch for a CUDA graph on cuda:", index,
             " failed: ", cudaGetErrorString(e));
    }
    slot = Slot{id, p, bytes};
    return p;
  }

  // Frees, in `stream`'s order, the buffers of graphs destroyed since the last call (outside
  // capture). Every eager launch with scratch asks: one relaxed load where nothing is queued.
  void free_released(cudaStream_t stream) {
    if (!pending_.load(std::memory_order_relaxed)) return;
    std::vector<void *> dead;
    {
      const std::lock_guard<std::mutex> lock(released_mu_);
      dead.swap(released_);
      pending_.store(false, std::memory_order_relaxed);
    }
    for (void *p : dead) cudaFreeAsync(p, stream);
  }

private:
  struct Slot {
    unsigned long long id = 0;
    void *ptr = nullptr;
    size_t bytes = 0;
  };
  // The user object's destructor: the graph that held `p` is gone, and its launches are done.
  static void CUDART_CB released(void *p) {
    GraphScratch &g = get();
    const std::lock_guard<std::mutex> lock(g.released_mu_);
    g.released_.push_back(p);
    g.pending_.store(true, std::memory_order_relaxed);
  }
  std::mutex mu_;
  // One per (device, stream): a stream captures one sequence at a time.
  std::map<std::pair<int, cudaStream_t>, Slot> slots_;
  std::map<int, cudaStream_t> zeroing_; // per device: the stream that zeroes new buffers
  std::mutex released_mu_;
  std::vector<void *> released_;
  std::atomic<bool> pending_{false}; // released_ is not empty
};

// Stream-K scratch (and, past it, the block-scaled sm90 kernels' transposed activation scales,
// which each launch writes before it reads them). The kernels need its first kWorkspaceZeroBytes zeroed only before
// first use (they return their tile counters to zero), so outside graph capture each (device, stream) keeps one buffer
// and reuses it: no memset launch per call. Kernels on one stream run in order, so they may share it. The kept buffers
// come from CUDA's stream-ordered allocator, not torch's: a first call on a new stream can happen while torch routes
// the thread's allocations to a graph pool (torch.compile's reduce-overhead warm-up runs eagerly on its own stream with
// the pool active), and a kept tensor allocated there is a persistent pool tensor that torch rejects ("tensor(s) in the
// cudagraph pool not tracked as outputs"). Growing frees the old buffer in stream order. Under graph
// capture the graph gets buffers of its own (GraphScratch) up to graph_scratch_max_bytes(), or for
// larger scratch or with HUMMING_GRAPH_SCRATCH=0 a fresh buffer from torch's allocator, that is from
// the graph's pool (only its counter region zeroed, by a fill the graph replays); either way a graph
// never points at a buffer that eager calls or another replay stream also use. The kept buffers (1 MiB to 256 MiB per
// stream that ran a stream-K launch, and those of live graphs) do not show in
// torch.cuda.memory_allocated.
void *kernel_workspace(int index, cudaStream_t stream, size_t bytes, std::optional<Tensor> *hold) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  unsigned long long capture_id = 0;
  cudaGraph_t graph = nullptr;
  ensure(cudaStreamGetCaptureInfo(stream, &capture, &capture_id, &graph) == cudaSuccess,
         "cannot query the stream's capture state");
  if (capture == cudaStreamCaptureStatusActive && graph_scratch_owned() && bytes <= graph_scratch_max_bytes())
    return GraphScratch::get().take(index, stream, capture_id, graph, bytes);
  if (capture == cudaStreamCaptureStatusNone) GraphScratch::get().free_released(stream);
  constexpr size_t kKeepLimit = size_t(256) << 20; // larger scratch is not kept between calls
  if (capture != cudaStreamCaptureStatusNone || bytes > kKeepLimit) {
    *hold = empty_on(torch::stable::Device(torch::headeronly::DeviceType::CUDA, index), {static_cast<int64_t>(bytes)},
                     ScalarType::Byte);
    Tensor head = torch::stable::narrow(**hold, 0, 0, static_cast<int64_t>(std::min(bytes, kWorkspaceZeroBytes)));
    torch::stable::zero_(head);
    return (*hold)->data_ptr();
  }
  struct Kept {
    void *ptr = nullptr;
    size_t bytes = 0;
  };
  static std::mutex mu;
  // Never destroyed: releasing CUDA memory during interpreter shutdown is not safe.
  static auto *kept = new std::map<std::pair<int, cudaStream_t>, Kept>();
  const std::lock_guard<std::mutex> lock(mu);
  Kept &buf = (*kept)[{index, stream}];
  if (buf.ptr == nullptr || buf.bytes < bytes) {
    const size_t size = std::max(bytes, std::min(kKeepLimit, size_t(1) << 20));
    if (buf.ptr != nullptr) {
      ensure(cudaFreeAsync(buf.ptr, stream) == cudaSuccess, "freeing the stream-K scratch failed");
      buf = Kept{};
    }
    void *p = nullptr;
    const cudaError_t e = new_zeroed_scratch(&p, size, stream);
    ensure(e == cudaSuccess, "allocating ", size, " bytes of stream-K scratch on cuda:", index,
           " failed: ", cudaGetErrorString(e));
    buf = Kept{p, size};
  }
  return buf.ptr;
}

// Launches `inst` on device `index`'s current stream with the scratch its plan needs (stream-K
// partials and counters: kernel_workspace), for dense and grouped GEMMs alike.
void launch_on_gpu(GemmArgs &args, const InstanceInfo &inst, int index) {
  const cudaStream_t stream = current_stream(index);
  std::optional<Tensor> workspace; // holds scratch allocated for this call only
  const size_t ws = inst.workspace_bytes != nullptr ? inst.workspace_bytes(args) : 0;
  if (ws > 0) {
    args.workspace = kernel_workspace(index, stream, ws, &workspace);
    args.workspace_bytes = ws;
  }
  check(humming::gemm(args, inst, stream));
}

// The activations of a GEMM [m, k] (checked) into args.
void set_activations(GemmArgs &args, const Tensor &a, int64_t k) {
  require(a.dim() == 2, "activations must be 2-D [m, k], got ", a.dim(), "-D shape ", a.sizes(),
          " (flatten leading dimensions first)");
  require(a.size(1) == k, "activations have ", a.size(1), " columns but the weight has k=", k);
  check_tensor(a, "activations", storage_type(args.fmt.act.type), a.device());
  require(a.stride(1) == 1 || a.size(1) == 1, "activations must have unit stride along k, got strides ", a.strides());
  require(a.size(0) <= 1 || a.stride(0) >= k, "activation row stride ", a.stride(0), " is below k=", k);
  args.m = a.size(0);
  args.a = a.data_ptr();
  args.lda = a.size(0) <= 1 ? k : a.stride(0);
}

// The output [m, n] allocated into args; on the CPU the reference runs it (true: done).
bool output_or_cpu(GemmArgs &args, Tensor &out, const torch::stable::Device &dev, int64_t n) {
  out = empty_on(dev, {args.m, n}, storage_type(args.fmt.out));
  args.out = out.data_ptr();
  args.ldo = n;
  if (!dev.is_cpu()) return false;
  check(gemm_cpu(args));
  return true;
}

// The arguments every GEMM of a call plan starts from: its format, layout and padded extents.
GemmArgs plan_args(const CallPlan &plan) {
  GemmArgs args;
  args.fmt = plan.fmt;
  args.layout = static_cast<int>(plan.layout);
  args.dims = plan.dims;
  return args;
}

// The activations' scales into args where their format has them, else none: fp32 [m, cols] (a
// column per K group, or one per token), or for masked activations [experts, capacity, cols]
// (`capacity` > 0).
void set_act_scales(GemmArgs &args, const std::optional<Tensor> &a_scales, const torch::stable::Device &dev, int64_t k,
                    int64_t capacity = 0) {
  if (args.fmt.act.granularity != ActScale::kNone) {
    require(a_scales.has_value(), "activation format ", to_string(args.fmt.act),
            " needs activation scales (quantize with torch.ops.humming.quantize_act)");
    check_tensor(*a_scales, "activation scales", ScalarType::Float, dev);
    const int64_t group = args.fmt.act.granularity == ActScale::kGroup ? args.fmt.act.group_k : k;
    const int64_t cols = (k + group - 1) / group;
    if (capacity > 0)
      check_shape(*a_scales, "activation scales", {args.m / capacity, capacity, cols});
    else
      check_shape(*a_scales, "activation scales", {args.m, cols});
    args.a_scales = static_cast<const float *>(a_scales->data_ptr());
    args.a_scale_cols = cols;
  } else {
    require(!a_scales.has_value(), "activation format ", to_string(args.fmt.act), " takes no scales");
  }
}

// torch.ops.humming.gemm (gemm, below), and with `early_weights` the GEMM of quantize-and-GEMM
// (GemmArgs::early_weights: the caller has just launched quantize_act's kernel on this stream, and
// nothing else since).
Tensor gemm_with(const Tensor &a, const Tensor &codes, const std::optional<Tensor> &scales,
                 const std::optional<Tensor> &zeros, const std::optional<Tensor> &global_scale,
                 const std::optional<Tensor> &a_scales, const std::optional<Tensor> &bias, const std::string &fmt_text,
                 int64_t layout, int64_t n, int64_t k, const std::string &instance, bool early_weights) {
  CallPlan &plan = call_plan(fmt_text, layout, n, k, instance);
  GemmArgs args = plan_args(plan);
  args.early_weights = early_weights ? 1 : 0;
  const PackedDims &d = args.dims;
  const torch::stable::Device dev = a.device();
  const WeightFormat &w = args.fmt.weight;

  set_activations(args, a, k);

  check_tensor(codes, "packed codes", ScalarType::Int, dev);
  check_shape(codes, "packed codes", {d.n_pad, d.words_per_row});
  args.codes = static_cast<const uint32_t *>(codes.data_ptr());
  if (w.has_scale()) {
    require(scales.has_value(), "weight format ", to_string(w), " needs scales");
    check_tensor(*scales, "scales", storage_type(w.scale), dev);
    check_shape(*scales, "packed scales", {d.k_groups, d.n_groups});
    args.scales = scales->data_ptr();
  } else {
    require(!scales.has_value(), "weight format ", to_string(w), " takes no scales");
  }
  if (w.zero != ZeroKind::kNone) {
    require(zeros.has_value(), "weight format ", to_string(w), " needs zero points");
    check_tensor(*zeros, "zero points", w.zero == ZeroKind::kInt ? ScalarType::Byte : storage_type(w.scale), dev);
    check_shape(*zeros, "packed zero points", {d.k_groups, d.n_groups});
    args.zeros = zeros->data_ptr();
  } else {
    require(!zeros.has_value(), "weight format ", to_string(w), " takes no zero points");
  }
  if (w.global_scale) {
    require(global_scale.has_value(), "weight format ", to_string(w), " needs a global scale");
    check_tensor(*global_scale, "global scale", ScalarType::Float, dev);
    require(global_scale->numel() == 1, "the global scale holds one value, got ", global_scale->numel());
    args.global_scale = static_cast<const float *>(global_scale->data_ptr());
  } else {
    require(!global_scale.has_value(), "weight format ", to_string(w), " takes no global scale");
  }
  set_act_scales(args, a_scales, dev, k);
  if (bias.has_value()) {
    check_tensor(*bias, "bias", storage_type(args.fmt.out), dev);
    check_shape(*bias, "bias", {n});
    args.bias = bias->data_ptr();
  }
  Tensor out;
  if (output_or_cpu(args, out, dev, n)) return out;
  require(dev.is_cuda(), "humming.gemm runs on CPU or CUDA tensors, got ", dev);
  const int index = static_cast<int>(dev.index());
  const torch::stable::accelerator::DeviceGuard guard(dev.index());
  const int cc = device_cc(index);
  args.num_sms = device_sms(index);
  const InstanceInfo *inst = plan.named;
  if (inst == nullptr) {
    for (const auto &c : plan.chosen)
      if (c.m == args.m && c.device == index && c.cc == cc && c.sms == args.num_sms && !c.grouped) inst = c.inst;
    // A cached choice can still refuse this call's pointers or strides (alignment): choose again.
    if (inst != nullptr && !inst->can_implement(args)) {
      std::string why;
      inst = select_instance(args, cc, args.num_sms, &why);
      require(inst != nullptr, why);
    } else if (inst == nullptr) {
      std::string why;
      inst = select_instance(args, cc, args.num_sms, &why);
      require(inst != nullptr, why);
      if (plan.chosen.size() >= 64) plan.chosen.clear();
      plan.chosen.push_back({args.m, index, cc, args.num_sms, false, inst});
    }
  }
  launch_on_gpu(args, *inst, index);
  return out;
}

Tensor gemm(const Tensor &a, const Tensor &codes, const std::optional<Tensor> &scales,
            const std::optional<Tensor> &zeros, const std::optional<Tensor> &global_scale,
            const std::optional<Tensor> &a_scales, const std::optional<Tensor> &bias, const std::string &fmt_text,
            int64_t layout, int64_t n, int64_t k, const std::string &instance) {
  return gemm_with(a, codes, scales, zeros, global_scale, a_scales, bias, fmt_text, layout, n, k, instance, false);
}

// The experts' stacked packed weights of a grouped (MoE) GEMM into args: codes
// [E][n_pad][words_per_row], scales and zero points [E][k_groups][n_groups].
void set_experts(GemmArgs &args, const Tensor &codes, const std::optional<Tensor> &scales,
                 const std::optional<Tensor> &zeros, const torch::stable::Device &dev) {
  const PackedDims &d = args.dims;
  const WeightFormat &w = args.fmt.weight;
  require(!w.global_scale, "grouped (MoE) GEMMs take no global scale yet, got ", to_string(args.fmt));
  require(codes.dim() == 3, "the experts' codes must be stacked [experts, n_pad, words], got shape ", codes.sizes());
  const int64_t experts = codes.size(0);
  require(experts >= 1 && experts <= 4096, "1 to 4096 experts, got ", experts);
  check_tensor(codes, "packed codes", ScalarType::Int, dev);
  check_shape(codes, "packed codes", {experts, d.n_pad, d.words_per_row});
  args.codes = static_cast<const uint32_t *>(codes.data_ptr());
  // Each of the three tensors is contiguous [experts, ...] (checked here): stacked back to back.
  set_stacked_experts(args, static_cast<int32_t>(experts));
  if (w.has_scale()) {
    require(scales.has_value(), "weight format ", to_string(w), " needs scales");
    check_tensor(*scales, "scales", storage_type(w.scale), dev);
    check_shape(*scales, "packed scales", {experts, d.k_groups, d.n_groups});
    args.scales = scales->data_ptr();
  } else {
    require(!scales.has_value(), "weight format ", to_string(w), " takes no scales");
  }
  if (w.zero != ZeroKind::kNone) {
    require(zeros.has_value(), "weight format ", to_string(w), " needs zero points");
    const bool int_zero = w.zero == ZeroKind::kInt;
    check_tensor(*zeros, "zero points", int_zero ? ScalarType::Byte : storage_type(w.scale), dev);
    check_shape(*zeros, "packed zero points", {experts, d.k_groups, d.n_groups});
    args.zeros = zeros->data_ptr();
  } else {
    require(!zeros.has_value(), "weight format ", to_string(w), " takes no zero points");
  }
}

// Runs a grouped GEMM whose arguments are set (out allocated as [m, n] or a view of it): on the
// CPU reference, or on the instance named in the plan, or else the one the library picks for a
// grouped GEMM of rows_per_expert rows per expert (select_grouped_instance; cached per plan, as gemm's), or
// the variant of it args.expert_assignments asks for (grouped_pick: the wide tile, the lone walk;
// plain comparisons on every call, so that the cache keeps one entry per rows_per_expert).
// grouped_instance: the choice; run_grouped: the choice, then its launch (on the CPU, the reference).
const InstanceInfo &grouped_instance(GemmArgs &args, CallPlan &plan, int index, int64_t rows_per_expert) {
  const int cc = device_cc(index);
  args.num_sms = device_sms(index);
  const InstanceInfo *inst = plan.named;
  const int64_t rows = std::max<int64_t>(1, rows_per_expert);
  if (inst == nullptr) {
    const GroupedVariants *cached = nullptr;
    for (const auto &c : plan.chosen)
      if (c.m == rows && c.device == index && c.cc == cc && c.sms == args.num_sms && c.grouped) cached = &c.variants;
    // The variant this call's routed rows ask for. As gemm's: one that refuses this call's pointers
    // or strides is chosen again, without caching over the entry.
    inst = cached != nullptr ? grouped_pick(*cached, args, args.num_sms) : nullptr;
    if (inst == nullptr || !inst->can_implement(args)) {
      GemmArgs like = args;
      like.expert_assignments = -1; // the base tile; its variant is picked below
      std::string why;
      const InstanceInfo *base = select_grouped_instance(like, rows, cc, args.num_sms, &why);
      require(base != nullptr, why);
      const GroupedVariants variants = grouped_variants(*base, args, cc); // each checked against this call
      if (cached == nullptr) {
        if (plan.chosen.size() >= 64) plan.chosen.clear();
        plan.chosen.push_back({rows, index, cc, args.num_sms, true, base, variants});
      }
      inst = grouped_pick(variants, args, args.num_sms);
    }
  }
  return *inst;
}

void run_grouped(GemmArgs &args, CallPlan &plan, const torch::stable::Device &dev, int64_t rows_per_expert,
                 const char *op) {
  if (dev.is_cpu()) return check(gemm_cpu(args));
  if (args.m == 0) return;
  require(dev.is_cuda(), "humming.", op, " runs on CPU or CUDA tensors, got ", dev);
  const int index = static_cast<int>(dev.index());
  const torch::stable::accelerator::DeviceGuard guard(dev.index());
  // The K-split grouped tiles (named _ks) take stream-K scratch; the others none.
  launch_on_gpu(args, grouped_instance(args, plan, index, rows_per_expert), index);
}

// The experts' activation (MoeActivation) of the gate-up outputs h [m, n] of a grouped GEMM with
// `args` into out [m, n / 2]: the bias from args.glu_bias, for the rows' experts (args.expert_offsets).
void activate_rows(const GemmArgs &args, const Tensor &h, const Tensor &out, const torch::stable::Device &dev) {
  MoeActivation act;
  act.h_type = act.out_type = args.fmt.out;
  act.h = h.data_ptr();
  act.rows = args.m;
  act.inter = args.dims.n / 2;
  act.ldh = args.dims.n;
  act.bias = args.glu_bias;
  // The rows' experts only where a bias needs them (each row's expert is a search).
  act.offsets = args.glu_bias != nullptr ? args.expert_offsets : nullptr;
  act.experts = args.glu_bias != nullptr ? args.experts : 1;
  act.kind = args.glu;
  act.limit = args.glu_limit;
  act.alpha = args.glu_alpha;
  act.out = out.data_ptr();
  if (dev.is_cpu()) return check(moe_activation_cpu(act));
  const torch::stable::accelerator::DeviceGuard guard(dev.index());
  check(moe_activation_cuda(act, current_stream(static_cast<int>(dev.index()))));
}

// Grouped (MoE) GEMM, contiguous rows: rows [offsets[e], offsets[e + 1]) of `a` times expert e's
// weight (set_experts); offsets int32 [E + 1] on a's device (read only by the kernel on a GPU).
// `rows_per_expert` (host-known, e.g. tokens x top_k / E) picks the tile (select_grouped_instance);
// `assignments` (tokens x top_k, or -1 where unknown) its channel width and the producer's walk over
// the experts' tiles (humming.h, grouped_pick).
// `activation` (silu or swiglu-oai, with `limit` and `alpha`; "" for none): the experts' gated
// activation of the weight's gate rows [0, n / 2) and up rows [n / 2, n), with `activation_bias`
// fp32 [E, n] (gate first) where given; out is then [rows, n / 2]. On a GPU, in +experimental
// builds, the GEMM's epilogue computes it where the instance can (GemmArgs::glu: n a multiple of
// 128, a tile with the shared memory for it; an instance named in `instance` that cannot is an
// error); else the plain GEMM and the activation kernel run one after the other: the same values,
// bit for bit.
Tensor moe_gemm(const Tensor &a, const Tensor &codes, const std::optional<Tensor> &scales,
                const std::optional<Tensor> &zeros, const Tensor &offsets, const std::string &fmt_text, int64_t layout,
                int64_t n, int64_t k, int64_t rows_per_expert, const std::string &instance, int64_t assignments,
                const std::string &activation, double limit, double alpha, const std::optional<Tensor> &activation_bias,
                const std::optional<Tensor> &a_scales) {
  CallPlan &plan = call_plan(fmt_text, layout, n, k, instance);
  GemmArgs args = plan_args(plan);
  const torch::stable::Device dev = a.device();
  set_activations(args, a, k);
  set_act_scales(args, a_scales, dev, k);
  set_experts(args, codes, scales, zeros, dev);
  check_tensor(offsets, "expert row offsets", ScalarType::Int, dev);
  check_shape(offsets, "expert row offsets", {args.experts + 1});
  args.expert_offsets = static_cast<const int32_t *>(offsets.data_ptr());
  args.expert_assignments = assignments;
  if (activation.empty()) {
    require(!activation_bias.has_value(), "an activation bias needs an activation (silu or swiglu-oai)");
    Tensor out = empty_on(dev, {args.m, n}, storage_type(args.fmt.out));
    args.out = out.data_ptr();
    args.ldo = n;
    run_grouped(args, plan, dev, rows_per_expert, "moe_gemm");
    return out;
  }
  require(activation == "silu" || activation == "swiglu-oai", "activation must be silu or swiglu-oai (or none), got '",
          activation, "'");
  require(n % 2 == 0, "a gated activation takes the gate and up halves of an even n, got n=", n);
  const int32_t glu = activation == "silu" ? moe_route::kActSilu : moe_route::kActSwigluOai;
  const float *glu_bias = nullptr;
  if (activation_bias.has_value()) {
    check_tensor(*activation_bias, "the activation bias", ScalarType::Float, dev, "the activations");
    check_shape(*activation_bias, "the activation bias", {args.experts, n});
    glu_bias = static_cast<const float *>(activation_bias->data_ptr());
  }
  Tensor out = empty_on(dev, {args.m, n / 2}, storage_type(args.fmt.out));
  // `g` with the activation's fields (args itself keeps glu = -1: the plain GEMM, chosen as such).
  const auto with_glu = [&](GemmArgs g) {
    g.glu = glu, g.glu_limit = static_cast<float>(limit), g.glu_alpha = static_cast<float>(alpha);
    g.glu_bias = glu_bias;
    return g;
  };
  const auto plain_then_activate = [&] {
    Tensor h = empty_on(dev, {args.m, n}, storage_type(args.fmt.out));
    args.out = h.data_ptr();
    args.ldo = n;
    run_grouped(args, plan, dev, rows_per_expert, "moe_gemm");
    activate_rows(with_glu(args), h, out, dev);
  };
  // The epilogue's activation is experimental: correct (session 38, H100: bit for bit the plain
  // GEMM then the activation kernel on every grouped tile, compute-sanitizer clean) but slower than
  // those two launches at 31 of 32 measured points (scripts/bench_moe.py: Mixtral-8x7B's gate-up at
  // 64 tokens 264 against 213 us, Qwen3-30B-A3B's at one token 18.8 against 16.7), so only builds
  // with +experimental take it; the others run the plain GEMM and the activation kernel, the same
  // values. The same for the two-block tiles, which pair gate and up in their registers (session
  // 65, H100, scripts/moe_spill.py --glu silu: Mixtral-8x7B's gate-up at 4096 tokens in
  // t176x256x64 4865 us against 3299 for the GEMM and the activation kernel, t128x128x128's
  // exchange 4398 against 3457).
  const bool fused_built = std::strstr(build_profile(), "experimental") != nullptr;
  if (dev.is_cpu() || args.m == 0 || n % 128 != 0 || !fused_built) {
    plain_then_activate();
    return out;
  }
  require(dev.is_cuda(), "humming.moe_gemm runs on CPU or CUDA tensors, got ", dev);
  const int index = static_cast<int>(dev.index());
  const torch::stable::accelerator::DeviceGuard guard(dev.index());
  const InstanceInfo &inst = grouped_instance(args, plan, index, rows_per_expert); // chosen as without it
  GemmArgs fused = with_glu(args);
  fused.out = out.data_ptr();
  fused.ldo = n / 2;
  const Status st = inst.can_implement(fused);
  if (st) {
    launch_on_gpu(fused, inst, index);
  } else {
    require(plan.named == nullptr, "instance ", inst.name,
            " cannot compute the activation in its epilogue: ", st.message);
    plain_then_activate();
  }
  return out;
}

// Grouped (MoE) GEMM, masked rows: `a` [E, capacity, k] holds a slot of `capacity` rows per expert,
// of which the first counts[e] are expert e's (counts int32 [E] on a's device); out [E, capacity,
// n] gets those rows; the rest of each slot is not written on a GPU (zeros on the CPU).
Tensor moe_gemm_masked(const Tensor &a, const Tensor &codes, const std::optional<Tensor> &scales,
                       const std::optional<Tensor> &zeros, const Tensor &counts, const std::string &fmt_text,
                       int64_t layout, int64_t n, int64_t k, int64_t rows_per_expert, const std::string &instance,
                       int64_t assignments, const std::optional<Tensor> &a_scales) {
  CallPlan &plan = call_plan(fmt_text, layout, n, k, instance);
  GemmArgs args = plan_args(plan);
  const torch::stable::Device dev = a.device();
  require(a.dim() == 3, "masked activations must be 3-D [experts, capacity, k], got ", a.dim(), "-D shape ", a.sizes());
  const int64_t experts = a.size(0), capacity = a.size(1);
  require(capacity >= 1, "masked activations need a capacity of at least one row per expert, got shape ", a.sizes());
  require(experts == 1 || a.stride(0) == capacity * a.stride(1),
          "masked activations must have evenly spaced rows (stride(0) = capacity x stride(1)), got strides ",
          a.strides());
  // The slots as the rows of one [E x capacity, k] matrix of row stride stride(1).
  require(a.size(2) == k, "activations have ", a.size(2), " inputs but the weight has k=", k);
  check_tensor(a, "activations", storage_type(args.fmt.act.type), dev);
  require(a.stride(2) == 1 || k == 1, "activations must have unit stride along k, got strides ", a.strides());
  require(a.stride(1) >= k, "activation row stride ", a.stride(1), " is below k=", k);
  args.m = experts * capacity;
  args.a = a.data_ptr();
  args.lda = a.stride(1);
  set_act_scales(args, a_scales, dev, k, capacity);
  set_experts(args, codes, scales, zeros, dev);
  require(codes.size(0) == experts, "the activations have slots for ", experts, " experts but the codes stack ",
          codes.size(0));
  check_tensor(counts, "expert row counts", ScalarType::Int, dev);
  check_shape(counts, "expert row counts", {experts});
  args.expert_counts = static_cast<const int32_t *>(counts.data_ptr());
  args.expert_capacity = capacity;
  args.expert_assignments = assignments;
  Tensor out = empty_on(dev, {experts, capacity, n}, storage_type(args.fmt.out));
  // The CPU reference leaves zeros past each count (so that its output is one well-defined
  // tensor); the GPU leaves those rows as allocated (writing them would cost a decode step more
  // than its GEMM, and no caller reads them).
  if (dev.is_cpu()) torch::stable::zero_(out);
  args.out = out.data_ptr();
  args.ldo = n;
  run_grouped(args, plan, dev, rows_per_expert, "moe_gemm_masked");
  return out;
}

// Copies an error message into a caller's buffer of `size` bytes (the C entry points below).
void report(char *error, size_t size, const char *what) {
  if (size == 0) return;
  std::strncpy(error, what, size - 1);
  error[size - 1] = '\0';
}

// A new owning stable tensor for a borrowed handle (null: none).
std::optional<Tensor> borrowed(AtenTensorHandle h) {
  if (h == nullptr) return std::nullopt;
  AtenTensorHandle own = nullptr;
  ensure(aoti_torch_new_tensor_handle(h, &own) == AOTI_TORCH_SUCCESS, "cannot reference a tensor argument");
  return Tensor(own);
}

// ---- pack / unpack -------------------------------------------------------------------------------

// The largest value of a uint8 tensor, read back to the host (one reduction; on a GPU one sync).
int64_t largest_code(const Tensor &codes) {
  const int64_t dims[2] = {0, 1};
  Tensor widest = torch::stable::amax(codes, torch::headeronly::IntHeaderOnlyArrayRef(dims, 2));
  if (!widest.is_cpu())
    widest = torch::stable::to(widest, std::nullopt, std::nullopt,
                               torch::stable::Device(torch::headeronly::DeviceType::CPU));
  return *static_cast<const uint8_t *>(widest.data_ptr());
}

// The device guard and current stream of a call on `dev` (no guard, null stream on the CPU).
struct OnDevice {
  std::optional<torch::stable::accelerator::DeviceGuard> guard;
  void *stream = nullptr;
  explicit OnDevice(const torch::stable::Device &dev) {
    if (dev.is_cuda()) {
      guard.emplace(dev.index());
      stream = current_stream(static_cast<int>(dev.index()));
    }
  }
};

std::tuple<Tensor, Tensor, Tensor> pack_weight(const Tensor &codes_in, const std::optional<Tensor> &scales,
                                               const std::optional<Tensor> &zeros, const std::string &wfmt,
                                               int64_t layout) {
  const WeightFormat w = parse_weight(wfmt);
  require(codes_in.dim() == 2, "codes must be 2-D [n, k], got shape ", codes_in.sizes());
  require(codes_in.scalar_type() == ScalarType::Byte, "codes must be uint8 bit patterns, got ", codes_in.scalar_type());
  PackedDims d;
  check(packed_dims(static_cast<int>(layout), w, codes_in.size(0), codes_in.size(1), &d));
  const torch::stable::Device dev = codes_in.device();
  require(dev.is_cpu() || dev.is_cuda(), "pack_weight runs on CPU or CUDA tensors, got ", dev);
  const Tensor codes = torch::stable::contiguous(codes_in);
  // The packers keep each code's low bits only: a wider code would change silently. (One
  // reduction, and on a GPU one synchronization, per packed weight.)
  const int bits = static_cast<int>(w.code.bits);
  if (bits < 8 && codes.numel() > 0) {
    const int64_t widest = largest_code(codes);
    require(widest < (int64_t(1) << bits), "code ", widest, " does not fit in the ", bits, " bits of weight format ",
            wfmt, "; codes are 0..", (1 << bits) - 1);
  }
  Tensor packed = empty_on(dev, {d.n_pad, d.words_per_row}, ScalarType::Int);
  Tensor out_scales = empty_on(dev, {0}, ScalarType::Byte);
  Tensor out_zeros = empty_on(dev, {0}, ScalarType::Byte);
  const OnDevice on(dev);
  auto *packed_ptr = static_cast<uint32_t *>(packed.data_ptr());
  const auto *codes_ptr = static_cast<const uint8_t *>(codes.data_ptr());
  check(dev.is_cpu() ? pack_codes_cpu(static_cast<int>(layout), w, d, codes_ptr, packed_ptr)
                     : pack_codes_cuda(static_cast<int>(layout), w, d, codes_ptr, packed_ptr, on.stream));
  auto pack_grid = [&](const Tensor &t_in, const char *what, ScalarType dtype) {
    check_tensor(t_in, what, dtype, dev, "the codes");
    const Tensor t = torch::stable::contiguous(t_in);
    require(t.dim() == 2 && t.size(0) == d.n_groups_logical && t.size(1) == d.k_groups_logical, what, " have shape ",
            t.sizes(), "; weight format ", to_string(w), " with n=", d.n, ", k=", d.k, " needs [", d.n_groups_logical,
            ", ", d.k_groups_logical, "]");
    Tensor out = empty_on(dev, {d.k_groups, d.n_groups}, t.scalar_type());
    const int bytes = static_cast<int>(t.element_size());
    check(dev.is_cpu() ? pack_groups_cpu(d, bytes, t.data_ptr(), out.data_ptr())
                       : pack_groups_cuda(d, bytes, t.data_ptr(), out.data_ptr(), on.stream));
    return out;
  };
  if (w.has_scale()) {
    require(scales.has_value(), "weight format ", wfmt, " needs scales");
    out_scales = pack_grid(*scales, "scales", storage_type(w.scale));
  } else {
    require(!scales.has_value(), "weight format ", wfmt, " takes no scales");
  }
  if (w.zero != ZeroKind::kNone) {
    require(zeros.has_value(), "weight format ", wfmt, " needs zero points");
    out_zeros = pack_grid(*zeros, "zero points", w.zero == ZeroKind::kInt ? ScalarType::Byte : storage_type(w.scale));
  } else {
    require(!zeros.has_value(), "weight format ", wfmt, " takes no zero points");
  }
  return {packed, out_scales, out_zeros};
}

std::tuple<Tensor, Tensor, Tensor> unpack_weight(const Tensor &packed_in, const Tensor &scales, const Tensor &zeros,
                                                 const std::string &wfmt, int64_t layout, int64_t n, int64_t k) {
  const WeightFormat w = parse_weight(wfmt);
  PackedDims d;
  check(packed_dims(static_cast<int>(layout), w, n, k, &d));
  const torch::stable::Device dev = packed_in.device();
  check_tensor(packed_in, "packed codes", ScalarType::Int, dev);
  check_shape(packed_in, "packed codes", {d.n_pad, d.words_per_row});
  Tensor codes = empty_on(dev, {n, k}, ScalarType::Byte);
  const OnDevice on(dev);
  const auto *packed_ptr = static_cast<const uint32_t *>(packed_in.data_ptr());
  auto *codes_ptr = static_cast<uint8_t *>(codes.data_ptr());
  check(dev.is_cpu() ? unpack_codes_cpu(static_cast<int>(layout), w, d, packed_ptr, codes_ptr)
                     : unpack_codes_cuda(static_cast<int>(layout), w, d, packed_ptr, codes_ptr, on.stream));
  auto unpack_grid = [&](const Tensor &t, const char *what, ScalarType dtype) {
    check_tensor(t, what, dtype, dev, "the packed codes");
    check_shape(t, what, {d.k_groups, d.n_groups});
    Tensor out = empty_on(dev, {d.n_groups_logical, d.k_groups_logical}, t.scalar_type());
    const int bytes = static_cast<int>(t.element_size());
    check(dev.is_cpu() ? unpack_groups_cpu(d, bytes, t.data_ptr(), out.data_ptr())
                       : unpack_groups_cuda(d, bytes, t.data_ptr(), out.data_ptr(), on.stream));
    return out;
  };
  Tensor out_scales = empty_on(dev, {0}, ScalarType::Byte);
  Tensor out_zeros = empty_on(dev, {0}, ScalarType::Byte);
  if (w.has_scale()) out_scales = unpack_grid(scales, "packed scales", storage_type(w.scale));
  if (w.zero != ZeroKind::kNone)
    out_zeros =
        unpack_grid(zeros, "packed zero points", w.zero == ZeroKind::kInt ? ScalarType::Byte : storage_type(w.scale));
  return {codes, out_scales, out_zeros};
}

// ---- activation quantization ---------------------------------------------------------------------

// Runs the CPU reference on CPU tensors, the CUDA version on the tensors' device otherwise.
template <class Cpu, class Cuda>
void on_cpu_or_cuda(const torch::stable::Device &dev, const char *op, Cpu cpu, Cuda cuda) {
  if (dev.is_cpu()) return check(cpu());
  require(dev.is_cuda(), "humming.", op, " runs on CPU or CUDA tensors, got ", dev);
  const OnDevice on(dev);
  check(cuda(on.stream));
}

// What quantize_act and moe_permute_quantize (`op`) share: the activation format `afmt` and the
// activations x [_, k] checked (`dims` names x's dimensions in messages), and the outputs allocated
// for `rows` rows: codes [rows, k] in the format's storage type, fp32 scales [rows, groups].
struct ActQuantCall {
  ActFormat f;
  DType xt;
  int64_t k, ldx;
  Tensor codes, scales;
};
ActQuantCall act_quant_call(const Tensor &x, const std::string &afmt, const char *op, const char *dims, int64_t rows) {
  const ActFormat f = parse_act(afmt);
  require(f.granularity != ActScale::kNone, "activation format ", afmt, " is not quantized; ", op,
          " takes e4m3, e5m2 or i8 with -pt or -g{K}");
  require(x.dim() == 2, "activations must be 2-D [", dims, "], got shape ", x.sizes());
  const DType xt = dtype_of(x.scalar_type());
  require(xt.id() != 0, "activations to quantize must be float32, float16 or bfloat16, got ", x.scalar_type());
  require(x.size(1) > 0, "activations must have more than 0 columns");
  require(x.stride(1) == 1 || x.size(1) == 1, "activations must have unit stride along their rows");
  const int64_t k = x.size(1);
  const int64_t group = f.granularity == ActScale::kGroup ? f.group_k : k;
  const torch::stable::Device dev = x.device();
  return {f,
          xt,
          k,
          x.size(0) <= 1 ? k : x.stride(0),
          empty_on(dev, {rows, k}, storage_type(f.type)),
          empty_on(dev, {rows, (k + group - 1) / group}, ScalarType::Float)};
}

std::tuple<Tensor, Tensor> quantize_act(const Tensor &x, const std::string &afmt) {
  const int64_t m = x.dim() == 2 ? x.size(0) : 0;
  ActQuantCall c = act_quant_call(x, afmt, "quantize_act", "m, k", m);
  auto *scale_ptr = static_cast<float *>(c.scales.data_ptr());
  on_cpu_or_cuda(
      x.device(), "quantize_act",
      [&] { return quantize_act_cpu(c.f, c.xt, x.data_ptr(), m, c.k, c.ldx, c.codes.data_ptr(), scale_ptr); },
      [&](void *stream) {
        return quantize_act_cuda(c.f, c.xt, x.data_ptr(), m, c.k, c.ldx, c.codes.data_ptr(), scale_ptr, stream);
      });
  return {c.codes, c.scales};
}

// ---- mixture-of-experts routing (humming.h: moe_topk_*, moe_align_*, moe_permute_*, moe_combine_*) --

// A top-k's arguments with its outputs (weights fp32, ids int32 [tokens, top_k]) allocated.
struct TopkCall {
  MoeTopk a;
  Tensor weights, ids;
};
TopkCall topk_call(const Tensor &logits, int64_t top_k, const std::string &scoring, bool renormalize,
                   const std::optional<Tensor> &bias, int64_t n_group, int64_t topk_group, double scaling) {
  require(logits.dim() == 2, "router logits must be 2-D [tokens, experts], got shape ", logits.sizes());
  const DType lt = dtype_of(logits.scalar_type());
  require(lt.id() != 0, "router logits must be float32, float16 or bfloat16, got ", logits.scalar_type());
  require(logits.stride(1) == 1 || logits.size(1) == 1, "router logits must have unit stride along the experts");
  require(scoring == "softmax" || scoring == "sigmoid", "scoring must be softmax or sigmoid, got ", scoring);
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  require(experts >= 1 && experts <= 4096, "1 to 4096 experts, got ", experts);
  require(top_k >= 1 && top_k <= experts, "top_k must lie in [1, ", experts, "], got ", top_k);
  const torch::stable::Device dev = logits.device();
  MoeTopk a;
  a.logits = logits.data_ptr();
  a.logits_type = lt;
  a.tokens = tokens;
  a.ld = tokens <= 1 ? experts : logits.stride(0);
  a.experts = static_cast<int32_t>(experts);
  a.top_k = static_cast<int32_t>(top_k);
  a.sigmoid = scoring == "sigmoid";
  a.renormalize = renormalize;
  // The rule itself is the core's (moe_topk_check_groups); here only what 32 bits must hold.
  require(n_group >= 0 && n_group <= experts && topk_group >= 0 && topk_group <= experts,
          "n_group must be 0 (no groups) or positive, and n_group and topk_group at most the ", experts,
          " experts, got n_group=", n_group, ", topk_group=", topk_group);
  require(std::isfinite(scaling), "scaling must be finite, got ", scaling);
  a.n_group = static_cast<int32_t>(n_group);
  a.topk_group = static_cast<int32_t>(n_group > 0 ? topk_group : 0);
  a.scaling = static_cast<float>(scaling);
  if (bias.has_value()) {
    check_tensor(*bias, "correction bias", ScalarType::Float, dev, "the router logits");
    check_shape(*bias, "correction bias", {experts});
    a.bias = static_cast<const float *>(bias->data_ptr());
  }
  Tensor weights = empty_on(dev, {tokens, top_k}, ScalarType::Float);
  Tensor ids = empty_on(dev, {tokens, top_k}, ScalarType::Int);
  a.weights = static_cast<float *>(weights.data_ptr());
  a.ids = static_cast<int32_t *>(ids.data_ptr());
  return {a, weights, ids};
}

std::tuple<Tensor, Tensor> moe_topk(const Tensor &logits, int64_t top_k, const std::string &scoring, bool renormalize,
                                    const std::optional<Tensor> &bias, int64_t n_group, int64_t topk_group,
                                    double scaling) {
  TopkCall c = topk_call(logits, top_k, scoring, renormalize, bias, n_group, topk_group, scaling);
  on_cpu_or_cuda(
      logits.device(), "moe_topk", [&] { return moe_topk_cpu(c.a); },
      [&](void *stream) { return moe_topk_cuda(c.a, stream); });
  return {c.weights, c.ids};
}

// An align's arguments over `assignments` ids (int32, on dev) with its outputs allocated
// (sorted_ids, block_expert, num_padded, positions, counts, offsets).
struct AlignCall {
  MoeAlign a;
  Tensor sorted_ids, block_expert, num_padded, positions, counts, offsets;
};
AlignCall align_call(const torch::stable::Device &dev, const int32_t *ids, int64_t assignments, int64_t num_experts,
                     int64_t block_m) {
  require(num_experts >= 1 && num_experts <= 4096, "num_experts must lie in [1, 4096], got ", num_experts);
  require(block_m >= 1 && block_m <= 4096, "block_m must lie in [1, 4096], got ", block_m);
  require(assignments < (int64_t{1} << 30), "at most 2^30 assignments, got ", assignments);
  AlignCall c;
  MoeAlign &a = c.a;
  a.ids = ids;
  a.assignments = assignments;
  a.experts = static_cast<int32_t>(num_experts);
  a.block_m = static_cast<int32_t>(block_m);
  const int64_t capacity = moe_route::align_capacity(a.assignments, a.experts, a.block_m);
  const auto i32 = [&](int64_t n) { return empty_on(dev, {n}, ScalarType::Int); };
  c.sorted_ids = i32(capacity), c.block_expert = i32(capacity / block_m), c.num_padded = i32(1);
  c.positions = i32(a.assignments), c.counts = i32(num_experts), c.offsets = i32(num_experts + 1);
  a.sorted_ids = static_cast<int32_t *>(c.sorted_ids.data_ptr());
  a.block_expert = static_cast<int32_t *>(c.block_expert.data_ptr());
  a.num_padded = static_cast<int32_t *>(c.num_padded.data_ptr());
  a.positions = static_cast<int32_t *>(c.positions.data_ptr());
  a.counts = static_cast<int32_t *>(c.counts.data_ptr());
  a.offsets = static_cast<int32_t *>(c.offsets.data_ptr());
  return c;
}

// Scratch for a GPU align, from the caching allocator, on the stream (graph capture keeps it with
// the graph).
Tensor align_scratch(const torch::stable::Device &dev, MoeAlign &a) {
  a.workspace_bytes = moe_align_workspace_bytes(a.assignments, a.experts);
  Tensor scratch = empty_on(dev, {static_cast<int64_t>(a.workspace_bytes)}, ScalarType::Byte);
  a.workspace = scratch.data_ptr();
  return scratch;
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor> moe_align(const Tensor &ids, int64_t num_experts,
                                                                     int64_t block_m) {
  require(ids.scalar_type() == ScalarType::Int, "expert ids must have dtype int32, got ", ids.scalar_type());
  require(ids.is_contiguous(), "expert ids must be contiguous");
  const torch::stable::Device dev = ids.device();
  AlignCall c = align_call(dev, static_cast<const int32_t *>(ids.data_ptr()), ids.numel(), num_experts, block_m);
  on_cpu_or_cuda(
      dev, "moe_align", [&] { return moe_align_cpu(c.a); },
      [&](void *stream) {
        Tensor scratch = align_scratch(dev, c.a);
        return moe_align_cuda(c.a, stream);
      });
  return {c.sorted_ids, c.block_expert, c.num_padded, c.positions, c.counts, c.offsets};
}

Tensor moe_permute(const Tensor &x, const Tensor &sorted_ids, int64_t top_k) {
  require(x.dim() == 2, "activations must be 2-D [tokens, hidden], got shape ", x.sizes());
  require(x.stride(1) == 1 || x.size(1) == 1, "activations must have unit stride along hidden");
  const DType t = dtype_of(x.scalar_type());
  require(t.id() != 0, "activations must be float32, float16 or bfloat16, got ", x.scalar_type());
  const torch::stable::Device dev = x.device();
  check_tensor(sorted_ids, "sorted ids", ScalarType::Int, dev);
  require(sorted_ids.dim() == 1 && sorted_ids.is_contiguous(), "sorted ids must be a contiguous 1-D tensor");
  require(top_k >= 1, "top_k must be positive, got ", top_k);
  const int64_t hidden = x.size(1), capacity = sorted_ids.size(0), assignments = x.size(0) * top_k;
  const int64_t ldx = x.size(0) <= 1 ? hidden : x.stride(0);
  Tensor out = empty_on(dev, {capacity, hidden}, x.scalar_type());
  const auto *ids = static_cast<const int32_t *>(sorted_ids.data_ptr());
  on_cpu_or_cuda(
      dev, "moe_permute",
      [&] { return moe_permute_cpu(t, x.data_ptr(), hidden, ldx, ids, capacity, assignments, top_k, out.data_ptr()); },
      [&](void *stream) {
        return moe_permute_cuda(t, x.data_ptr(), hidden, ldx, ids, capacity, assignments, top_k, out.data_ptr(),
                                stream);
      });
  return out;
}

std::tuple<Tensor, Tensor> moe_permute_quantize(const Tensor &x, const Tensor &sorted_ids, int64_t top_k,
                                                const std::string &afmt) {
  const torch::stable::Device dev = x.device();
  check_tensor(sorted_ids, "sorted ids", ScalarType::Int, dev);
  require(sorted_ids.dim() == 1 && sorted_ids.is_contiguous(), "sorted ids must be a contiguous 1-D tensor");
  require(top_k >= 1 && top_k <= 0x7FFFFFFF, "top_k must be positive, got ", top_k);
  const int64_t capacity = sorted_ids.size(0);
  ActQuantCall c = act_quant_call(x, afmt, "moe_permute_quantize", "tokens, hidden", capacity);
  const int64_t assignments = x.size(0) * top_k;
  const auto *ids = static_cast<const int32_t *>(sorted_ids.data_ptr());
  auto *scale_ptr = static_cast<float *>(c.scales.data_ptr());
  const auto t = static_cast<int32_t>(top_k);
  on_cpu_or_cuda(
      dev, "moe_permute_quantize",
      [&] {
        return moe_permute_quantize_cpu(c.f, c.xt, x.data_ptr(), c.k, c.ldx, ids, capacity, assignments, t,
                                        c.codes.data_ptr(), scale_ptr);
      },
      [&](void *stream) {
        return moe_permute_quantize_cuda(c.f, c.xt, x.data_ptr(), c.k, c.ldx, ids, capacity, assignments, t,
                                         c.codes.data_ptr(), scale_ptr, stream);
      });
  return {c.codes, c.scales};
}

Tensor moe_combine(const Tensor &y, const Tensor &positions, const Tensor &weights, const std::optional<Tensor> &bias,
                   const std::optional<Tensor> &ids) {
  require(y.dim() == 2 && y.is_contiguous(),
          "expert outputs must be a contiguous 2-D tensor [rows, hidden], got shape ", y.sizes());
  const DType t = dtype_of(y.scalar_type());
  require(t.id() != 0, "expert outputs must be float32, float16 or bfloat16, got ", y.scalar_type());
  const torch::stable::Device dev = y.device();
  require(weights.dim() == 2, "routing weights must be 2-D [tokens, top_k], got shape ", weights.sizes());
  check_tensor(weights, "routing weights", ScalarType::Float, dev, "the expert outputs");
  check_shape(weights, "routing weights", {weights.size(0), weights.size(1)});
  const int64_t tokens = weights.size(0), top_k = weights.size(1), hidden = y.size(1);
  check_tensor(positions, "positions", ScalarType::Int, dev, "the expert outputs");
  check_shape(positions, "positions", {tokens * top_k});
  const float *b = nullptr;
  const int32_t *e = nullptr;
  int32_t experts = 0;
  require(bias.has_value() == ids.has_value(), "an expert output bias goes with the assignments' expert ids");
  if (bias.has_value()) {
    require(bias->dim() == 2 && bias->size(1) == hidden && bias->size(0) >= 1,
            "the expert output bias must be [experts, ", hidden, "], got shape ", bias->sizes());
    check_tensor(*bias, "the expert output bias", ScalarType::Float, dev, "the expert outputs");
    check_tensor(*ids, "expert ids", ScalarType::Int, dev, "the expert outputs");
    require(ids->numel() == tokens * top_k && ids->is_contiguous(), "expert ids must be contiguous [", tokens, " x ",
            top_k, "], got shape ", ids->sizes());
    b = static_cast<const float *>(bias->data_ptr());
    e = static_cast<const int32_t *>(ids->data_ptr());
    experts = static_cast<int32_t>(bias->size(0));
  }
  Tensor out = empty_on(dev, {tokens, hidden}, y.scalar_type());
  const auto *pos = static_cast<const int32_t *>(positions.data_ptr());
  const auto *w = static_cast<const float *>(weights.data_ptr());
  on_cpu_or_cuda(
      dev, "moe_combine",
      [&] {
        return moe_combine_cpu(t, y.data_ptr(), y.size(0), hidden, pos, w, tokens, static_cast<int32_t>(top_k),
                               out.data_ptr(), b, e, experts);
      },
      [&](void *stream) {
        return moe_combine_cuda(t, y.data_ptr(), y.size(0), hidden, pos, w, tokens, static_cast<int32_t>(top_k),
                                out.data_ptr(), stream, b, e, experts);
      });
  return out;
}

// moe_activation's and moe_activation_quantize's arguments checked, as MoeActivation (out unset),
// with the output type `ot`.
MoeActivation activation_args(const Tensor &h, const std::optional<Tensor> &bias, const std::optional<Tensor> &offsets,
                              const std::string &activation, double limit, double alpha, DType ot) {
  require(h.dim() == 2 && h.size(1) % 2 == 0 && h.stride(1) == 1 && h.stride(0) >= h.size(1),
          "gate-up outputs must be 2-D [rows, 2 x intermediate] with unit stride along the row, got shape ", h.sizes());
  const DType ht = dtype_of(h.scalar_type());
  require(ht.id() != 0, "gate-up outputs must be float32, float16 or bfloat16, got ", h.scalar_type());
  require(activation == "silu" || activation == "swiglu-oai", "activation must be silu or swiglu-oai, got '",
          activation, "'");
  const torch::stable::Device dev = h.device();
  const int64_t rows = h.size(0), inter = h.size(1) / 2;
  MoeActivation a;
  a.h_type = ht;
  a.out_type = ot;
  a.h = h.data_ptr();
  a.rows = rows;
  a.inter = inter;
  a.ldh = rows > 0 ? h.stride(0) : h.size(1);
  a.kind = activation == "silu" ? moe_route::kActSilu : moe_route::kActSwigluOai;
  a.limit = static_cast<float>(limit);
  a.alpha = static_cast<float>(alpha);
  int64_t experts = -1;
  if (bias.has_value()) {
    require(bias->dim() == 2 && bias->size(1) == 2 * inter, "the gate-up bias must be [experts, ", 2 * inter,
            "], got shape ", bias->sizes());
    check_tensor(*bias, "the gate-up bias", ScalarType::Float, dev, "the gate-up outputs");
    experts = bias->size(0);
    a.bias = static_cast<const float *>(bias->data_ptr());
  }
  if (offsets.has_value()) {
    require(offsets->dim() == 1 && offsets->size(0) >= 2 && (experts < 0 || offsets->size(0) == experts + 1),
            "expert offsets must be [experts + 1]",
            experts < 0 ? "" : " (the bias has " + std::to_string(experts) + ")", ", got shape ", offsets->sizes());
    check_tensor(*offsets, "expert offsets", ScalarType::Int, dev, "the gate-up outputs");
    a.offsets = static_cast<const int32_t *>(offsets->data_ptr());
    experts = offsets->size(0) - 1;
  } else {
    require(experts <= 1, "a gate-up bias of ", experts, " experts needs the rows' expert offsets");
  }
  a.experts = static_cast<int32_t>(experts < 1 ? 1 : experts);
  return a;
}

Tensor moe_activation(const Tensor &h, const std::optional<Tensor> &bias, const std::optional<Tensor> &offsets,
                      const std::string &activation, double limit, double alpha, const std::string &out_type) {
  DType ot;
  require(parse_dtype(out_type, &ot).ok && (ot == dtypes::f32 || ot == dtypes::f16 || ot == dtypes::bf16),
          "the activation's output type must be f32, f16 or bf16, got '", out_type, "'");
  MoeActivation a = activation_args(h, bias, offsets, activation, limit, alpha, ot);
  Tensor out = empty_on(h.device(), {a.rows, a.inter}, storage_type(ot));
  a.out = out.data_ptr();
  on_cpu_or_cuda(
      h.device(), "moe_activation", [&] { return moe_activation_cpu(a); },
      [&](void *stream) { return moe_activation_cuda(a, stream); });
  return out;
}

// The activation in h's type, quantized with act_format: (codes [rows, inter], fp32 scales [rows,
// groups]): moe_activation, then quantize_act, through a temporary of the activation. (The one-pass
// kernel that skips the temporary is benchmarks/results/h100/tuning/h100-2026-12-08-s66-activation-quantize.patch,
// not yet run on a GPU.)
std::tuple<Tensor, Tensor> moe_activation_quantize(const Tensor &h, const std::optional<Tensor> &bias,
                                                   const std::optional<Tensor> &offsets, const std::string &activation,
                                                   double limit, double alpha, const std::string &act_format) {
  const ActFormat f = parse_act(act_format);
  require(f.granularity != ActScale::kNone, "activation format ", act_format,
          " is not quantized; moe_activation_quantize takes e4m3, e5m2 or i8 with -pt or -g{K}");
  MoeActivation a = activation_args(h, bias, offsets, activation, limit, alpha, dtype_of(h.scalar_type()));
  require(a.inter > 0, "moe_activation_quantize needs gate-up outputs of at least 2 columns, got shape ", h.sizes());
  const torch::stable::Device dev = h.device();
  const int64_t group = f.granularity == ActScale::kGroup ? f.group_k : a.inter;
  Tensor codes = empty_on(dev, {a.rows, a.inter}, storage_type(f.type));
  Tensor scales = empty_on(dev, {a.rows, (a.inter + group - 1) / group}, ScalarType::Float);
  auto *scale_ptr = static_cast<float *>(scales.data_ptr());
  Tensor act = empty_on(dev, {a.rows, a.inter}, h.scalar_type());
  a.out = act.data_ptr();
  on_cpu_or_cuda(
      dev, "moe_activation_quantize",
      [&] {
        const Status st = moe_activation_cpu(a);
        return st ? quantize_act_cpu(f, a.out_type, a.out, a.rows, a.inter, a.inter, codes.data_ptr(), scale_ptr) : st;
      },
      [&](void *stream) {
        const Status st = moe_activation_cuda(a, stream);
        return st ? quantize_act_cuda(f, a.out_type, a.out, a.rows, a.inter, a.inter, codes.data_ptr(), scale_ptr,
                                      stream)
                  : st;
      });
  return {codes, scales};
}

// A direct entry's result: `make()`'s tensor as a new handle in *out (0), or its error in `error`:
// 1 for an argument error (ValueError), 2 for any other failure (RuntimeError).
template <class Make> int direct_result(Make &&make, AtenTensorHandle *out, char *error, size_t error_size) {
  try {
    Tensor result = make();
    ensure(aoti_torch_new_tensor_handle(result.get(), out) == AOTI_TORCH_SUCCESS, "cannot return the output");
    return 0;
  } catch (const std::invalid_argument &e) {
    report(error, error_size, e.what());
    return 1;
  } catch (const std::exception &e) {
    report(error, error_size, e.what());
    return 2;
  }
}

} // namespace
} // namespace torch_ops
} // namespace humming

// The GEMM op's implementation behind a C interface, for humming_aot._eager (src/torch/eager.cpp):
// QuantLinear's eager calls reach it without the dispatcher when the running torch is the one the
// package was built with. The strings come with their sizes (they may hold NUL bytes, which must
// reach the checks); the tensors are borrowed handles (null for an absent optional); on
// success *out is a new handle the caller owns and the result is 0; otherwise the result is 1 for
// an argument error (ValueError) or 2 for a failure (RuntimeError), with the message in `error`.
extern "C" __attribute__((visibility("default"))) int
humming_gemm_direct(AtenTensorHandle a, AtenTensorHandle codes, AtenTensorHandle scales, AtenTensorHandle zeros,
                    AtenTensorHandle global_scale, AtenTensorHandle a_scales, AtenTensorHandle bias, const char *fmt,
                    size_t fmt_size, int64_t layout, int64_t n, int64_t k, const char *instance, size_t instance_size,
                    AtenTensorHandle *out, char *error, size_t error_size) {
  using namespace humming::torch_ops;
  return direct_result(
      [&] {
        return gemm(*borrowed(a), *borrowed(codes), borrowed(scales), borrowed(zeros), borrowed(global_scale),
                    borrowed(a_scales), borrowed(bias), std::string(fmt, fmt_size), layout, n, k,
                    std::string(instance, instance_size));
      },
      out, error, error_size);
}

// humming_gemm_direct for a format with quantized activations, from the 16-bit activations `a`:
// quantize_act (format `act`, which must be the format's) and then the GEMM with its codes and
// scales, in one call from Python instead of two dispatcher calls (QuantLinear's eager path).
// The same results, checks and errors as the two ops one after the other.
extern "C" __attribute__((visibility("default"))) int
humming_quantize_gemm_direct(AtenTensorHandle a, AtenTensorHandle codes, AtenTensorHandle scales,
                             AtenTensorHandle zeros, AtenTensorHandle global_scale, AtenTensorHandle bias,
                             const char *act, size_t act_size, const char *fmt, size_t fmt_size, int64_t layout,
                             int64_t n, int64_t k, const char *instance, size_t instance_size, AtenTensorHandle *out,
                             char *error, size_t error_size) {
  using namespace humming::torch_ops;
  return direct_result(
      [&] {
        auto [a_codes, a_scales] = quantize_act(*borrowed(a), std::string(act, act_size));
        // The quantize kernel just launched is the launch right before the GEMM's, and it begins
        // only once everything before it has finished: the GEMM may start copying the weight at
        // once (GemmArgs::early_weights).
        return gemm_with(a_codes, *borrowed(codes), borrowed(scales), borrowed(zeros), borrowed(global_scale), a_scales,
                         borrowed(bias), std::string(fmt, fmt_size), layout, n, k, std::string(instance, instance_size),
                         true);
      },
      out, error, error_size);
}

// The stream-K scratch of CUDA device `device`'s current stream, allocated and zeroed now (the
// buffer the GEMM op keeps per stream), so that a first GEMM call pays neither the allocation nor
// the fill (humming_aot.dispatch's preload calls it through ctypes). 0 on success; otherwise 2 with
// the message in `error`.
extern "C" __attribute__((visibility("default"))) int humming_warm_workspace(int device, char *error,
                                                                             size_t error_size) {
  using namespace humming::torch_ops;
  try {
    const torch::stable::accelerator::DeviceGuard guard(device);
    std::optional<Tensor> hold;
    kernel_workspace(device, current_stream(device), 1, &hold);
    return 0;
  } catch (const std::exception &e) {
    report(error, error_size, e.what());
    return 2;
  }
}

STABLE_TORCH_LIBRARY(humming, m) {
  // Dense GEMM. `instance` names a compiled instance ("" = the library's own choice); moe_gemm is
  // the grouped one (expert row offsets, stacked expert weights).
  m.def("gemm(Tensor a, Tensor codes, Tensor? scales, Tensor? zeros, Tensor? global_scale, Tensor? a_scales, "
        "Tensor? bias, str fmt, int layout, int n, int k, str instance='') -> Tensor");
  m.def("moe_gemm(Tensor a, Tensor codes, Tensor? scales, Tensor? zeros, Tensor offsets, str fmt, int layout, int n, "
        "int k, int rows_per_expert, str instance='', int assignments=-1, str activation='', float limit=0., "
        "float alpha=0., Tensor? activation_bias=None, Tensor? a_scales=None) -> Tensor");
  m.def("moe_gemm_masked(Tensor a, Tensor codes, Tensor? scales, Tensor? zeros, Tensor counts, str fmt, int layout, "
        "int n, int k, int rows_per_expert, str instance='', int assignments=-1, Tensor? a_scales=None) -> Tensor");
  m.def("pack_weight(Tensor codes, Tensor? scales, Tensor? zeros, str weight_format, int layout) -> "
        "(Tensor, Tensor, Tensor)");
  m.def("unpack_weight(Tensor codes, Tensor scales, Tensor zeros, str weight_format, int layout, int n, int k) -> "
        "(Tensor, Tensor, Tensor)");
  m.def("quantize_act(Tensor x, str act_format) -> (Tensor, Tensor)");
  // Mixture-of-experts routing (humming_aot.moe wraps them): top-k choice, alignment into
  // per-expert blocks (sorted_ids, block_expert, num_padded, positions, counts, offsets), and the
  // permutations around the experts' GEMMs.
  m.def("moe_topk(Tensor logits, int top_k, str scoring, bool renormalize, Tensor? bias, int n_group=0, "
        "int topk_group=0, float scaling=1.0) -> (Tensor, Tensor)");
  m.def("moe_align(Tensor ids, int num_experts, int block_m) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("moe_permute(Tensor x, Tensor sorted_ids, int top_k) -> Tensor");
  m.def("moe_permute_quantize(Tensor x, Tensor sorted_ids, int top_k, str act_format) -> (Tensor, Tensor)");
  m.def("moe_combine(Tensor y, Tensor positions, Tensor weights, Tensor? bias=None, Tensor? ids=None) -> Tensor");
  // The experts' activation between their GEMMs (silu(gate) x up, or gpt-oss's clamped SwiGLU),
  // with per-expert biases found through the rows' expert offsets.
  m.def("moe_activation(Tensor h, Tensor? bias, Tensor? offsets, str activation, float limit, float alpha, "
        "str out_type) -> Tensor");
  // The same activation (in h's type) quantized per token or K group, as quantize_act, in one pass
  // where the kernel can: the down GEMM's codes and scales of a layer with 8-bit activations.
  m.def("moe_activation_quantize(Tensor h, Tensor? bias, Tensor? offsets, str activation, float limit, float alpha, "
        "str act_format) -> (Tensor, Tensor)");
}

STABLE_TORCH_LIBRARY_IMPL(humming, CPU, m) {
  m.impl("gemm", TORCH_BOX(&humming::torch_ops::gemm));
  m.impl("moe_gemm", TORCH_BOX(&humming::torch_ops::moe_gemm));
  m.impl("moe_gemm_masked", TORCH_BOX(&humming::torch_ops::moe_gemm_masked));
  m.impl("pack_weight", TORCH_BOX(&humming::torch_ops::pack_weight));
  m.impl("unpack_weight", TORCH_BOX(&humming::torch_ops::unpack_weight));
  m.impl("quantize_act", TORCH_BOX(&humming::torch_ops::quantize_act));
  m.impl("moe_topk", TORCH_BOX(&humming::torch_ops::moe_topk));
  m.impl("moe_align", TORCH_BOX(&humming::torch_ops::moe_align));
  m.impl("moe_permute", TORCH_BOX(&humming::torch_ops::moe_permute));
  m.impl("moe_permute_quantize", TORCH_BOX(&humming::torch_ops::moe_permute_quantize));
  m.impl("moe_combine", TORCH_BOX(&humming::torch_ops::moe_combine));
  m.impl("moe_activation", TORCH_BOX(&humming::torch_ops::moe_activation));
  m.impl("moe_activation_quantize", TORCH_BOX(&humming::torch_ops::moe_activation_quantize));
}

STABLE_TORCH_LIBRARY_IMPL(humming, CUDA, m) {
  m.impl("gemm", TORCH_BOX(&humming::torch_ops::gemm));
  m.impl("moe_gemm", TORCH_BOX(&humming::torch_ops::moe_gemm));
  m.impl("moe_gemm_masked", TORCH_BOX(&humming::torch_ops::moe_gemm_masked));
  m.impl("pack_weight", TORCH_BOX(&humming::torch_ops::pack_weight));
  m.impl("unpack_weight", TORCH_BOX(&humming::torch_ops::unpack_weight));
  m.impl("quantize_act", TORCH_BOX(&humming::torch_ops::quantize_act));
  m.impl("moe_topk", TORCH_BOX(&humming::torch_ops::moe_topk));
  m.impl("moe_align", TORCH_BOX(&humming::torch_ops::moe_align));
  m.impl("moe_permute", TORCH_BOX(&humming::torch_ops::moe_permute));
  m.impl("moe_permute_quantize", TORCH_BOX(&humming::torch_ops::moe_permute_quantize));
  m.impl("moe_combine", TORCH_BOX(&humming::torch_ops::moe_combine));
  m.impl("moe_activation", TORCH_BOX(&humming::torch_ops::moe_activation));
  m.impl("moe_activation_quantize", TORCH_BOX(&humming::torch_ops::moe_activation_quantize));
}
