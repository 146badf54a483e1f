// Mixture-of-experts routing on the GPU (humming.h; the CPU reference is src/moe_route_cpu.cpp,
// the shared arithmetic scheduler/moe_route.h). Each step is one to three small kernels on one
// stream, with no host synchronization and no allocation, so a whole layer's routing can be
// captured in a CUDA graph:
// - top-k: one warp per token; the row's max and sum by warp reductions, then top_k rounds of a
//   warp arg-max over the experts not yet chosen (the row held in registers up to 256 experts);
// - align: counts of each chunk of kAlignChunk assignments per expert, then one block that turns
//   them into the experts' offsets and each chunk's first row per expert, then each chunk places
//   its assignments, ranked among the same expert's earlier ones of the chunk (stable, so the
//   order never depends on thread timing); with one chunk (decode), one block runs the three steps
//   in one launch;
// - permute: one block per row, 16-byte copies where rows allow;
// - combine: one thread per (token, channel), or per 8 channels of 16-bit rows, the terms in
//   choice order;
// - activation: blocks over rows and chunks of a row's outputs; the row's expert by binary search
//   of the offsets, once per row of a block.
#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "humming/backend/pdl.h"
#include "humming/humming.h"
#include "humming/scheduler/moe_route.h"

namespace humming {
namespace {

// First in every kernel here: they launch programmatically where HUMMING_PDL and the device allow
// (backend/pdl.h, launch_chained), so none touches global memory before the kernel before it has
// finished; then the next launch (the next helper, or a grouped GEMM) may be scheduled.
__device__ __forceinline__ void chain_in() {
  pdl_wait();
  pdl_allow();
}

constexpr int kTopkWarps = 4;      // tokens per block of the top-k kernel
constexpr int kMaxTopK = 32;       // choices a warp keeps in registers
constexpr int kAlignChunk = 1024;  // assignments per block of the align kernels (its threads)
constexpr int kScanThreads = 1024; // the one block of the align scan
constexpr unsigned kAll = 0xFFFFFFFFu;
constexpr int64_t kCombineWideThreads = 65536; // threads (token x 8 channels) from which combine reads wide

Status launched(const char *what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return Status::Error(std::string(what) + ": " + cudaGetErrorString(e));
  return Status::Ok();
}

__device__ __forceinline__ float warp_max(float v) {
  for (int d = 16; d > 0; d /= 2) v = fmaxf(v, __shfl_xor_sync(kAll, v, d));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(kAll, v, d);
  return v;
}

// The warp's best of its lanes' candidates (rank value v, score s, expert e; e == none where a lane
// has none) by ranks_before, in every lane: its score in s, its expert in e (v is left as it was).
// Three warp-wide steps: the best value by one max reduction of an order-preserving integer key,
// the lowest expert holding it by one min reduction, the winner's score by one shuffle from its
// lane, which must be e % 32 (as the top-k's lanes hold experts). The key orders as the floats do,
// -0 taken as +0 first (ranks_before finds them equal), so its max is the best value and equal keys
// are equal values. Why not a butterfly of shuffles of (v, s, e): fifteen dependent shuffles a
// round, and the rounds are a chain of them (H100, session 33: one token's top-8 of 128 experts
// 9.2 -> 7.8 us with the reductions, of 256 experts 12.7 -> 11.2, graph time after an L2 flush).
// (The reductions need sm_80, the oldest target of the package.)
__device__ __forceinline__ void warp_best(int32_t none, float v, float &s, int32_t &e) {
  const uint32_t bits = __float_as_uint(v + 0.0f);
  const uint32_t key = bits & 0x80000000u ? ~bits : bits | 0x80000000u;
  const uint32_t top = __reduce_max_sync(kAll, e == none ? 0u : key);
  const uint32_t winner = __reduce_min_sync(kAll, e != none && key == top ? static_cast<uint32_t>(e) : 0xFFFFFFFFu);
  if (winner == 0xFFFFFFFFu) { // no lane had a candidate
    e = none;
    return;
  }
  s = __shfl_sync(kAll, s, static_cast<int>(winner % 32));
  e = static_cast<int32_t>(winner);
}

// Token t's top-k by the warp that calls it (every lane), re-reading the row from memory in each
// round (any number of experts).
__device__ __forceinline__ void topk_token(const MoeTopk &a, int64_t t) {
  const int lane = threadIdx.x % 32;
  const void *row = static_cast<const char *>(a.logits) + t * a.ld * a.logits_type.storage_bytes();
  float row_max = -INFINITY;
  for (int32_t e = lane; e < a.experts; e += 32) row_max = fmaxf(row_max, load_element(a.logits_type, row, e));
  row_max = warp_max(row_max);
  float sum = 0.0f;
  if (!a.sigmoid) {
    for (int32_t e = lane; e < a.experts; e += 32)
      sum += moe_route::score(load_element(a.logits_type, row, e), row_max, false);
    sum = warp_sum(sum);
  }
  // Every lane keeps the choices so far (the same in each lane).
  int32_t chosen[kMaxTopK];
  float weight[kMaxTopK];
  float total = 0.0f;
#pragma unroll 1
  for (int j = 0; j < a.top_k; ++j) {
    float best_v = -INFINITY, best_s = 0.0f;
    int32_t best = a.experts; // none yet
    for (int32_t e = lane; e < a.experts; e += 32) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken |= chosen[i] == e;
      if (taken) continue;
      const float logit = load_element(a.logits_type, row, e);
      float s = moe_route::score(logit, row_max, a.sigmoid);
      if (!a.sigmoid) s /= sum;
      const float v = moe_route::rank_value(logit, s, a.bias, e);
      if (best == a.experts || moe_route::ranks_before(v, e, best_v, best)) best_v = v, best_s = s, best = e;
    }
    warp_best(a.experts, best_v, best_s, best);
    chosen[j] = best;
    weight[j] = best_s;
    total += best_s;
  }
  const float denom = a.renormalize ? fmaxf(total, 1.17549435e-38f) : 1.0f;
  for (int j = lane; j < a.top_k; j += 32) {
    // (chosen and weight are indexed by a lane-dependent j: they live in local memory, once per token.)
    a.ids[t * a.top_k + j] = chosen[j];
    a.weights[t * a.top_k + j] = moe_route::routed_weight(weight[j], denom, a.scaling);
  }
}

__global__ void topk_kernel(MoeTopk a) {
  chain_in();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kTopkWarps + threadIdx.x / 32;
  if (t < a.tokens) topk_token(a, t);
}

// Group-limited routing (MoeTopk::n_group > 0) on a row held as topk_token_registers holds it
// (expert lane + 32 p in slot p of each lane, `open` its slots with an expert, s the scores): v
// becomes each expert's choice value, 0 outside the topk_group best groups (moe_route.h, as the
// CPU reference computes it). Each group's two best values by a butterfly of shuffles (the top two
// of the union of two pairs), its rank into lane g; then topk_group rounds of warp_best over the
// lanes' groups (higher rank, then lower group). Up to 32 groups.
template <int P>
__device__ __forceinline__ void group_limit(const MoeTopk &a, int lane, uint32_t open, const float (&s)[P],
                                            float (&v)[P]) {
  const int32_t size = a.experts / a.n_group;
  int32_t group[P];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    group[p] = (lane + 32 * p) / size;
    v[p] = open >> p & 1u ? moe_route::group_choice(s[p], a.bias, lane + 32 * p) : -INFINITY;
  }
  float rank = -INFINITY; // lane g: group g's
  for (int32_t g = 0; g < a.n_group; ++g) {
    float best = -INFINITY, second = -INFINITY;
#pragma unroll
    for (int p = 0; p < P; ++p)
      if ((open >> p & 1u) && group[p] == g) second = fmaxf(second, fminf(best, v[p])), best = fmaxf(best, v[p]);
    for (int d = 16; d > 0; d /= 2) {
      const float ob = __shfl_xor_sync(kAll, best, d), os = __shfl_xor_sync(kAll, second, d);
      second = fmaxf(fminf(best, ob), fmaxf(second, os));
      best = fmaxf(best, ob);
    }
    if (lane == g) rank = moe_route::group_rank(best, second, size);
  }
  constexpr int32_t kNone = 32;
  uint32_t allowed = 0; // bit g: group g is among the chosen
  for (int32_t j = 0; j < a.topk_group; ++j) {
    float score_unused = 0.0f;
    int32_t g = lane < a.n_group && !(allowed >> lane & 1u) ? lane : kNone;
    warp_best(kNone, rank, score_unused, g);
    if (g != kNone) allowed |= 1u << g;
  }
#pragma unroll
  for (int p = 0; p < P; ++p)
    if (open >> p & 1u) v[p] = moe_route::group_masked(v[p], allowed >> group[p] & 1u);
}

