// Activation quantization on the GPU, with the arithmetic of numeric/act_quant.h (scale = amax /
// max, code = encode(x / scale) after the clip), so the codes and scales match the CPU reference
// bit for bit.
//
// Rows of whole 16-byte units (k a multiple of 8, 16-byte aligned rows) take the vector kernels,
// which read eight inputs per thread and access, have the input and code types as template
// parameters, divide by the scale through its reciprocal where that rounds as the division does
// (reciprocal_quotient) and convert with the GPU's own float-to-FP8 instruction (round to nearest
// even, as encode()):
// * per token: one block per row, sized to the row, which holds the row in registers (rows of up
//   to 65536 inputs; longer ones are read twice, the second time mostly from L1), or for many
//   rows of at most 256 vectors (2048 16-bit inputs) a warp per row;
// * per K group of 8 to 256 inputs: each thread holds one vector, and the group's amax is a
//   shuffle across the group's lanes, so every input is read once.
// Everything else (other group sizes, odd k, unaligned rows) takes the scalar kernel: one block
// per (token, group), any DType at run time.
//
// Every kernel reads its rows through a RowGather: row r of x, or for moe_permute_quantize the row
// that moe_permute would put at r (a token's row, or zeros in a padding row), so that a mixture of
// experts' sorted rows are quantized straight from the tokens' activations, without writing them
// out in 16 bits first and reading them back.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "humming/backend/pdl.h"
#include "humming/humming.h"
#include "humming/numeric/act_quant.h"

namespace humming {
namespace {

// Every kernel here is launched chained (backend/pdl.h, launch_chained) and starts with this: it
// waits for the launch before (which may have written x or the gather's ids, or still read what
// the codes overwrite), then lets the next chained launch (the GEMM that reads the codes) be
// scheduled, so that its prologue overlaps this kernel. Allowing only after the wait is what
// GemmArgs::early_weights rests on: a launch after this one begins only once everything before
// this one has finished.
__device__ __forceinline__ void wait_then_allow() {
  pdl_wait();
  pdl_allow();
}

// Where row r of the rows being quantized comes from: row r of x (sorted_ids null), or row
// sorted_ids[r] / top_k, a token's, where sorted_ids[r] lies in [0, assignments), else none (a
// padding row: zeros, as moe_permute writes it).
struct RowGather {
  const int32_t *sorted_ids;
  int64_t assignments;
  int32_t top_k;
  // The source row of row r, or -1 for zeros.
  __device__ __forceinline__ int64_t source(int64_t r) const {
    if (sorted_ids == nullptr) return r;
    const int64_t a = sorted_ids[r];
    return a >= 0 && a < assignments ? a / top_k : -1;
  }
};

constexpr int kScalarThreads = 128;
constexpr int kGroupThreads = 256;
constexpr int kGroupRows = 4;            // rows a thread of the group kernel loads at once
constexpr int kMaxRowsPerLaunch = 65535; // grid.y; larger batches loop over rows

__global__ void quantize_act_scalar(ActFormat fmt, DType x_t, const void *x, int64_t m, int64_t k, int64_t ldx,
                                    int64_t group, int64_t cols, uint8_t *codes, float *scales, RowGather gather) {
  wait_then_allow();
  const int64_t g = blockIdx.x;
  const int64_t begin = g * group, end = min(k, begin + group);
  __shared__ float partial[kScalarThreads];
  const ActRange range = act_range(fmt.type);
  for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
    const int64_t src = gather.source(r);
    const void *row = src < 0 ? nullptr : static_cast<const uint8_t *>(x) + src * ldx * x_t.storage_bytes();
    // Input i of the row (zeros in a padding row).
    const auto value = [&](int64_t i) { return row != nullptr ? load_element(x_t, row, i) : 0.0f; };
    float amax = 0.0f;
    for (int64_t i = begin + threadIdx.x; i < end; i += kScalarThreads) amax = fmaxf(amax, fabsf(value(i)));
    partial[threadIdx.x] = amax;
    __syncthreads();
    for (int s = kScalarThreads / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + s]);
      __syncthreads();
    }
    const float scale = act_scale_from_amax(fmt.type, partial[0]);
    __syncthreads(); // partial[0] is read by every thread before the next row overwrites it
    if (threadIdx.x == 0) scales[r * cols + g] = scale;
    for (int64_t i = begin + threadIdx.x; i < end; i += kScalarThreads)
      codes[r * k + i] = static_cast<uint8_t>(encode(fmt.type, act_quotient(range, value(i), scale)));
  }
}

