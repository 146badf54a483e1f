// PTX wrappers of the sm90 backend: mbarriers, bulk copies (TMA) into shared memory, WGMMA with
// the A operand in registers and B from shared memory through a matrix descriptor, and register
// reallocation between warpgroups. Each wraps one instruction (sm_90a), so the kernel templates
// read as data movement. Barrier and copy instructions are volatile and ordered; the WGMMA ones
// are volatile too, since their effects on the accumulators are asynchronous and only the
// fence / commit / wait instructions make them visible.
#pragma once

#include <cstdint>

namespace humming {
namespace sm90 {

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarriers -------------------------------------------------------------------------------

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}

// Makes the initialized barriers visible to the copy engine (the async proxy) and the other
// threads; followed by a block barrier.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival that also announces `bytes` of copies completing on this barrier's current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Waits until the phase of parity `parity` has completed. A fresh barrier is in phase 0, so
// waiting for parity 1 returns at once (the phase before it counts as complete): a producer's
// first pass over an empty ring does not block.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile("{\n.reg .pred done;\n"
               "WAIT_%=:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
               "r"(parity)
               : "memory");
}

// Orders this thread's generic-proxy writes to shared memory before later async-proxy reads of it
// (the WGMMAs' descriptors): a thread that stored operands runs it before it arrives on the barrier
// the WGMMAs' warpgroups wait on.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- small asynchronous copies ---------------------------------------------------------------

// Four bytes from global memory into shared memory without waiting for them (cp.async): zeros
// instead where `valid` is false (`src` is not read then, but must still be a global address).
__device__ __forceinline__ void cp_async4(uint32_t dst, const void *src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0) : "memory");
}

// One arrival on `bar` once every cp.async this thread issued before has landed (its stores are
// then visible to the threads that wait on the barrier). The barrier's expected count includes
// it (.noinc).
__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// ---- bulk copies (TMA) -----------------------------------------------------------------------