// top-k with the row in registers, for rows of at most 32 x P experts: each lane loads its P logits
// once (expert lane + 32 p) and computes their scores and rank values once; each of the top_k
// rounds is then P compares and a warp arg-max, where topk_kernel re-reads the row from memory in
// every round (a chain of dependent loads: 17 us for one token over 128 experts on the H200,
// session 19). The same values, the same order (ranks_before is a total order, so the scan order
// does not matter) and the same sums: its results equal topk_kernel's bitwise.
template <int P> __device__ __forceinline__ void topk_token_registers(const MoeTopk &a, int64_t t) {
  const int lane = threadIdx.x % 32;
  const void *row = static_cast<const char *>(a.logits) + t * a.ld * a.logits_type.storage_bytes();
  float logit[P], s[P], v[P];
  uint32_t open = 0; // bit p: expert lane + 32 p exists and is not chosen yet
  float row_max = -INFINITY;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int32_t e = lane + 32 * p;
    logit[p] = e < a.experts ? load_element(a.logits_type, row, e) : -INFINITY;
    if (e < a.experts) open |= 1u << p, row_max = fmaxf(row_max, logit[p]);
  }
  row_max = warp_max(row_max);
  float sum = 0.0f;
  if (!a.sigmoid) {
#pragma unroll
    for (int p = 0; p < P; ++p)
      if (open >> p & 1u) sum += moe_route::score(logit[p], row_max, false);
    sum = warp_sum(sum);
  }