// Eight inputs of type X (float, __half or __nv_bfloat16) as they lie in memory: 16 bytes, or 32
// for float. Rows held in registers keep this form (half the registers of eight floats).
template <class X> struct Raw8 {
  uint4 u[sizeof(X) / 2];
};

template <class X> __device__ __forceinline__ Raw8<X> load_raw8(const X *p) {
  Raw8<X> r;
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(X) / 2); ++i) r.u[i] = reinterpret_cast<const uint4 *>(p)[i];
  return r;
}

// The eight inputs as floats (every conversion to fp32 is exact).
template <class X> __device__ __forceinline__ void to_float8(const Raw8<X> &r, float (&v)[8]) {
  if constexpr (std::is_same_v<X, float>) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      v[4 * i] = __uint_as_float(r.u[i].x), v[4 * i + 1] = __uint_as_float(r.u[i].y);
      v[4 * i + 2] = __uint_as_float(r.u[i].z), v[4 * i + 3] = __uint_as_float(r.u[i].w);
    }
  } else {
    const uint32_t w[4] = {r.u[0].x, r.u[0].y, r.u[0].z, r.u[0].w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // The low half is the element at the lower address.
      const uint16_t lo = static_cast<uint16_t>(w[i] & 0xFFFFu), hi = static_cast<uint16_t>(w[i] >> 16);
      if constexpr (std::is_same_v<X, __half>) {
        v[2 * i] = __half2float(__ushort_as_half(lo));
        v[2 * i + 1] = __half2float(__ushort_as_half(hi));
      } else {
        v[2 * i] = __bfloat162float(__ushort_as_bfloat16(lo));
        v[2 * i + 1] = __bfloat162float(__ushort_as_bfloat16(hi));
      }
    }
  }
}

template <class X> __device__ __forceinline__ void load8(const X *p, float (&v)[8]) { to_float8(load_raw8(p), v); }

// The largest magnitude among amax and eight inputs.
__device__ __forceinline__ float amax8(const float (&v)[8], float amax) {
#pragma unroll
  for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(v[e]));
  return amax;
}

template <class X> __device__ __forceinline__ float amax8(const Raw8<X> &r, float amax) {
  float v[8];
  to_float8(r, v);
  return amax8(v, amax);
}

// The code of q for activation type ActId, q already clipped to the type's range (so saturation
// never applies): RNE like encode(); the FP8 conversion is one instruction from sm_89 on.
template <uint32_t ActId> __device__ __forceinline__ uint32_t encode_clipped(float q) {
  if constexpr (ActId == dtypes::i8.id())
    return static_cast<uint32_t>(__float2int_rn(q)) & 0xFFu;
  else
    return __nv_cvt_float_to_fp8(q, __NV_SATFINITE, ActId == dtypes::e4m3.id() ? __NV_E4M3 : __NV_E5M2);
}

// The codes of two clipped quotients, a in the low byte: for the FP8 types one conversion of the
// pair (the instruction's first result lands in the low byte).
template <uint32_t ActId> __device__ __forceinline__ uint32_t encode_pair(float a, float b) {
  if constexpr (ActId == dtypes::i8.id())
    return encode_clipped<ActId>(a) | encode_clipped<ActId>(b) << 8;
  else
    return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE,
                                    ActId == dtypes::e4m3.id() ? __NV_E4M3 : __NV_E5M2);
}

