// humming_example: the Python-free path through libhumming's public C++ API.
//
// Quantizes a small weight to u4 with one bf16 scale per 32 inputs, packs it for the generic
// layout, runs out = a * w^T through the CPU reference and, when a CUDA device is usable, through
// the instance the dispatcher picks, once on a stream and once replayed from a CUDA graph. Then a
// mixture-of-experts layer's path on the CPU reference: routing (top-k, align, permute), one
// grouped GEMM over the experts' stacked weights, the weighted combine. Every result is checked
// against a naive loop over the unpacked values. Exit status 0 when all checks pass, 1 otherwise.
// The library reports errors as Status values; so does this program.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "humming/humming.h"

using namespace humming;

namespace {

// Host copy of one problem: logical operands for the naive loop, packed ones for the library.
struct Problem {
  GemmFormat fmt;
  PackedDims dims;
  int64_t m = 0, n = 0, k = 0;
  std::vector<uint16_t> a;       // [m][k] bf16 bit patterns
  std::vector<uint32_t> codes;   // packed codes (generic layout)
  std::vector<uint16_t> scales;  // packed [k_groups][n_groups] bf16
  std::vector<double> weight;    // [n][k], the dequantized weight
  std::vector<double> reference; // [m][n], the naive loop's result
};

Status make_problem(int64_t m, int64_t n, int64_t k, Problem *p, unsigned seed = 7) {
  p->m = m;
  p->n = n;
  p->k = k;
  Status st = parse_gemm_format("a-bf16_w-u4g32-sbf16_c-bf16", &p->fmt);
  if (!st) return st;
  st = packed_dims(kLayoutGeneric, p->fmt.weight, n, k, &p->dims);
  if (!st) return st;
  const PackedDims &d = p->dims;

  // Logical operands. Values are drawn from small grids so that bf16 holds them exactly; the naive
  // loop then sees the very numbers the library reads.
  std::mt19937 rng(seed);
  std::vector<uint8_t> codes(static_cast<size_t>(n * k));
  for (auto &c : codes) c = static_cast<uint8_t>(rng() & 15u);
  std::vector<uint16_t> scales(static_cast<size_t>(d.n_groups_logical * d.k_groups_logical));
  for (auto &s : scales) s = static_cast<uint16_t>(encode(dtypes::bf16, static_cast<float>(1 + rng() % 8) / 64.0f));
  p->a.resize(static_cast<size_t>(m * k));
  for (auto &v : p->a)
    v = static_cast<uint16_t>(encode(dtypes::bf16, static_cast<float>(static_cast<int>(rng() % 33) - 16) / 16.0f));

  // Packed operands, in the buffers the layout asks for (padding included).
  p->codes.assign(static_cast<size_t>(d.code_words), 0u);
  p->scales.assign(static_cast<size_t>(d.k_groups * d.n_groups), 0u);
  st = pack_codes_cpu(kLayoutGeneric, p->fmt.weight, d, codes.data(), p->codes.data());
  if (!st) return st;
  st = pack_groups_cpu(d, 2, scales.data(), p->scales.data());
  if (!st) return st;

  // The naive loop. Unsigned codes without zero points are symmetric around 2^(bits-1) (8 for
  // u4); logical scales are [n][k / 32].
  const int64_t group = p->fmt.weight.group_k;
  p->weight.resize(static_cast<size_t>(n * k));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t kk = 0; kk < k; ++kk)
      p->weight[j * k + kk] = (static_cast<double>(codes[j * k + kk]) - 8.0) *
                              decode(dtypes::bf16, scales[j * d.k_groups_logical + kk / group]);
  p->reference.assign(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t kk = 0; kk < k; ++kk)
        acc += static_cast<double>(decode(dtypes::bf16, p->a[i * k + kk])) * p->weight[j * k + kk];
      p->reference[i * n + j] = acc;
    }
  return Status::Ok();
}