#pragma unroll
  for (int p = 0; p < P; ++p) {
    s[p] = moe_route::score(logit[p], row_max, a.sigmoid);
    if (!a.sigmoid) s[p] /= sum;
    v[p] = open >> p & 1u ? moe_route::rank_value(logit[p], s[p], a.bias, lane + 32 * p) : -INFINITY;
  }
  if (a.n_group > 0) group_limit<P>(a, lane, open, s, v);
  int32_t mine = 0; // lane j keeps choice j
  float mine_w = 0.0f, total = 0.0f;
#pragma unroll 1
  for (int j = 0; j < a.top_k; ++j) {
    float best_v = -INFINITY, best_s = 0.0f;
    int32_t best = a.experts; // none yet
    int best_p = -1;
#pragma unroll
    for (int p = 0; p < P; ++p)
      if ((open >> p & 1u) && (best == a.experts || moe_route::ranks_before(v[p], lane + 32 * p, best_v, best)))
        best_v = v[p], best_s = s[p], best = lane + 32 * p, best_p = p;
    warp_best(a.experts, best_v, best_s, best);
    if (best_p >= 0 && lane + 32 * best_p == best) open &= ~(1u << best_p);
    if (lane == j) mine = best, mine_w = best_s;
    total += best_s;
  }
  const float denom = a.renormalize ? fmaxf(total, 1.17549435e-38f) : 1.0f;
  if (lane < a.top_k) {
    a.ids[t * a.top_k + lane] = mine;
    a.weights[t * a.top_k + lane] = moe_route::routed_weight(mine_w, denom, a.scaling);
  }
}

template <int P> __global__ void topk_registers_kernel(MoeTopk a) {
  chain_in();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kTopkWarps + threadIdx.x / 32;
  if (t < a.tokens) topk_token_registers<P>(a, t);
}

__device__ __forceinline__ int32_t expert_of(const MoeAlign &a, int64_t i) {
  return min(max(a.ids[i], 0), a.experts - 1);
}

// The three steps of the align below, each the body of a kernel (or, where all assignments fit one
// chunk, of one block in turn: align_one_block_kernel). Every thread of the block calls each.

