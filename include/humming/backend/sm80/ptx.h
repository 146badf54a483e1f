// PTX wrappers of the sm80 backend: cp.async global->shared copies, ldmatrix, mma.sync m16n8k16,
// and mma.sync m16n8k32 on 8-bit operands (integers from sm_80, FP8 from sm_89).
// Each wraps one instruction (sm_80 and newer), so the kernel templates read as data movement.
// Register-only instructions (mma, lop3) are not volatile, so the compiler may schedule, hoist and
// drop them like arithmetic; anything touching shared memory stays volatile and ordered.
#pragma once

#include <cstdint>

namespace humming {
namespace sm80 {

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte copy that lands in shared memory asynchronously; with `pred` false it writes zeros and
// reads nothing (the source may then be any valid address). Prefetch: 0, or 64 / 128 / 256 to let
// L2 fetch that many bytes around the copy from DRAM at once (for streams read front to back,
// fewer and larger DRAM requests for the same outstanding copies).
// `smem` is a shared-window address (smem_addr): kernels convert their buffer once, not per copy.
template <int Prefetch = 0> __device__ __forceinline__ void cp_async16(uint32_t smem, const void *gmem, bool pred) {
  const int src_bytes = pred ? 16 : 0;
  if constexpr (Prefetch == 256)
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(src_bytes));
  else if constexpr (Prefetch == 128)
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(src_bytes));
  else if constexpr (Prefetch == 64)
    asm volatile("cp.async.cg.shared.global.L2::64B [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(src_bytes));
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(src_bytes));
}
// The same copy when the source is known to be in bounds (no source-size operand).
template <int Prefetch = 0> __device__ __forceinline__ void cp_async16_full(uint32_t smem, const void *gmem) {
  if constexpr (Prefetch == 256)
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem));
  else if constexpr (Prefetch == 128)
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem));
  else if constexpr (Prefetch == 64)
    asm volatile("cp.async.cg.shared.global.L2::64B [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem));
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem));
}
template <int Prefetch = 0> __device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool pred) {
  cp_async16<Prefetch>(smem_addr(smem), gmem, pred);
}

// 4-byte copy into shared memory (cp.async.ca: 4 and 8 bytes go through L1), zeros where `pred`
// is false (nothing read then). For scattered scalars, such as a column of activation scales.
__device__ __forceinline__ void cp_async4(uint32_t smem, const void *gmem, bool pred) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem), "l"(gmem), "r"(pred ? 4 : 0));
}

// The same for 8 bytes, such as eight 1-byte scales of a row whose length is a multiple of 8.
__device__ __forceinline__ void cp_async8(uint32_t smem, const void *gmem, bool pred) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem), "l"(gmem), "r"(pred ? 8 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most N committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Four 8x8 matrices of 16-bit elements: lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void *smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}

// Two 8x8 matrices of 16-bit elements: lanes 8i..8i+7 give the row addresses of matrix i (lanes
// 16..31 give none that is read, but must be valid shared addresses all the same).
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void *smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(smem)));
}

// D = A * B + D, m16n8k16, fp32 accumulation. IsBf16 selects bf16 operands, otherwise f16.
template <bool IsBf16>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (IsBf16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// D = A * B + C with C in registers of its own (D and C may differ: a fresh sum starts from C).
template <bool IsBf16>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                          const float (&c)[4]) {
  if constexpr (IsBf16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
  }
}

// D = A * B + C, m16n8k32, FP8 operands (AId, BId: the DType ids of e4m3 or e5m2, each operand its
// own), fp32 sums; sm_89 and newer. The tensor cores keep the running sum in fewer bits than fp32
// (a 13-bit mantissa on sm_89 and sm_90), so callers sum a bounded number of steps from C = 0 and
// add the result into fp32 themselves.
#define HUMMING_SM80_MMA_16832_F8(TYPES)                                                                               \
  asm("mma.sync.aligned.m16n8k32.row.col.f32." TYPES ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "             \
      "{%10, %11, %12, %13};\n"                                                                                        \
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                                                 \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]))
template <bool AE5M2, bool BE5M2>
__device__ __forceinline__ void mma_16832_f8(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                             const float (&c)[4]) {
  if constexpr (!AE5M2 && !BE5M2)
    HUMMING_SM80_MMA_16832_F8("e4m3.e4m3");
  else if constexpr (!AE5M2 && BE5M2)
    HUMMING_SM80_MMA_16832_F8("e4m3.e5m2");
  else if constexpr (AE5M2 && !BE5M2)
    HUMMING_SM80_MMA_16832_F8("e5m2.e4m3");
  else
    HUMMING_SM80_MMA_16832_F8("e5m2.e5m2");
}
#undef HUMMING_SM80_MMA_16832_F8

// D = A * B + D, m16n8k32, signed 8-bit integer operands, exact s32 sums (sm_80 and newer).
__device__ __forceinline__ void mma_16832_s8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// (a & b) | c in one LOP3.
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

} // namespace sm80
} // namespace humming