// GemmArgs over the problem's host buffers; the GPU run swaps in device pointers.
GemmArgs host_args(Problem &p, std::vector<uint16_t> &out) {
  GemmArgs args;
  args.fmt = p.fmt;
  args.layout = kLayoutGeneric;
  args.dims = p.dims;
  args.m = p.m;
  args.a = p.a.data();
  args.lda = p.k;
  args.codes = p.codes.data();
  args.scales = p.scales.data();
  args.out = out.data();
  args.ldo = p.n;
  return args;
}

// Within bf16 rounding of the output (8 significant bits) plus fp32 accumulation order.
Status check(const char *what, const Problem &p, const std::vector<uint16_t> &out) {
  double worst = 0;
  int64_t worst_at = 0;
  for (int64_t i = 0; i < p.m * p.n; ++i) {
    const double ref = p.reference[i];
    const double err = std::fabs(static_cast<double>(decode(dtypes::bf16, out[i])) - ref) / (1.0 / 64 + std::fabs(ref));
    if (!(err <= worst)) { // NaN counts as the worst
      worst = std::isnan(err) ? INFINITY : err;
      worst_at = i;
    }
  }
  std::printf("%s: max relative error %.3g\n", what, worst);
  if (worst <= 1.0 / 128) return Status::Ok();
  return Status::Error(std::string(what) + ": output (" + std::to_string(worst_at / p.n) + ", " +
                       std::to_string(worst_at % p.n) + ") is " + std::to_string(decode(dtypes::bf16, out[worst_at])) +
                       ", the naive loop gives " + std::to_string(p.reference[worst_at]));
}

Status cuda_status(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Device buffers and handles, released on every return path.
struct DeviceState {
  std::vector<void *> buffers;
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  Status alloc(size_t bytes, void **ptr) {
    Status st = cuda_status(cudaMalloc(ptr, bytes), "cudaMalloc");
    if (st) buffers.push_back(*ptr);
    return st;
  }
  ~DeviceState() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (stream) cudaStreamDestroy(stream);
    for (void *b : buffers) cudaFree(b);
  }
};