// x / scale from y, the correctly rounded reciprocal of the scale, as the division rounds it
// (Markstein's theorem): q0 = x y is within an ulp of the quotient, the remainder x - scale q0 is
// exact in one FMA, and q0 + remainder y rounds to the correctly rounded quotient, as long as the
// remainder does not underflow. Three instructions where the division takes about ten with its
// range check; the division was most of the kernel's instructions (ncu, 8192 x 2048 bf16 rows,
// e4m3 per token, session 45). A zero x keeps its sign (the sum would give +0 for -0).
// by_reciprocal says where this holds: scales in [2^-60, 2^60] (one test per scale, not per
// input). There every quotient an input can give is at most the type's maximum (|x| <= amax), and
// a quotient that a code can tell from zero (at least 2^-17, half e5m2's smallest subnormal) has
// |x| >= 2^-77, whose remainder (about 2^-24 |x|) is a normal float; smaller quotients round to
// a zero code either way, with x's sign.
__device__ __forceinline__ bool by_reciprocal(float scale) { return scale >= 0x1p-60f && scale <= 0x1p60f; }
__device__ __forceinline__ float reciprocal_quotient(float x, float scale, float y) {
  const float q0 = x * y;
  return copysignf(fmaf(fmaf(-q0, scale, x), y, q0), x);
}

// Encodes v (eight inputs) with `scale` into eight codes at 8-byte aligned `out`; `y` is the
// scale's reciprocal (1 / scale, correctly rounded), which Reciprocal uses (by_reciprocal).
template <uint32_t ActId, bool Reciprocal>
__device__ __forceinline__ void encode8(const float (&v)[8], float scale, float y, uint8_t *out) {
  const ActRange r = act_range(DType::from_id(ActId));
  float q[8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
    q[i] = Reciprocal ? act_clip(r, reciprocal_quotient(v[i], scale, y)) : act_quotient(r, v[i], scale);
  uint32_t word[2];
#pragma unroll
  for (int w = 0; w < 2; ++w)
    word[w] = encode_pair<ActId>(q[4 * w], q[4 * w + 1]) | encode_pair<ActId>(q[4 * w + 2], q[4 * w + 3]) << 16;
  *reinterpret_cast<uint2 *>(out) = make_uint2(word[0], word[1]);
}

// A scale and what encoding with it needs: its reciprocal, and whether the quotients may come
// from it (by_reciprocal).
struct ActScaleRcp {
  float scale, y;
  bool rcp;
  __device__ __forceinline__ explicit ActScaleRcp(float s) : scale(s), y(1.0f / s), rcp(by_reciprocal(s)) {}
};

// f(std::true_type) where the quotients may come from the reciprocal, else f(std::false_type):
// one test that picks a whole encoding loop, so that neither loop tests per vector.
template <class F> __device__ __forceinline__ void with_reciprocal(bool rcp, F f) {
  if (rcp)
    f(std::true_type{});
  else
    f(std::false_type{});
}

// encode8 with a scale's quotients from its reciprocal where that is exact, else by division.
template <uint32_t ActId>
__device__ __forceinline__ void encode8(const float (&v)[8], const ActScaleRcp &s, uint8_t *out) {
  with_reciprocal(s.rcp, [&](auto rcp) { encode8<ActId, decltype(rcp)::value>(v, s.scale, s.y, out); });
}

// The scale of a row from each thread's amax over its share (blockDim.x a multiple of 32), stored
// at `out` by thread 0; every thread gets it. `slot` (0 or 1) picks the shared buffer of the warps'
// maxima: a block that encodes several rows alternates it, so that no warp overwrites the maxima
// of the row before while another warp still reads them (the warps meet at this row's barrier
// before any of them reaches the row after, which writes the same slot again).
template <uint32_t ActId> __device__ __forceinline__ float row_scale(float amax, float *out, int slot = 0) {
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, s));
  __shared__ float warp_max[2][32];
  if (threadIdx.x % 32 == 0) warp_max[slot][threadIdx.x / 32] = amax;
  __syncthreads();
  amax = 0.0f;
  for (unsigned w = 0; w < blockDim.x / 32; ++w) amax = fmaxf(amax, warp_max[slot][w]);
  const float scale = act_scale_from_amax(DType::from_id(ActId), amax);
  if (threadIdx.x == 0) *out = scale;
  return scale;
}