// `bytes` contiguous bytes (a multiple of 16, both addresses 16-byte aligned) from global memory
// into shared memory, counted on barrier `bar` when they land.
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// The box of a 2-D tensor map at element coordinates (c0 innermost, c1), counted on `bar`.
// Elements outside the tensor land as zeros (and count as bytes all the same).
__device__ __forceinline__ void tensor_copy_2d(uint32_t dst, const void *map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// The shared-memory box at `src` into a 2-D tensor map at element coordinates (c0 innermost, c1),
// in this thread's current bulk group (elements outside the tensor are not written). The
// generic-proxy writes of the box must be fenced for the async proxy first.
__device__ __forceinline__ void tensor_store_2d(const void *map, int c0, int c1, uint32_t src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(map), "r"(c0),
               "r"(c1), "r"(src)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's bulk groups still read their shared memory (Read) or
// still run at all.
template <int N, bool Read> __device__ __forceinline__ void bulk_wait() {
  if constexpr (Read)
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
  else
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8 x 8 matrices of 16-bit elements from registers into shared memory, transposed: register q
// of lane l holds row l / 4, columns 2 (l % 4) and + 1 of matrix q (a WGMMA sums fragment), and
// lane 8q + r gives the address of matrix q's row r in memory, which receives its column r.
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// The same, not transposed: lane 8q + r gives the address of matrix q's row r, which receives row r.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// Named barrier `id` of `threads` threads (a multiple of 32).
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void prefetch_tensor_map(const void *map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

// ---- registers -------------------------------------------------------------------------------

// Gives registers back (producer warpgroups) or takes them (consumer warpgroups): every thread of
// the warpgroup executes it, with a count that is a multiple of 8 in [24, 256].
template <int N> __device__ __forceinline__ void regs_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void regs_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// ---- WGMMA -----------------------------------------------------------------------------------

// Shared-memory matrix descriptor of a K-major tile in the 128-byte swizzle: rows of 128 bytes
// (64 16-bit elements of K), 8-row groups 1024 bytes apart (the stride byte offset). The tile
// starts 1024-byte aligned; stepping K by 16 elements inside the 128-byte row adds 32 bytes to the
// start address (the swizzle is applied to the address bits the hardware computes, so the
// descriptor of the k-th step is the base descriptor plus 2 * k in its address field).
__device__ __forceinline__ uint64_t desc_sw128(uint32_t smem) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((smem & 0x3FFFF) >> 4); // start address, 16-byte units
  d |= static_cast<uint64_t>(1) << 16;               // leading byte offset (unused when swizzled)
  d |= static_cast<uint64_t>(1024 >> 4) << 32;       // stride byte offset: 8 rows of 128 bytes
  d |= static_cast<uint64_t>(1) << 62;               // layout: 128-byte swizzle
  return d;
}

// What adding `bytes` (a multiple of 16) to a descriptor's start address adds to the descriptor,
// where the address stays inside the block's shared memory (below 2^18, as every shared address
// of a block is, so the field's mask and shift commute with the add): desc_sw128(a + bytes) ==
// desc_sw128(a) + desc_bytes(bytes). Why: a ring stage's descriptor written as the stage-0
// descriptor (the same at every stage, which the compiler computes once) plus the stage's offset
// takes one add a stage, where desc_sw128(ring + stage offset) made ptxas rebuild the ring's
// address and mask it again before every stage's first WGMMA (ncu, session 42). Measured on an
// H100 (session 43, scripts/gpu_s43.sh PART=desc at 7feffe5, GEMM alone, graph us, against the
// rebuild before and after): the FP8 block tile t192n128s4 0.96-0.99x the time on 7168 x 16384
// and 18432 x 7168 at m = 4096 / 8192 (7168 x 16384 at 8192: 1508 against 1559 / 1585), the other
// FP8 tiles and the weight-only t128 / t64 within the card's drift (0.99x in geometric mean over
// 20 points).
__device__ __forceinline__ uint64_t desc_bytes(uint32_t bytes) { return static_cast<uint64_t>(bytes >> 4); }

// Orders this thread's register writes (A fragments, accumulators) before the WGMMA that reads them.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed WGMMA groups of this warpgroup are still running.
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from moving accumulator reads or writes across a WGMMA fence or wait: the
// asm statements above do not name the accumulators, so they are tied here as in-out operands.
template <int N> __device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N> __device__ __forceinline__ void fence_regs(int32_t (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}
__device__ __forceinline__ void fence_regs(uint32_t (&r)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// The WGMMA instructions of the sm90 kernels, one wrapper per instruction N (inline assembly takes
// literal strings, so each N spells its operands): m64nN with N / 2 accumulators per thread, whose
// operand list (HUMMING_SM90_ACC_TEXT_<count>) and constraints (HUMMING_SM90_ACC_<count>(C), C
// "+f" for fp32 sums, "+r" for s32) are generated here once for every N.
//
// Wgmma<N, Bf16>: D (64 x N, fp32) = A (64 x 16, registers: the mma.sync m16n8k16 A fragment of
// each warp's 16 rows) x B (16 x N, K-major in shared memory, descriptor) + (accumulate ? D : 0);
// Bf16 picks bf16 operands, otherwise f16.
// WgmmaFp8<N, E5m2>: D (64 x N, fp32) += A (64 x 32) x B (32 x N), both 8-bit floats read from
// shared memory through descriptors (K-major, 128-byte swizzle: a 128-byte row holds 32 x 4 inputs,
// so the k-th 32-input step adds 2 * k to the descriptors' address fields, as for 16-bit k16
// steps); the weights (A) are e4m3, E5m2 picks e5m2 activations (B). FP8 WGMMA takes no transpose
// flags: both operands are K-major.
// Each also takes A from registers (the k32 fragment of 8-bit operands: four registers of four
// bytes, backend/sm90/operand_convert.h), with B by descriptor as before.
// WgmmaS8<N>: the same with signed 8-bit integers and s32 sums (no negation or transpose flags).
// `accumulate` 0 starts D afresh.
template <int N, bool Bf16> struct Wgmma;
template <int N, bool E5m2> struct WgmmaFp8;
template <int N> struct WgmmaS8;

#define HUMMING_SM90_ACC_TEXT_4 "{%0, %1, %2, %3}"
#define HUMMING_SM90_ACC_4(C) C(d[0]), C(d[1]), C(d[2]), C(d[3])
#define HUMMING_SM90_ACC_TEXT_8 "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define HUMMING_SM90_ACC_8(C) C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), C(d[7])
#define HUMMING_SM90_ACC_TEXT_16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define HUMMING_SM90_ACC_16(C)                                                                                         \
  C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), C(d[7]), C(d[8]), C(d[9]), C(d[10]), C(d[11]),        \
      C(d[12]), C(d[13]), C(d[14]), C(d[15])
#define HUMMING_SM90_ACC_TEXT_32                                                                                       \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "    \
  "%24, %25, %26, %27, %28, %29, %30, %31}"
#define HUMMING_SM90_ACC_32(C)                                                                                         \
  C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), C(d[7]), C(d[8]), C(d[9]), C(d[10]), C(d[11]),        \
      C(d[12]), C(d[13]), C(d[14]), C(d[15]), C(d[16]), C(d[17]), C(d[18]), C(d[19]), C(d[20]), C(d[21]), C(d[22]),    \
      C(d[23]), C(d[24]), C(d[25]), C(d[26]), C(d[27]), C(d[28]), C(d[29]), C(d[30]), C(d[31])
// 12, 24 and 40 sums: the grouped tiles of 24, 48 and 80 tokens, between the powers of two (an
// expert's rows spread about the square root of their mean around it, so the tile that holds
// nearly all of them is about the mean plus two of those, not the next power of two).
#define HUMMING_SM90_ACC_TEXT_12 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11}"
#define HUMMING_SM90_ACC_12(C)                                                                                         \
  C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), C(d[7]), C(d[8]), C(d[9]), C(d[10]), C(d[11])
#define HUMMING_SM90_ACC_TEXT_24                                                                                       \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23}"
#define HUMMING_SM90_ACC_24(C)                                                                                         \
  C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), C(d[7]), C(d[8]), C(d[9]), C(d[10]), C(d[11]),        \
      C(d[12]), C(d[13]), C(d[14]), C(d[15]), C(d[16]), C(d[17]), C(d[18]), C(d[19]), C(d[20]), C(d[21]), C(d[22]),    \
      C(d[23])
#define HUMMING_SM90_ACC_TEXT_40                                                                                       \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "    \
  "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39}"
#define HUMMING_SM90_ACC_40(C)                                                                                         \
  C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), C(d[7]), C(d[8]), C(d[9]), C(d[10]), C(d[11]),        \
      C(d[12]), C(d[13]), C(d[14]), C(d[15]), C(d[16]), C(d[17]), C(d[18]), C(d[19]), C(d[20]), C(d[21]), C(d[22]),    \
      C(d[23]), C(d[24]), C(d[25]), C(d[26]), C(d[27]), C(d[28]), C(d[29]), C(d[30]), C(d[31]), C(d[32]), C(d[33]),    \
      C(d[34]), C(d[35]), C(d[36]), C(d[37]), C(d[38]), C(d[39])