template <typename T> Status upload(DeviceState &dev, const std::vector<T> &host, const void **ptr) {
  void *d = nullptr;
  Status st = dev.alloc(host.size() * sizeof(T), &d);
  if (!st) return st;
  *ptr = d;
  return cuda_status(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
}

Status run_gpu(Problem &p, int cc) {
  DeviceState dev;
  std::vector<uint16_t> out(static_cast<size_t>(p.m * p.n));
  GemmArgs args = host_args(p, out);
  args.num_sms = current_device_sms();
  Status st = upload(dev, p.a, &args.a);
  const void *codes = nullptr;
  if (st) st = upload(dev, p.codes, &codes);
  args.codes = static_cast<const uint32_t *>(codes);
  if (st) st = upload(dev, p.scales, &args.scales);
  if (st) st = dev.alloc(out.size() * sizeof(uint16_t), &args.out);
  if (st) st = cuda_status(cudaStreamCreateWithFlags(&dev.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (!st) return st;

  std::string why, note;
  const InstanceInfo *inst = select_instance(args, cc, args.num_sms, &why, &note);
  if (inst == nullptr) return Status::Error("no instance for sm_" + std::to_string(cc) + ": " + why);
  std::printf("gpu: sm_%d, %d SMs, instance %s\n", cc, args.num_sms, inst->name);
  if (!note.empty()) std::printf("gpu: note: %s\n", note.c_str()); // the slow fallback: say so
  // Stream-K scratch: zeroed once; launches leave its counters at zero again for the next one.
  args.workspace_bytes = inst->workspace_bytes(args);
  if (args.workspace_bytes > 0) {
    st = dev.alloc(args.workspace_bytes, &args.workspace);
    if (st) st = cuda_status(cudaMemset(args.workspace, 0, args.workspace_bytes), "cudaMemset");
    if (!st) return st;
  }

  const size_t out_bytes = out.size() * sizeof(uint16_t);
  st = gemm(args, *inst, dev.stream);
  if (st)
    st = cuda_status(cudaMemcpyAsync(out.data(), args.out, out_bytes, cudaMemcpyDeviceToHost, dev.stream), "download");
  if (st) st = cuda_status(cudaStreamSynchronize(dev.stream), "stream");
  if (st) st = check("gpu stream", p, out);
  if (!st) return st;

  // The same launch captured into a graph and replayed twice, as a server replays its decode step.
  st = cuda_status(cudaMemsetAsync(args.out, 0xFF, out_bytes, dev.stream), "cudaMemsetAsync");
  if (st) st = cuda_status(cudaStreamBeginCapture(dev.stream, cudaStreamCaptureModeThreadLocal), "begin capture");
  if (!st) return st;
  Status launched = gemm(args, *inst, dev.stream);
  // Capture must end even when the launch failed, or the stream stays in capture mode.
  st = cuda_status(cudaStreamEndCapture(dev.stream, &dev.graph), "end capture");
  if (!launched) return launched;
  if (st) st = cuda_status(cudaGraphInstantiate(&dev.exec, dev.graph, 0), "cudaGraphInstantiate");
  for (int replay = 0; st && replay < 2; ++replay)
    st = cuda_status(cudaGraphLaunch(dev.exec, dev.stream), "cudaGraphLaunch");
  std::fill(out.begin(), out.end(), 0);
  if (st)
    st = cuda_status(cudaMemcpyAsync(out.data(), args.out, out_bytes, cudaMemcpyDeviceToHost, dev.stream), "download");
  if (st) st = cuda_status(cudaStreamSynchronize(dev.stream), "stream");
  if (st) st = check("gpu graph", p, out);
  return st;
}

// A mixture-of-experts layer's GEMM path on the CPU reference: T tokens routed to top_k of E
// experts (softmax scores, renormalized), aligned (blocks of one row: the experts' rows back to
// back), permuted, multiplied by their experts' weights in one grouped GEMM (the weights stacked,
// one stride apart), combined with the routing weights. The GPU functions (moe_topk_cuda, ...,
// gemm with a grouped "moe" instance on weights packed for layout 3) take the same arguments.
Status run_moe_cpu() {
  constexpr int32_t kExperts = 3, kTopK = 2;
  constexpr int64_t kTokens = 5, n = 40, k = 128, kRows = kTokens * kTopK;
  std::vector<Problem> experts(kExperts);
  for (int32_t e = 0; e < kExperts; ++e) {
    Status st = make_problem(kTokens, n, k, &experts[e], 11u + static_cast<unsigned>(e));
    if (!st) return st;
  }
  const std::vector<uint16_t> &x = experts[0].a; // the tokens' activations [kTokens][k]

  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> logits(kTokens * kExperts), weights(kRows);
  for (auto &v : logits) v = normal(rng);
  std::vector<int32_t> ids(kRows);
  MoeTopk topk;
  topk.logits = logits.data(), topk.logits_type = dtypes::f32, topk.tokens = kTokens, topk.ld = kExperts;
  topk.experts = kExperts, topk.top_k = kTopK, topk.weights = weights.data(), topk.ids = ids.data();
  Status st = moe_topk_cpu(topk);
  if (!st) return st;

  // Blocks of one row pad nothing: the capacity is the assignments.
  std::vector<int32_t> sorted(kRows), block_expert(kRows), num_padded(1), positions(kRows), counts(kExperts),
      offsets(kExperts + 1);
  MoeAlign align;
  align.ids = ids.data(), align.assignments = kRows, align.experts = kExperts, align.block_m = 1;
  align.sorted_ids = sorted.data(), align.block_expert = block_expert.data(), align.num_padded = num_padded.data();
  align.positions = positions.data(), align.counts = counts.data(), align.offsets = offsets.data();
  st = moe_align_cpu(align);
  std::vector<uint16_t> rows(kRows * k);
  if (st) st = moe_permute_cpu(dtypes::bf16, x.data(), k, k, sorted.data(), kRows, kRows, kTopK, rows.data());
  if (!st) return st;

  // The experts' packed weights back to back; expert e's start one stride after expert e - 1's.
  std::vector<uint32_t> codes;
  std::vector<uint16_t> scales;
  for (const Problem &p : experts) {
    codes.insert(codes.end(), p.codes.begin(), p.codes.end());
    scales.insert(scales.end(), p.scales.begin(), p.scales.end());
  }
  std::vector<uint16_t> y(kRows * n), out(kTokens * n);
  GemmArgs args = host_args(experts[0], y);
  args.m = kRows, args.a = rows.data(), args.codes = codes.data(), args.scales = scales.data();
  args.experts = kExperts, args.expert_offsets = offsets.data();
  args.expert_codes_stride = static_cast<int64_t>(experts[0].codes.size() * sizeof(uint32_t));
  args.expert_scales_stride = static_cast<int64_t>(experts[0].scales.size() * sizeof(uint16_t));
  st = gemm_cpu(args);
  if (st)
    st =
        moe_combine_cpu(dtypes::bf16, y.data(), kRows, n, positions.data(), weights.data(), kTokens, kTopK, out.data());
  if (!st) return st;

  // The naive loop: each token's chosen experts applied to its activations, weighted and summed.
  // Two bf16 roundings, each at most 2^-8 of its value: the expert outputs before the combine and
  // the result, so at most 2^-7 of the terms' size (measured against it, not the result's: a
  // weighted sum of two outputs may cancel).
  double worst = 0;
  for (int64_t t = 0; t < kTokens; ++t)
    for (int64_t c = 0; c < n; ++c) {
      double want = 0, size = 1.0 / 64;
      for (int32_t j = 0; j < kTopK; ++j) {
        const Problem &e = experts[ids[t * kTopK + j]];
        double dot = 0;
        for (int64_t kk = 0; kk < k; ++kk)
          dot += static_cast<double>(decode(dtypes::bf16, x[t * k + kk])) * e.weight[c * k + kk];
        want += weights[t * kTopK + j] * dot;
        size += std::fabs(weights[t * kTopK + j] * dot);
      }
      const double err = std::fabs(static_cast<double>(decode(dtypes::bf16, out[t * n + c])) - want) / size;
      worst = err <= worst ? worst : (std::isnan(err) ? INFINITY : err);
    }
  std::printf("moe: %d experts, top %d, rows per expert %d %d %d; max error %.3g of the terms' size\n", kExperts, kTopK,
              counts[0], counts[1], counts[2], worst);
  if (worst <= 1.0 / 128) return Status::Ok();
  return Status::Error("moe cpu reference: an output is off by " + std::to_string(worst) + " of its terms' size");
}

} // namespace

int main() {
  std::printf("libhumming %s (CUDA %d, archs %s, profile %s, %zu instances)\n", version(), cuda_version(),
              build_archs(), build_profile(), instance_count());
  Problem p;
  // K spans several scale groups and M, N are not tile multiples, so padding is exercised.
  Status st = make_problem(5, 40, 128, &p);
  if (!st) {
    std::fprintf(stderr, "setup failed: %s\n", st.message.c_str());
    return 1;
  }

  std::vector<uint16_t> out(static_cast<size_t>(p.m * p.n));
  GemmArgs args = host_args(p, out);
  st = gemm_cpu(args);
  if (st) st = check("cpu reference", p, out);
  // A broken call must come back as a status, not a crash: the codes are required.
  if (st) {
    args.codes = nullptr;
    const Status bad = gemm_cpu(args);
    if (bad.ok)
      st = Status::Error("gemm_cpu accepted a null codes pointer");
    else
      std::printf("null codes rejected: %s\n", bad.message.c_str());
  }
  if (st) st = run_moe_cpu();
  if (!st) {
    std::fprintf(stderr, "FAILED: %s\n", st.message.c_str());
    return 1;
  }

  std::string why;
  const int cc = current_device_cc(&why);
  if (cc < 0) {
    std::printf("gpu: skipped (%s)\n", why.c_str());
  } else {
    st = run_gpu(p, cc);
    if (!st) {
      std::fprintf(stderr, "FAILED: %s\n", st.message.c_str());
      return 1;
    }
  }
  std::printf("ok\n");
  return 0;
}