// Per token, rows of at most V x blockDim.x vectors: block b encodes rows b, b + gridDim.x, ...,
// thread i holding vectors i, i + blockDim.x, ... of a row in registers, so the row is read from
// memory once and all of a thread's loads are in flight together. With Stream, the grid holds only
// as many blocks as the SMs take at once and each block, before this row's amax, barrier and
// stores, asks L2 for the next row of its share (prefetch.global.L2: no registers), so the memory
// stays busy through them. That pays where a block is large and an SM holds only two or three:
// measured on the H200 (session 22, bf16, e4m3-pt, graph us after an L2 flush), 8192 x 28672 rows
// (896 threads) 298 -> 246 us (a plain cast of the same bytes in torch: 220); rows of 8192 (256
// threads, eight blocks per SM) went 65.3 -> 71.4 (the cast: 65.1) and 16384 x 4096 65.5 -> 70.3,
// so those keep a block per row. (A second set of registers for the next row instead was slower
// still: 75.9 us for 8192 x 8192.)
template <class X, uint32_t ActId, int V, bool Stream>
__global__ void __launch_bounds__(1024)
    quantize_act_rows(const X *x, int64_t m, int64_t k, int64_t ldx, uint8_t *codes, float *scales, RowGather gather) {
  wait_then_allow();
  const int64_t vecs = k / 8;
  // Rows of eight vectors a thread (1024 threads, 64 registers) read no gather: with it they
  // spilled 8 bytes (ptxas, CUDA 13.0); launch_vector sends gathered rows that long to
  // quantize_act_long_rows.
  auto load_row = [&](int64_t r, Raw8<X>(&raw)[V]) {
    const int64_t src = V <= 4 ? gather.source(r) : r;
    const X *row = x + src * ldx;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
      if (i < vecs) raw[j] = src >= 0 ? load_raw8(row + 8 * i) : Raw8<X>{};
    }
  };
  Raw8<X> raw[V];
  int64_t r = blockIdx.x;
  if (r < m) load_row(r, raw);
  for (int slot = 0; r < m; r += gridDim.x, slot ^= 1) {
    const int64_t after = r + gridDim.x;
    const int64_t after_src = Stream && after < m ? (V <= 4 ? gather.source(after) : after) : -1;
    if (after_src >= 0) {
      const char *row = reinterpret_cast<const char *>(x + after_src * ldx);
      for (int64_t line = threadIdx.x; line * 128 < k * static_cast<int64_t>(sizeof(X)); line += blockDim.x)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(row + line * 128));
    }
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (threadIdx.x + static_cast<int64_t>(j) * blockDim.x < vecs) amax = amax8(raw[j], amax);
    const ActScaleRcp scale(row_scale<ActId>(amax, scales + r, slot));
    // One test of the scale for the row (a test per vector cost registers: 8 bytes of spills).
    // Blocks of eight vectors a thread (rows of more than 32768 16-bit inputs) divide: at their 64
    // registers (1024 threads) the reciprocal's spilled 24 bytes (ptxas, CUDA 13.0).
    const auto encode_row = [&](auto rcp) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
        if (i < vecs) {
          float v[8];
          to_float8(raw[j], v);
          encode8<ActId, decltype(rcp)::value>(v, scale.scale, scale.y, codes + r * k + 8 * i);
        }
      }
    };
    if (V <= 4 && scale.rcp)
      encode_row(std::integral_constant<bool, V <= 4>{});
    else
      encode_row(std::false_type{});
    if (!Stream) break;
    if (after < m) load_row(after, raw);
  }
}

// Per token, rows of at most 32 V vectors, many of them (prefill): a warp per row and kWarpRows
// rows per block. Lane i holds vectors i, i + 32, ... of its warp's row in registers, and the row's
// amax is a shuffle within the warp: no shared memory and no block barrier, where the block-wide
// kernel above gave such rows blocks of 64 threads (two warps, the second mostly idle for rows of
// 768 inputs) and met at a barrier per row.
constexpr int kWarpRows = 4;
template <class X, uint32_t ActId, int V>
__global__ void __launch_bounds__(32 * kWarpRows)
    quantize_act_warp_rows(const X *x, int64_t m, int64_t k, int64_t ldx, uint8_t *codes, float *scales,
                           RowGather gather) {
  wait_then_allow();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpRows + threadIdx.x / 32;
  if (r >= m) return; // the whole warp
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t vecs = k / 8;
  const int64_t src = gather.source(r);
  const X *row = x + src * ldx;
  Raw8<X> raw[V];
#pragma unroll
  for (int j = 0; j < V; ++j)
    if (lane + 32 * j < vecs) raw[j] = src >= 0 ? load_raw8(row + 8 * (lane + 32 * j)) : Raw8<X>{};
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < V; ++j)
    if (lane + 32 * j < vecs) amax = amax8(raw[j], amax);
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, s));
  const float sc = act_scale_from_amax(DType::from_id(ActId), amax);
  if (lane == 0) scales[r] = sc;
  const ActScaleRcp scale(sc);
  const auto encode_row = [&](auto rcp) {
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (lane + 32 * j < vecs) {
        float v[8];
        to_float8(raw[j], v);
        encode8<ActId, decltype(rcp)::value>(v, scale.scale, scale.y, codes + r * k + 8 * (lane + 32 * j));
      }
  };
  with_reciprocal(scale.rcp, encode_row);
}