// Chunk `chunk`'s counts of assignments per expert: workspace[chunk][expert] (hist: shared, one
// word per expert).
// (chunk_counts null: the counts stay in hist, as the one-block kernel reads them.)
__device__ __forceinline__ void align_count(const MoeAlign &a, int32_t *chunk_counts, int64_t chunk, int32_t *hist) {
  for (int32_t e = threadIdx.x; e < a.experts; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  const int64_t i = chunk * kAlignChunk + threadIdx.x;
  if (i < a.assignments) atomicAdd(hist + expert_of(a, i), 1);
  __syncthreads();
  if (chunk_counts != nullptr)
    for (int32_t e = threadIdx.x; e < a.experts; e += blockDim.x) chunk_counts[chunk * a.experts + e] = hist[e];
}

__global__ void align_count_kernel(MoeAlign a, int32_t *chunk_counts) {
  chain_in();
  extern __shared__ int32_t hist[];
  align_count(a, chunk_counts, blockIdx.x, hist);
}

// One block: each expert's count and padded offset, each chunk's first row per expert (in place
// of its counts), the padding rows' sentinel and the blocks' experts. `offsets` (experts + 1 words)
// is where the block keeps the offsets it reads back: a.offsets, or a copy in shared memory (the
// one-block kernel), which spares the binary searches their L2 round trips; a.offsets gets them
// either way.
__device__ __forceinline__ void align_scan(const MoeAlign &a, int32_t *chunk_counts, int64_t chunks, int64_t capacity,
                                           int32_t *offsets) {
  static_assert(kScanThreads == 32 * 32, "the warps' totals are scanned by one warp");
  __shared__ int32_t warp_upto[kScanThreads / 32];
  // Experts are split into kScanThreads contiguous runs; a thread sums its run's padded rows.
  const int32_t per = (a.experts + kScanThreads - 1) / kScanThreads;
  const int32_t e0 = min(a.experts, static_cast<int32_t>(threadIdx.x) * per), e1 = min(a.experts, e0 + per);
  int32_t run = 0;
  for (int32_t e = e0; e < e1; ++e) {
    int32_t count = 0;
    for (int64_t c = 0; c < chunks; ++c) count += chunk_counts[c * a.experts + e];
    a.counts[e] = count;
    run += static_cast<int32_t>(moe_route::padded_rows(count, a.block_m));
  }
  // Exclusive scan of the runs: each warp's by shuffles, then the warps' totals by the first warp
  // (two block barriers; a Hillis-Steele scan over the block took twenty, and the one-token align
  // was latency-bound at 30 cycles per issued instruction: ncu, H100, session 33).
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  int32_t upto = run; // inclusive, within the warp
  for (int d = 1; d < 32; d *= 2) {
    const int32_t v = __shfl_up_sync(kAll, upto, d);
    if (lane >= d) upto += v;
  }
  if (lane == 31) warp_upto[warp] = upto;
  __syncthreads();
  if (warp == 0) {
    int32_t w = warp_upto[lane];
    for (int d = 1; d < 32; d *= 2) {
      const int32_t v = __shfl_up_sync(kAll, w, d);
      if (lane >= d) w += v;
    }
    warp_upto[lane] = w; // inclusive over the warps
  }
  __syncthreads();
  const int32_t used = warp_upto[kScanThreads / 32 - 1];
  int32_t row = (warp > 0 ? warp_upto[warp - 1] : 0) + upto - run;
  for (int32_t e = e0; e < e1; ++e) {
    a.offsets[e] = row;
    offsets[e] = row;
    int32_t at = row;
    for (int64_t c = 0; c < chunks; ++c) {
      const int32_t n = chunk_counts[c * a.experts + e];
      chunk_counts[c * a.experts + e] = at;
      at += n;
    }
    row += static_cast<int32_t>(moe_route::padded_rows(a.counts[e], a.block_m));
  }
  if (threadIdx.x == kScanThreads - 1) {
    a.offsets[a.experts] = used;
    offsets[a.experts] = used;
    a.num_padded[0] = used;
  }
  __syncthreads(); // (the offsets are read below by the same block)
  for (int64_t r = threadIdx.x; r < capacity; r += kScanThreads)
    if (r >= used) a.sorted_ids[r] = static_cast<int32_t>(a.assignments);
  for (int64_t b = threadIdx.x; b < capacity / a.block_m; b += kScanThreads) {
    const int64_t first = b * a.block_m;
    int32_t e = -1;
    if (first < used) { // the last expert whose offset is at most the block's first row
      int32_t lo = 0, hi = a.experts - 1;
      while (lo < hi) {
        const int32_t mid = (lo + hi + 1) / 2;
        if (offsets[mid] <= first)
          lo = mid;
        else
          hi = mid - 1;
      }
      e = lo;
    }
    a.block_expert[b] = e;
  }
  // Rows padding each expert's last block (between its assignments and the next expert).
  for (int32_t e = e0; e < e1; ++e) // (this thread's experts: their counts are in its own writes)
    for (int64_t r = offsets[e] + a.counts[e]; r < offsets[e + 1]; ++r)
      a.sorted_ids[r] = static_cast<int32_t>(a.assignments);
}

__global__ void align_scan_kernel(MoeAlign a, int32_t *chunk_counts, int64_t chunks, int64_t capacity) {
  chain_in();
  align_scan(a, chunk_counts, chunks, capacity, a.offsets);
}

// Bytes of per-warp counts (align_place) for `experts`: a byte per expert and warp of the chunk,
// where they fit beside the rest of a block's shared memory (experts up to kRankExperts); 0 where
// the rank takes the loop over the chunk's earlier assignments instead.
constexpr int32_t kRankExperts = 1024;
constexpr int kChunkWarps = kAlignChunk / 32;
__host__ __device__ size_t rank_counts_bytes(int32_t experts) {
  return experts <= kRankExperts ? size_t(experts) * kChunkWarps : 0;
}

// Chunk `chunk` places its assignments: row = the chunk's first row for the expert + the number of
// the chunk's earlier assignments to the same expert (stable, so the order never depends on thread
// timing). With `warp_counts` (shared, rank_counts_bytes): that number is the earlier lanes of the
// warp holding the same expert (one __match_any_sync) plus the earlier warps' counts of it, a byte
// per (expert, warp) that each expert's first lane in a warp writes, summed four at a time (dp4a);
// two block barriers. Without: a loop over the chunk's earlier assignments, up to 1023 shared reads
// a thread (the align of 64 tokens x top-8 took 10.2 us with it against 6.7 at one token: H100,
// session 34). (Threads past the assignments return: the last step.)
__device__ __forceinline__ void align_place(const MoeAlign &a, const int32_t *chunk_first, int64_t chunk,
                                            uint8_t *warp_counts) {
  __shared__ int32_t keys[kAlignChunk];
  const int64_t base = chunk * kAlignChunk;
  const int64_t i = base + threadIdx.x;
  const int64_t left = a.assignments - base;
  const int32_t n = static_cast<int32_t>(left < kAlignChunk ? left : kAlignChunk);
  const int32_t key = i < a.assignments ? expert_of(a, i) : -1;
  int32_t rank = 0;
  if (warp_counts != nullptr) {
    const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
    auto *words = reinterpret_cast<uint32_t *>(warp_counts);
    for (int32_t w = threadIdx.x; w < a.experts * (kChunkWarps / 4); w += blockDim.x) words[w] = 0u;
    const uint32_t peers = __match_any_sync(kAll, key);
    const int32_t in_warp = __popc(peers & ((1u << lane) - 1u));
    __syncthreads();
    if (key >= 0 && in_warp == 0) warp_counts[key * kChunkWarps + warp] = static_cast<uint8_t>(__popc(peers));
    __syncthreads();
    if (key < 0) return;
    rank = in_warp;
    const uint32_t *per_warp = words + key * (kChunkWarps / 4); // this expert's counts, four warps a word
#pragma unroll
    for (int q = 0; q < kChunkWarps / 4; ++q) {
      const int below = warp - 4 * q; // warps of this word before this one: 0 to 4
      if (below <= 0) break;
      const uint32_t keep = below >= 4 ? 0xFFFFFFFFu : (1u << (8 * below)) - 1u;
      rank = static_cast<int32_t>(__dp4a(per_warp[q] & keep, 0x01010101u, static_cast<uint32_t>(rank)));
    }
  } else {
    keys[threadIdx.x] = key;
    __syncthreads();
    if (i >= a.assignments) return;
    for (int32_t j = 0; j < static_cast<int32_t>(threadIdx.x) && j < n; ++j) rank += keys[j] == key;
  }
  const int32_t row = chunk_first[chunk * a.experts + key] + rank;
  a.sorted_ids[row] = static_cast<int32_t>(i);
  a.positions[i] = row;
}

// The per-warp counts in dynamic shared memory where rank_counts_bytes gives them room.
__global__ void align_place_kernel(MoeAlign a, const int32_t *chunk_first) {
  chain_in();
  extern __shared__ uint32_t place_smem[];
  align_place(a, chunk_first, blockIdx.x,
              rank_counts_bytes(a.experts) > 0 ? reinterpret_cast<uint8_t *>(place_smem) : nullptr);
}

// All three steps in one block where the assignments fit one chunk (decode: up to kAlignChunk
// tokens x top_k): the same code in the same order, each step's writes visible to the next after
// the block barrier, so the results are those of the three kernels, for one launch instead of
// three. Its state stays in dynamic shared memory (one_block_smem_bytes): the counts, then each
// expert's first row, in `hist`; the offsets; the per-warp counts of the rank where they fit.
size_t one_block_smem_bytes(int32_t experts) {
  return (2 * size_t(experts) + 1) * sizeof(int32_t) + rank_counts_bytes(experts);
}

// (One block a launch: the minimum of one block per multiprocessor lets ptxas take the registers it
// needs; without it, it kept 32 and spilled 8 bytes, CUDA 13.0.)
__global__ void __launch_bounds__(kAlignChunk, 1) align_one_block_kernel(MoeAlign a, int64_t capacity) {
  chain_in();
  extern __shared__ int32_t hist[];
  int32_t *offsets = hist + a.experts;
  uint8_t *warp_counts =
      rank_counts_bytes(a.experts) > 0 ? reinterpret_cast<uint8_t *>(offsets + a.experts + 1) : nullptr;
  align_count(a, nullptr, 0, hist);
  __syncthreads();
  align_scan(a, hist, 1, capacity, offsets);
  __syncthreads();
  align_place(a, hist, 0, warp_counts);
}

__global__ void permute_kernel(DType type, const char *x, int64_t hidden, int64_t ldx, const int32_t *sorted_ids,
                               int64_t assignments, int32_t top_k, char *out) {
  chain_in();
  const int64_t r = blockIdx.x;
  const int64_t bytes = hidden * type.storage_bytes();
  char *dst = out + r * bytes;
  const int64_t a = sorted_ids[r];
  const bool pad = a < 0 || a >= assignments;
  const char *src = x + (pad ? 0 : (a / top_k) * ldx * type.storage_bytes());
  const bool wide =
      bytes % 16 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  if (wide) {
    for (int64_t o = threadIdx.x * 16; o < bytes; o += blockDim.x * 16)
      *reinterpret_cast<int4 *>(dst + o) = pad ? make_int4(0, 0, 0, 0) : *reinterpret_cast<const int4 *>(src + o);
  } else {
    for (int64_t o = threadIdx.x; o < bytes; o += blockDim.x) dst[o] = pad ? 0 : src[o];
  }
}

// The element types the combine and the activation meet in models, fixed at compile time (Elem):
// load_element / store_element branch on a run-time DType at every element and inline the generic
// codecs besides, which made those kernels instruction-bound (ncu, H100, session 33: the combine
// at 64 tokens issued about 1,160 instructions a thread for eight terms of one channel). kAny keeps
// the run-time type for the rest. The same decode_* / encode_* functions either way, so the values
// are the same bits.
enum class Elem { kAny, kBf16, kF16, kF32 };

Elem elem_of(DType t) {
  if (t == dtypes::bf16) return Elem::kBf16;
  if (t == dtypes::f16) return Elem::kF16;
  if (t == dtypes::f32) return Elem::kF32;
  return Elem::kAny;
}

template <Elem E> __device__ __forceinline__ float decode_as(DType t, uint32_t code) {
  if constexpr (E == Elem::kBf16)
    return decode_bf16(code);
  else if constexpr (E == Elem::kF16)
    return decode_f16(code);
  else
    return decode(t, code);
}

template <Elem E> __device__ __forceinline__ uint32_t encode_as(DType t, float v) {
  if constexpr (E == Elem::kBf16)
    return encode_bf16(v);
  else if constexpr (E == Elem::kF16)
    return encode_f16(v);
  else
    return encode(t, v);
}

template <Elem E> __device__ __forceinline__ float load_as(DType t, const void *base, int64_t i) {
  if constexpr (E == Elem::kF32)
    return static_cast<const float *>(base)[i];
  else if constexpr (E == Elem::kAny)
    return load_element(t, base, i);
  else
    return decode_as<E>(t, static_cast<const uint16_t *>(base)[i]);
}

template <Elem E> __device__ __forceinline__ void store_as(DType t, void *base, int64_t i, float v) {
  if constexpr (E == Elem::kF32)
    static_cast<float *>(base)[i] = v;
  else if constexpr (E == Elem::kAny)
    store_element(t, base, i, v);
  else
    static_cast<uint16_t *>(base)[i] = static_cast<uint16_t>(encode_as<E>(t, v));
}

// Calls f(std::integral_constant<Elem, E>) with E = elem_of(t).
template <class F> void with_elem(DType t, F f) {
  switch (elem_of(t)) {
  case Elem::kBf16:
    return f(std::integral_constant<Elem, Elem::kBf16>{});
  case Elem::kF16:
    return f(std::integral_constant<Elem, Elem::kF16>{});
  case Elem::kF32:
    return f(std::integral_constant<Elem, Elem::kF32>{});
  default:
    return f(std::integral_constant<Elem, Elem::kAny>{});
  }
}

// The expert output bias's row of assignment i (CombineBias::row; none without a bias): the
// nearest expert for an id out of range, which the GPU cannot report.
struct CombineBias {
  const float *bias;
  const int32_t *ids;
  int32_t experts;
  __device__ __forceinline__ const float *row(int64_t i, int64_t hidden) const {
    return bias + static_cast<int64_t>(min(max(ids[i], 0), experts - 1)) * hidden;
  }
};

template <Elem E>
__global__ void combine_kernel(DType type, const void *y, int64_t rows, int64_t hidden, const int32_t *positions,
                               const float *weights, int64_t tokens, int32_t top_k, void *out, CombineBias cb) {
  chain_in();
  for (int64_t t = blockIdx.y; t < tokens; t += gridDim.y)
    for (int64_t h = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; h < hidden;
         h += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      float sum = 0.0f;
      for (int32_t j = 0; j < top_k; ++j) {
        const int64_t r = positions[t * top_k + j];
        float product = 0.0f;
        if (r >= 0 && r < rows) {
          float v = load_as<E>(type, y, r * hidden + h);
          if (cb.bias != nullptr) v = __fadd_rn(v, cb.row(t * top_k + j, hidden)[h]);
          product = __fmul_rn(weights[t * top_k + j], v);
        }
        sum = j == 0 ? product : __fadd_rn(sum, product);
      }
      store_as<E>(type, out, t * hidden + h, sum);
    }
}

// combine_kernel for 16-bit outputs with rows of whole 16-byte units: a thread takes 8 channels,
// one 16-byte load per term and one 16-byte store, the rows' positions and weights of a token
// loaded once per thread.
// Each output is the same sum of the same products in the same order as combine_kernel's (only
// the loads are wider), so the results are equal bitwise. (combine_kernel's 2-byte loads, one
// dependent position load per term, read 0.5 TB/s: 1.1 ms for Qwen3-30B-A3B at 16384 tokens on
// the H200, session 19.)
template <Elem E>
__global__ void combine_wide_kernel(DType type, const void *y, int64_t rows, int64_t hidden, const int32_t *positions,
                                    const float *weights, int64_t tokens, int32_t top_k, void *out, CombineBias cb) {
  chain_in();
  const int64_t units = hidden / 8;
  for (int64_t t = blockIdx.y; t < tokens; t += gridDim.y)
    for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units;
         u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      float sum[8];
#pragma unroll 4
      for (int32_t j = 0; j < top_k; ++j) {
        const int64_t r = positions[t * top_k + j];
        const float w = weights[t * top_k + j];
        const bool in = r >= 0 && r < rows;
        uint4 q = make_uint4(0, 0, 0, 0);
        if (in) q = reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(y) + r * hidden)[u];
        const uint32_t word[4] = {q.x, q.y, q.z, q.w};
        const float *b = cb.bias != nullptr && in ? cb.row(t * top_k + j, hidden) + 8 * u : nullptr;
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          float v = decode_as<E>(type, (word[c / 2] >> (16 * (c % 2))) & 0xFFFFu);
          if (b != nullptr) v = __fadd_rn(v, b[c]);
          const float product = in ? __fmul_rn(w, v) : 0.0f;
          sum[c] = j == 0 ? product : __fadd_rn(sum[c], product);
        }
      }
      uint32_t packed[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) packed[c] = encode_as<E>(type, sum[2 * c]) | encode_as<E>(type, sum[2 * c + 1]) << 16;
      reinterpret_cast<uint4 *>(static_cast<uint16_t *>(out) + t * hidden)[u] =
          make_uint4(packed[0], packed[1], packed[2], packed[3]);
    }
}