#define HUMMING_SM90_ACC_TEXT_64                                                                                       \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "    \
  "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "     \
  "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define HUMMING_SM90_ACC_64(C)                                                                                         \
  C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), C(d[7]), C(d[8]), C(d[9]), C(d[10]), C(d[11]),        \
      C(d[12]), C(d[13]), C(d[14]), C(d[15]), C(d[16]), C(d[17]), C(d[18]), C(d[19]), C(d[20]), C(d[21]), C(d[22]),    \
      C(d[23]), C(d[24]), C(d[25]), C(d[26]), C(d[27]), C(d[28]), C(d[29]), C(d[30]), C(d[31]), C(d[32]), C(d[33]),    \
      C(d[34]), C(d[35]), C(d[36]), C(d[37]), C(d[38]), C(d[39]), C(d[40]), C(d[41]), C(d[42]), C(d[43]), C(d[44]),    \
      C(d[45]), C(d[46]), C(d[47]), C(d[48]), C(d[49]), C(d[50]), C(d[51]), C(d[52]), C(d[53]), C(d[54]), C(d[55]),    \
      C(d[56]), C(d[57]), C(d[58]), C(d[59]), C(d[60]), C(d[61]), C(d[62]), C(d[63])
// 80 and 96 sums: the lists of 64 (and 80) and the rest.
#define HUMMING_SM90_ACC_TEXT_72                                                                                       \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "    \
  "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "     \
  "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, "     \
  "%68, %69, %70, %71}"