// Per token, rows of any length: as above, a row per block, but the row is read twice (the amax,
// then the codes; the second pass mostly hits L1).
template <class X, uint32_t ActId>
__global__ void __launch_bounds__(1024)
    quantize_act_long_rows(const X *x, int64_t k, int64_t ldx, uint8_t *codes, float *scales, RowGather gather) {
  wait_then_allow();
  const int64_t r = blockIdx.x;
  const int64_t src = gather.source(r);
  const X *row = x + src * ldx;
  const int64_t vecs = k / 8;
  // Eight inputs of the row (zeros in a padding row).
  const auto raw8 = [&](int64_t i) { return src >= 0 ? load_raw8(row + 8 * i) : Raw8<X>{}; };
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) amax = amax8(raw8(i), amax);
  const ActScaleRcp scale(row_scale<ActId>(amax, scales + r));
  for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
    float v[8];
    to_float8(raw8(i), v);
    encode8<ActId>(v, scale, codes + r * k + 8 * i);
  }
}

// Per K group of `group` inputs (8 to 256, a power of two): thread i of block (c, y) holds vector
// c * kGroupThreads + i of its rows, and the group's group / 8 lanes find its amax by shuffles.
// Each pass takes kGroupRows rows at once (rows y, y + gridDim.y, ...), so that many loads of a
// thread are in flight together.
template <class X, uint32_t ActId>
__global__ void quantize_act_groups(const X *x, int64_t m, int64_t k, int64_t ldx, int group, int64_t cols,
                                    uint8_t *codes, float *scales, RowGather gather) {
  wait_then_allow();
  const int64_t vec = static_cast<int64_t>(blockIdx.x) * kGroupThreads + threadIdx.x;
  const bool in = vec < k / 8;
  const int lanes = group / 8; // a power of two that divides 32
  const int64_t step = gridDim.y;
  for (int64_t r0 = blockIdx.y; r0 < m; r0 += kGroupRows * step) {
    Raw8<X> raw[kGroupRows];
#pragma unroll
    for (int j = 0; j < kGroupRows; ++j) {
      const int64_t r = r0 + j * step;
      raw[j] = Raw8<X>{};
      const int64_t src = in && r < m ? gather.source(r) : -1;
      if (src >= 0) raw[j] = load_raw8(x + src * ldx + 8 * vec);
    }
#pragma unroll
    for (int j = 0; j < kGroupRows; ++j) {
      const int64_t r = r0 + j * step;
      float v[8];
      to_float8(raw[j], v);
      float amax = amax8(v, 0.0f);
      for (int s = lanes / 2; s > 0; s >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, s));
      const float scale = act_scale_from_amax(DType::from_id(ActId), amax);
      if (!in || r >= m) continue;
      if (vec % lanes == 0) scales[r * cols + vec / lanes] = scale;
      encode8<ActId>(v, ActScaleRcp(scale), codes + r * k + 8 * vec);
    }
  }
}

// Threads for a row of `vecs` vectors, `per` vectors each: whole warps, 64 to 1024.
unsigned row_threads(int64_t vecs, int per) {
  const int64_t want = ((vecs + per - 1) / per + 31) / 32 * 32;
  return static_cast<unsigned>(want < 64 ? 64 : (want > 1024 ? 1024 : want));
}