// In: the element type of the gate-up rows (a.h_type), Out: of the output (a.out_type).
template <Elem In, Elem Out> __global__ void activation_kernel(MoeActivation a) {
  chain_in();
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    // The row's expert once per row of a block (its search is a few loads all threads share).
    const int32_t e = a.offsets != nullptr ? moe_route::expert_of_row(a.offsets, a.experts, r) : 0;
    const float *bias = a.bias != nullptr ? a.bias + e * 2 * a.inter : nullptr;
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < a.inter;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      float gate = load_as<In>(a.h_type, a.h, r * a.ldh + c);
      float up = load_as<In>(a.h_type, a.h, r * a.ldh + a.inter + c);
      if (bias != nullptr) gate += bias[c], up += bias[a.inter + c];
      store_as<Out>(a.out_type, a.out, r * a.inter + c, moe_route::activate(gate, up, a.kind, a.limit, a.alpha));
    }
  }
}

} // namespace

Status moe_topk_cuda(const MoeTopk &a, void *stream) {
  if (a.top_k < 1 || a.top_k > a.experts || a.top_k > kMaxTopK)
    return Status::Error("top_k must lie in [1, min(experts=" + std::to_string(a.experts) + ", " +
                         std::to_string(kMaxTopK) + ")] on the GPU, got " + std::to_string(a.top_k));
  if (Status st = moe_topk_check_groups(a); !st) return st;
  if (a.n_group > 32 || (a.n_group > 0 && a.experts > 256))
    return Status::Error("group-limited routing on the GPU takes up to 256 experts in up to 32 equal groups, got " +
                         std::to_string(a.experts) + " experts in " + std::to_string(a.n_group));
  if (a.tokens == 0) return Status::Ok();
  const int64_t blocks = (a.tokens + kTopkWarps - 1) / kTopkWarps;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const unsigned grid = static_cast<unsigned>(blocks), threads = 32 * kTopkWarps;
  if (a.experts <= 32)
    launch_chained(topk_registers_kernel<1>, dim3(grid), dim3(threads), 0, s, a);
  else if (a.experts <= 64)
    launch_chained(topk_registers_kernel<2>, dim3(grid), dim3(threads), 0, s, a);
  else if (a.experts <= 128)
    launch_chained(topk_registers_kernel<4>, dim3(grid), dim3(threads), 0, s, a);
  else if (a.experts <= 256)
    launch_chained(topk_registers_kernel<8>, dim3(grid), dim3(threads), 0, s, a);
  else
    launch_chained(topk_kernel, dim3(grid), dim3(threads), 0, s, a);
  return launched("moe_topk");
}