#define HUMMING_SM90_ACC_72(C)                                                                                         \
  HUMMING_SM90_ACC_64(C), C(d[64]), C(d[65]), C(d[66]), C(d[67]), C(d[68]), C(d[69]), C(d[70]), C(d[71])
#define HUMMING_SM90_ACC_TEXT_80                                                                                       \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "    \
  "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "     \
  "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, "     \
  "%68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79}"
#define HUMMING_SM90_ACC_80(C)                                                                                         \
  HUMMING_SM90_ACC_64(C), C(d[64]), C(d[65]), C(d[66]), C(d[67]), C(d[68]), C(d[69]), C(d[70]), C(d[71]), C(d[72]),    \
      C(d[73]), C(d[74]), C(d[75]), C(d[76]), C(d[77]), C(d[78]), C(d[79])
#define HUMMING_SM90_ACC_TEXT_88                                                                                       \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "    \
  "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "     \
  "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, "     \
  "%68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87}"
#define HUMMING_SM90_ACC_88(C)                                                                                         \
  HUMMING_SM90_ACC_80(C), C(d[80]), C(d[81]), C(d[82]), C(d[83]), C(d[84]), C(d[85]), C(d[86]), C(d[87])
#define HUMMING_SM90_ACC_TEXT_96                                                                                       \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "    \
  "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "     \
  "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, "     \
  "%68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, "     \
  "%90, %91, %92, %93, %94, %95}"
#define HUMMING_SM90_ACC_96(C)                                                                                         \
  HUMMING_SM90_ACC_80(C), C(d[80]), C(d[81]), C(d[82]), C(d[83]), C(d[84]), C(d[85]), C(d[86]), C(d[87]), C(d[88]),    \
      C(d[89]), C(d[90]), C(d[91]), C(d[92]), C(d[93]), C(d[94]), C(d[95])
#define HUMMING_SM90_ACC_TEXT_128                                                                                      \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "    \
  "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "     \
  "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, "     \
  "%68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, "     \
  "%90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, "     \
  "%110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define HUMMING_SM90_ACC_128(C)                                                                                        \
  C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), C(d[7]), C(d[8]), C(d[9]), C(d[10]), C(d[11]),        \
      C(d[12]), C(d[13]), C(d[14]), C(d[15]), C(d[16]), C(d[17]), C(d[18]), C(d[19]), C(d[20]), C(d[21]), C(d[22]),    \
      C(d[23]), C(d[24]), C(d[25]), C(d[26]), C(d[27]), C(d[28]), C(d[29]), C(d[30]), C(d[31]), C(d[32]), C(d[33]),    \
      C(d[34]), C(d[35]), C(d[36]), C(d[37]), C(d[38]), C(d[39]), C(d[40]), C(d[41]), C(d[42]), C(d[43]), C(d[44]),    \
      C(d[45]), C(d[46]), C(d[47]), C(d[48]), C(d[49]), C(d[50]), C(d[51]), C(d[52]), C(d[53]), C(d[54]), C(d[55]),    \
      C(d[56]), C(d[57]), C(d[58]), C(d[59]), C(d[60]), C(d[61]), C(d[62]), C(d[63]), C(d[64]), C(d[65]), C(d[66]),    \
      C(d[67]), C(d[68]), C(d[69]), C(d[70]), C(d[71]), C(d[72]), C(d[73]), C(d[74]), C(d[75]), C(d[76]), C(d[77]),    \
      C(d[78]), C(d[79]), C(d[80]), C(d[81]), C(d[82]), C(d[83]), C(d[84]), C(d[85]), C(d[86]), C(d[87]), C(d[88]),    \
      C(d[89]), C(d[90]), C(d[91]), C(d[92]), C(d[93]), C(d[94]), C(d[95]), C(d[96]), C(d[97]), C(d[98]), C(d[99]),    \
      C(d[100]), C(d[101]), C(d[102]), C(d[103]), C(d[104]), C(d[105]), C(d[106]), C(d[107]), C(d[108]), C(d[109]),    \
      C(d[110]), C(d[111]), C(d[112]), C(d[113]), C(d[114]), C(d[115]), C(d[116]), C(d[117]), C(d[118]), C(d[119]),    \
      C(d[120]), C(d[121]), C(d[122]), C(d[123]), C(d[124]), C(d[125]), C(d[126]), C(d[127])