template <class X, uint32_t ActId>
void launch_vector(const ActFormat &fmt, const void *x, int64_t m, int64_t k, int64_t ldx, uint8_t *codes,
                   float *scales, const RowGather &gather, cudaStream_t stream) {
  const X *xp = static_cast<const X *>(x);
  const int64_t vecs = k / 8;
  // Vectors a thread holds at most: eight of 16-bit inputs, four of floats (64 registers).
  constexpr int kMaxV = sizeof(X) == 2 ? 8 : 4;
  if (fmt.granularity == ActScale::kToken) {
    // Few rows (decode) get a thread per vector, many rows four or eight per thread (fewer,
    // fuller blocks). Blocks of more than 512 threads stream rows (see quantize_act_rows); the
    // others take one row each (rows on grid.x: up to 2^31 - 1 of them).
    auto rows = [&](auto v, unsigned threads) {
      constexpr int V = decltype(v)::value;
      // Streaming blocks of eight vectors per thread would spill (28 bytes, CUDA 13.0): rows of
      // more than 32768 16-bit inputs keep a block per row.
      if constexpr (V <= 4) {
        const int sms = threads > 512 ? current_device_sms() : 0; // 0 (or unknown): a block per row
        const int64_t resident = static_cast<int64_t>(sms) * (2048 / threads);
        if (sms > 0 && resident < m) {
          launch_chained(quantize_act_rows<X, ActId, V, true>, dim3(static_cast<unsigned>(resident)), dim3(threads), 0,
                         stream, xp, m, k, ldx, codes, scales, gather);
          return;
        }
      }
      launch_chained(quantize_act_rows<X, ActId, V, false>, dim3(static_cast<unsigned>(m)), dim3(threads), 0, stream,
                     xp, m, k, ldx, codes, scales, gather);
    };
    // Many short rows: a warp per row (quantize_act_warp_rows), with the fewest vectors per lane
    // that hold the row.
    auto warp_rows = [&](auto v) {
      constexpr int V = decltype(v)::value;
      const int64_t blocks = (m + kWarpRows - 1) / kWarpRows;
      launch_chained(quantize_act_warp_rows<X, ActId, V>, dim3(static_cast<unsigned>(blocks)), dim3(32 * kWarpRows), 0,
                     stream, xp, m, k, ldx, codes, scales, gather);
    };
    if (m > 256 && vecs <= 32 * 2)
      warp_rows(std::integral_constant<int, 2>{});
    else if (m > 256 && vecs <= 32 * 4)
      warp_rows(std::integral_constant<int, 4>{});
    else if (m > 256 && vecs <= 32 * kMaxV)
      warp_rows(std::integral_constant<int, kMaxV>{});
    else if (m <= 256 && vecs <= 1024)
      rows(std::integral_constant<int, 1>{}, row_threads(vecs, 1));
    else if (vecs <= 4 * 1024)
      rows(std::integral_constant<int, 4>{}, row_threads(vecs, 4));
    else if (vecs <= kMaxV * 1024 && (kMaxV <= 4 || gather.sorted_ids == nullptr))
      rows(std::integral_constant<int, kMaxV>{}, row_threads(vecs, kMaxV));
    else
      launch_chained(quantize_act_long_rows<X, ActId>, dim3(static_cast<unsigned>(m)), dim3(1024), 0, stream, xp, k,
                     ldx, codes, scales, gather);
  } else {
    const int64_t cols = (k + fmt.group_k - 1) / fmt.group_k;
    const dim3 grid(static_cast<unsigned>((vecs + kGroupThreads - 1) / kGroupThreads),
                    static_cast<unsigned>((m + kGroupRows - 1) / kGroupRows < kMaxRowsPerLaunch
                                              ? (m + kGroupRows - 1) / kGroupRows
                                              : kMaxRowsPerLaunch));
    launch_chained(quantize_act_groups<X, ActId>, grid, dim3(kGroupThreads), 0, stream, xp, m, k, ldx,
                   static_cast<int>(fmt.group_k), cols, codes, scales, gather);
  }
}

template <class X>
void launch_vector_for_act(const ActFormat &fmt, const void *x, int64_t m, int64_t k, int64_t ldx, uint8_t *codes,
                           float *scales, const RowGather &gather, cudaStream_t stream) {
  if (fmt.type == dtypes::e4m3)
    launch_vector<X, dtypes::e4m3.id()>(fmt, x, m, k, ldx, codes, scales, gather, stream);
  else if (fmt.type == dtypes::e5m2)
    launch_vector<X, dtypes::e5m2.id()>(fmt, x, m, k, ldx, codes, scales, gather, stream);
  else
    launch_vector<X, dtypes::i8.id()>(fmt, x, m, k, ldx, codes, scales, gather, stream);
}