Status moe_align_cuda(const MoeAlign &a, void *stream) {
  if (a.experts < 1 || a.block_m < 1)
    return Status::Error("moe_align needs at least one expert and a block of at least one row");
  if (a.workspace_bytes < moe_align_workspace_bytes(a.assignments, a.experts))
    return Status::Error("moe_align needs " + std::to_string(moe_align_workspace_bytes(a.assignments, a.experts)) +
                         " bytes of workspace, got " + std::to_string(a.workspace_bytes));
  if (static_cast<size_t>(a.experts) * sizeof(int32_t) > 48 * 1024)
    return Status::Error("moe_align on the GPU takes at most 12288 experts, got " + std::to_string(a.experts));
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t capacity = moe_route::align_capacity(a.assignments, a.experts, a.block_m);
  const int64_t chunks = (a.assignments + kAlignChunk - 1) / kAlignChunk;
  int32_t *chunk_counts = static_cast<int32_t *>(a.workspace);
  static_assert(kAlignChunk == kScanThreads, "one block runs all three steps");
  // One block's shared memory: its dynamic state beside the static words (the place step's
  // kAlignChunk keys, the scan's warp totals, with room to spare), within the 48 KiB a launch gets
  // without opting in.
  constexpr size_t kStaticBytes = (kAlignChunk + 64) * sizeof(int32_t);
  if (chunks == 1 && one_block_smem_bytes(a.experts) + kStaticBytes <= 48 * 1024) {
    launch_chained(align_one_block_kernel, dim3(1), dim3(kAlignChunk), one_block_smem_bytes(a.experts), s, a, capacity);
    return launched("moe_align");
  }
  if (chunks > 0)
    launch_chained(align_count_kernel, dim3(static_cast<unsigned>(chunks)), dim3(kAlignChunk),
                   a.experts * sizeof(int32_t), s, a, chunk_counts);
  launch_chained(align_scan_kernel, dim3(1), dim3(kScanThreads), 0, s, a, chunk_counts, chunks, capacity);
  if (chunks > 0)
    launch_chained(align_place_kernel, dim3(static_cast<unsigned>(chunks)), dim3(kAlignChunk),
                   rank_counts_bytes(a.experts), s, a, chunk_counts);
  return launched("moe_align");
}