// X0..X5: the operand numbers after the accumulators (count, count + 1, ...).
#define HUMMING_SM90_WGMMA_RS_ASM(N, ACC, X0, X1, X2, X3, X4, X5, T)                                                   \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #X5 ", 0;\n"                                                       \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." T "." T " " HUMMING_SM90_ACC_TEXT_##ACC               \
               ", {%" #X0 ", %" #X1 ", %" #X2 ", %" #X3 "}, %" #X4 ", p, 1, 1, 0;\n}\n"                                \
               : HUMMING_SM90_ACC_##ACC("+f")                                                                          \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate))
#define HUMMING_SM90_WGMMA_SS_ASM(N, ACC, X0, X1, X2, TYPES, FLAGS, REG)                                               \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #X2 ", 0;\n"                                                       \
               "wgmma.mma_async.sync.aligned.m64n" #N "k32." TYPES " " HUMMING_SM90_ACC_TEXT_##ACC                     \
               ", %" #X0 ", %" #X1 ", p" FLAGS ";\n}\n"                                                                \
               : HUMMING_SM90_ACC_##ACC(REG)                                                                           \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))
// The same with 8-bit operands (k32): A from registers (four of four bytes), B by descriptor.
#define HUMMING_SM90_WGMMA_RS8_ASM(N, ACC, X0, X1, X2, X3, X4, X5, TYPES, FLAGS, REG)                                  \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #X5 ", 0;\n"                                                       \
               "wgmma.mma_async.sync.aligned.m64n" #N "k32." TYPES " " HUMMING_SM90_ACC_TEXT_##ACC                     \
               ", {%" #X0 ", %" #X1 ", %" #X2 ", %" #X3 "}, %" #X4 ", p" FLAGS ";\n}\n"                                \
               : HUMMING_SM90_ACC_##ACC(REG)                                                                           \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate))
#define HUMMING_SM90_WGMMA(N, ACC, X0, X1, X2, X3, X4, X5)                                                             \
  template <bool Bf16> struct Wgmma<N, Bf16> {                                                                         \
    static __device__ __forceinline__ void run(float (&d)[ACC], const uint32_t (&a)[4], uint64_t desc,                 \
                                               int accumulate) {                                                       \
      if constexpr (Bf16)                                                                                              \
        HUMMING_SM90_WGMMA_RS_ASM(N, ACC, X0, X1, X2, X3, X4, X5, "bf16");                                             \
      else                                                                                                             \
        HUMMING_SM90_WGMMA_RS_ASM(N, ACC, X0, X1, X2, X3, X4, X5, "f16");                                              \
    }                                                                                                                  \
  };                                                                                                                   \
  template <bool E5m2> struct WgmmaFp8<N, E5m2> {                                                                      \
    static __device__ __forceinline__ void run(float (&d)[ACC], uint64_t desc_a, uint64_t desc_b, int accumulate) {    \
      if constexpr (E5m2)                                                                                              \
        HUMMING_SM90_WGMMA_SS_ASM(N, ACC, X0, X1, X2, "f32.e4m3.e5m2", ", 1, 1", "+f");                                \
      else                                                                                                             \
        HUMMING_SM90_WGMMA_SS_ASM(N, ACC, X0, X1, X2, "f32.e4m3.e4m3", ", 1, 1", "+f");                                \
    }                                                                                                                  \
    static __device__ __forceinline__ void run(float (&d)[ACC], const uint32_t (&a)[4], uint64_t desc_b,               \
                                               int accumulate) {                                                       \
      if constexpr (E5m2)                                                                                              \
        HUMMING_SM90_WGMMA_RS8_ASM(N, ACC, X0, X1, X2, X3, X4, X5, "f32.e4m3.e5m2", ", 1, 1", "+f");                   \
      else                                                                                                             \
        HUMMING_SM90_WGMMA_RS8_ASM(N, ACC, X0, X1, X2, X3, X4, X5, "f32.e4m3.e4m3", ", 1, 1", "+f");                   \
    }                                                                                                                  \
  };                                                                                                                   \
  template <> struct WgmmaS8<N> {                                                                                      \
    static __device__ __forceinline__ void run(int32_t (&d)[ACC], uint64_t desc_a, uint64_t desc_b, int accumulate) {  \
      HUMMING_SM90_WGMMA_SS_ASM(N, ACC, X0, X1, X2, "s32.s8.s8", "", "+r");                                            \
    }                                                                                                                  \
    static __device__ __forceinline__ void run(int32_t (&d)[ACC], const uint32_t (&a)[4], uint64_t desc_b,             \
                                               int accumulate) {                                                       \
      HUMMING_SM90_WGMMA_RS8_ASM(N, ACC, X0, X1, X2, X3, X4, X5, "s32.s8.s8", "", "+r");                               \
    }                                                                                                                  \
  };