// Whether the vector kernels take this call: a code type they encode, rows of whole 16-byte units
// (k a multiple of 8, aligned start and stride), and for groups a size of 8 to 256 inputs that
// is a power of two.
bool vector_path(const ActFormat &fmt, DType x_type, const void *x, int64_t k, int64_t ldx) {
  const bool type = fmt.type == dtypes::e4m3 || fmt.type == dtypes::e5m2 || fmt.type == dtypes::i8;
  const int64_t bytes = x_type.storage_bytes();
  const bool rows = k % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && (ldx * bytes) % 16 == 0;
  const int64_t g = fmt.group_k;
  const bool groups = fmt.granularity == ActScale::kToken || (g >= 8 && g <= 256 && (g & (g - 1)) == 0);
  return type && rows && groups;
}

// quantize_act_cuda and moe_permute_quantize_cuda: m rows of k inputs, read through `gather`.
Status quantize_rows(const ActFormat &fmt, DType x_type, const void *x, int64_t m, int64_t k, int64_t ldx, void *codes,
                     float *scales, const RowGather &gather, void *stream) {
  if (fmt.granularity == ActScale::kNone)
    return Status::Error("activation format " + to_string(fmt) +
                         " is not quantized; quantize_act takes e4m3, e5m2 or i8 with -pt or -g{K}");
  if (!(x_type == dtypes::f32 || x_type == dtypes::f16 || x_type == dtypes::bf16))
    return Status::Error("activations to quantize must be f32, f16 or bf16, not " + to_string(x_type));
  if (m < 0 || k <= 0 || ldx < k) return Status::Error("activation extents must be m >= 0, k > 0 and ldx >= k");
  if (m > 0x7FFFFFFF)
    return Status::Error("quantize_act takes at most 2^31 - 1 rows at once, got " + std::to_string(m));
  if (m == 0) return Status::Ok();
  auto *out = static_cast<uint8_t *>(codes);
  const auto s = static_cast<cudaStream_t>(stream);
  if (vector_path(fmt, x_type, x, k, ldx)) {
    if (x_type == dtypes::f32)
      launch_vector_for_act<float>(fmt, x, m, k, ldx, out, scales, gather, s);
    else if (x_type == dtypes::f16)
      launch_vector_for_act<__half>(fmt, x, m, k, ldx, out, scales, gather, s);
    else
      launch_vector_for_act<__nv_bfloat16>(fmt, x, m, k, ldx, out, scales, gather, s);
  } else {
    const int64_t group = act_group_extent(fmt, k);
    const int64_t cols = (k + group - 1) / group;
    if (cols > 0x7FFFFFFF)
      return Status::Error("quantize_act takes at most 2^31 - 1 groups per row, got " + std::to_string(cols));
    const dim3 grid(static_cast<unsigned>(cols), static_cast<unsigned>(m < kMaxRowsPerLaunch ? m : kMaxRowsPerLaunch));
    launch_chained(quantize_act_scalar, grid, dim3(kScalarThreads), 0, s, fmt, x_type, x, m, k, ldx, group, cols, out,
                   scales, gather);
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return Status::Error(std::string("quantize_act kernel failed to launch: ") + cudaGetErrorString(e));
  return Status::Ok();
}

} // namespace

Status quantize_act_cuda(const ActFormat &fmt, DType x_type, const void *x, int64_t m, int64_t k, int64_t ldx,
                         void *codes, float *scales, void *stream) {
  return quantize_rows(fmt, x_type, x, m, k, ldx, codes, scales, RowGather{nullptr, 0, 1}, stream);
}

Status moe_permute_quantize_cuda(const ActFormat &fmt, DType x_type, const void *x, int64_t k, int64_t ldx,
                                 const int32_t *sorted_ids, int64_t capacity, int64_t assignments, int32_t top_k,
                                 void *codes, float *scales, void *stream) {
  if (top_k < 1) return Status::Error("top_k must be positive, got " + std::to_string(top_k));
  return quantize_rows(fmt, x_type, x, capacity, k, ldx, codes, scales, RowGather{sorted_ids, assignments, top_k},
                       stream);
}

} // namespace humming