Status moe_permute_cuda(DType type, const void *x, int64_t hidden, int64_t ldx, const int32_t *sorted_ids,
                        int64_t capacity, int64_t assignments, int32_t top_k, void *out, void *stream) {
  if (capacity == 0 || hidden == 0) return Status::Ok();
  launch_chained(permute_kernel, dim3(static_cast<unsigned>(capacity)), dim3(128), 0, static_cast<cudaStream_t>(stream),
                 type, static_cast<const char *>(x), hidden, ldx, sorted_ids, assignments, top_k,
                 static_cast<char *>(out));
  return launched("moe_permute");
}

Status moe_combine_cuda(DType type, const void *y, int64_t rows, int64_t hidden, const int32_t *positions,
                        const float *weights, int64_t tokens, int32_t top_k, void *out, void *stream, const float *bias,
                        const int32_t *ids, int32_t experts) {
  if (tokens == 0 || hidden == 0) return Status::Ok();
  if (bias != nullptr && (ids == nullptr || experts < 1))
    return Status::Error("moe_combine: a bias needs the assignments' expert ids and at least one expert");
  const CombineBias cb{bias, ids, experts};
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const unsigned token_blocks = static_cast<unsigned>(tokens < 65535 ? tokens : 65535);
  // The wide kernel where its threads fill the GPU: with few tokens each of its threads waits on
  // its terms' loads in turn, and the narrow one, 8x the threads, was faster (H200, session 19:
  // one token over 2048 channels 9.5 against 26.2 us, 64 tokens 10.8 against 25.1; 1024 tokens
  // 76.4 against 50.7).
  const int64_t units = hidden / 8;
  const bool wide = type.bits == 16 && hidden % 8 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(out) % 16 == 0 && tokens * units >= kCombineWideThreads;
  with_elem(type, [&](auto e) {
    constexpr Elem E = decltype(e)::value;
    // (Every 16-bit type is bf16 or f16: the wide kernel is built for those two only.)
    if constexpr (E == Elem::kBf16 || E == Elem::kF16)
      if (wide) {
        const int threads = units < 128 ? 32 * static_cast<int>((units + 31) / 32) : 128;
        const dim3 grid(static_cast<unsigned>((units + threads - 1) / threads), token_blocks);
        launch_chained(combine_wide_kernel<E>, dim3(grid), dim3(threads), 0, s, type, y, rows, hidden, positions,
                       weights, tokens, top_k, out, cb);
        return;
      }
    const dim3 grid(static_cast<unsigned>((hidden + 255) / 256), token_blocks);
    launch_chained(combine_kernel<E>, dim3(grid), dim3(256), 0, s, type, y, rows, hidden, positions, weights, tokens,
                   top_k, out, cb);
  });
  return launched("moe_combine");
}

Status moe_activation_cuda(const MoeActivation &a, void *stream) {
  if (a.experts < 1) return Status::Error("moe_activation needs at least one expert");
  if (a.rows == 0 || a.inter == 0) return Status::Ok();
  // Blocks over rows (y) and 256-output chunks of a row (x), so that a few long rows (decode on few
  // experts: Mixtral's 2 rows of 14336) still spread over the GPU.
  constexpr int kThreads = 256;
  const int64_t chunks = (a.inter + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(chunks < 65535 ? chunks : 65535),
                  static_cast<unsigned>(a.rows < 65535 ? a.rows : 65535));
  with_elem(a.h_type, [&](auto in) {
    with_elem(a.out_type, [&](auto out) {
      launch_chained(activation_kernel<decltype(in)::value, decltype(out)::value>, dim3(grid), dim3(kThreads), 0,
                     static_cast<cudaStream_t>(stream), a);
    });
  });
  return launched("moe_activation");
}

} // namespace humming