HUMMING_SM90_WGMMA(8, 4, 4, 5, 6, 7, 8, 9)
HUMMING_SM90_WGMMA(16, 8, 8, 9, 10, 11, 12, 13)
HUMMING_SM90_WGMMA(24, 12, 12, 13, 14, 15, 16, 17)
HUMMING_SM90_WGMMA(32, 16, 16, 17, 18, 19, 20, 21)
HUMMING_SM90_WGMMA(48, 24, 24, 25, 26, 27, 28, 29)
HUMMING_SM90_WGMMA(64, 32, 32, 33, 34, 35, 36, 37)
HUMMING_SM90_WGMMA(80, 40, 40, 41, 42, 43, 44, 45)
HUMMING_SM90_WGMMA(128, 64, 64, 65, 66, 67, 68, 69)
HUMMING_SM90_WGMMA(144, 72, 72, 73, 74, 75, 76, 77)
HUMMING_SM90_WGMMA(160, 80, 80, 81, 82, 83, 84, 85)
HUMMING_SM90_WGMMA(176, 88, 88, 89, 90, 91, 92, 93)
HUMMING_SM90_WGMMA(192, 96, 96, 97, 98, 99, 100, 101)
HUMMING_SM90_WGMMA(256, 128, 128, 129, 130, 131, 132, 133)
#undef HUMMING_SM90_WGMMA
#undef HUMMING_SM90_WGMMA_SS_ASM
#undef HUMMING_SM90_WGMMA_RS_ASM
#undef HUMMING_SM90_WGMMA_RS8_ASM
#undef HUMMING_SM90_ACC_TEXT_4
#undef HUMMING_SM90_ACC_4
#undef HUMMING_SM90_ACC_TEXT_8
#undef HUMMING_SM90_ACC_8
#undef HUMMING_SM90_ACC_TEXT_12
#undef HUMMING_SM90_ACC_12
#undef HUMMING_SM90_ACC_TEXT_16
#undef HUMMING_SM90_ACC_16
#undef HUMMING_SM90_ACC_TEXT_24
#undef HUMMING_SM90_ACC_24
#undef HUMMING_SM90_ACC_TEXT_32
#undef HUMMING_SM90_ACC_32
#undef HUMMING_SM90_ACC_TEXT_40
#undef HUMMING_SM90_ACC_40
#undef HUMMING_SM90_ACC_TEXT_64
#undef HUMMING_SM90_ACC_64
#undef HUMMING_SM90_ACC_TEXT_72
#undef HUMMING_SM90_ACC_72
#undef HUMMING_SM90_ACC_TEXT_80
#undef HUMMING_SM90_ACC_80
#undef HUMMING_SM90_ACC_TEXT_88
#undef HUMMING_SM90_ACC_88
#undef HUMMING_SM90_ACC_TEXT_96
#undef HUMMING_SM90_ACC_96
#undef HUMMING_SM90_ACC_TEXT_128
#undef HUMMING_SM90_ACC_128

} // namespace sm90
} // namespace humming
