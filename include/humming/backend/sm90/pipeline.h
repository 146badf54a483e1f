// The warp-specialized block structure both sm90 kernels share: a ring of `Stages` shared-memory
// stages with a "full" and an "empty" mbarrier each, one producer warpgroup that gives most of its
// registers to the consumer warpgroups, and the consumers' own named barrier.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "humming/backend/pdl.h"
#include "humming/backend/sm90/probe.h"
#include "humming/backend/sm90/ptx.h"
#include "humming/backend/sm90/tensor_map.h"
#include "humming/humming.h"
#include "humming/scheduler/moe.h"
#include "humming/scheduler/raster.h"
#include "humming/scheduler/streamk.h"

namespace humming {
namespace sm90 {

// The scheduler kinds of the sm90 kernels (their Sched template argument; tools/gen_instances.py
// writes them): dense; grouped with the producer's warp walking the experts' tiles; grouped with
// one producer thread walking them (instances ending _lone; the dispatcher picks the walk per call,
// humming.h grouped_walk_alone); grouped with the warp's walk and each tile's K split into shares
// where the tiles alone leave multiprocessors idle (instances ending _ks; scheduler/moe.h
// grouped_k_shares; the dispatcher takes them where humming.h grouped_split_k asks). The 8-bit
// activation kernel has the first two.
constexpr int kSchedDense = 0, kSchedGroupedWarp = 1, kSchedGroupedLone = 2, kSchedGroupedSplit = 3;

// A stage of the ring and the parity of its current fill (flips each time the ring wraps).
// Stages: depth of the ring.
template <int Stages> struct RingPos {
  uint32_t stage = 0, phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == Stages) stage = 0, phase ^= 1u;
  }
};

// Registers per thread after the producer gives most of its own back (multiples of 8). A block
// starts with the cap __launch_bounds__ gives every thread (65536 / threads, in steps of 8), and
// setmaxnreg.inc waits until the block's own pool has the registers, so the consumers may take only
// what the producer returns: asking for more hangs the block (seen with four consumers at 112
// against a start of 96).
// Consumers: consumer warpgroups of the block (one producer warpgroup besides).
// Producer:  registers each producer thread keeps (40 for a copy loop; more where a producer warp
//            also computes, as the FP8 kernels' scale warp).
template <int Consumers, int Producer = 40> struct RegSplit {
  static constexpr int kThreads = 128 * (1 + Consumers);
  static constexpr int kProducer = Producer;
  static constexpr int kStart = 65536 / kThreads / 8 * 8;
  static constexpr int kFit = (kStart * kThreads - kProducer * 128) / (128 * Consumers) / 8 * 8;
  static constexpr int kConsumer = kFit < 240 ? kFit : 240;
  static_assert(kConsumer >= kStart, "the consumers never give registers back");
};

// Barrier `stage` of the ring's "full" (i = 0), "empty" (i = 1) or "converted" (i = 2: kernels
// whose producer warpgroup converts each stage's codes in place before the consumers read them)
// set, from the first barrier.
template <int Stages> __device__ __forceinline__ uint32_t ring_bar(uint32_t bars, int i, uint32_t stage) {
  return bars + 8 * (i * Stages + stage);
}

// Bytes of the ring's barriers: the full and empty sets, and the converted one where the producer
// converts (ConvertArrivals > 0).
template <int Stages, int ConvertArrivals = 0> __host__ __device__ constexpr int ring_barrier_bytes() {
  return 8 * Stages * (ConvertArrivals > 0 ? 3 : 2);
}

// A segment of a block's work (a tile, or a K share of one) as the producer hands it to the
// consumers: one note per ring stage, written by the producer's issuing thread before the
// segment's first stage arrives on "full" (the arrival releases it), read by the consumers once
// they have waited for that stage. expert < 0 marks the end of the block's work (that stage holds
// no copies). Why: in the grouped kernels the tile order follows the experts' rows in global
// memory, and consumers that walked it themselves put an L2 round trip and the walk's shuffles
// between every two tiles, while the producer, which walks it anyway, runs stages ahead of them.
// Rows and channels fit 32 bits (the kernels take fewer than 2^31 rows); `unit` is the segment's
// index for a fix-up (-1: a whole tile).
struct SegmentNote {
  int32_t m0, m_end, n0, expert, kt0, kt1;
  int64_t unit;

  static __device__ __forceinline__ SegmentNote of(int64_t m0, int64_t m_end, int64_t n0, int expert, int64_t kt0,
                                                   int64_t kt1, int64_t unit) {
    return {static_cast<int32_t>(m0),
            static_cast<int32_t>(m_end),
            static_cast<int32_t>(n0),
            expert,
            static_cast<int32_t>(kt0),
            static_cast<int32_t>(kt1),
            unit};
  }
};

// The notes of a ring (Stages of them) after its barriers and the fix-up flag (run_block's layout
// of RingBytes, barriers, flag), from the ring's generic address (const for the readers).
template <int Stages, int RingBytes, class Char> __device__ __forceinline__ auto ring_notes(Char *ring_ptr) {
  using Note = std::conditional_t<std::is_const_v<Char>, const SegmentNote, SegmentNote>;
  return reinterpret_cast<Note *>(ring_ptr + RingBytes + ring_barrier_bytes<Stages>() + 16);
}

// The producer's issuing thread: the stages of one segment, K tiles [kt0, kt1), from ring position
// `pos` (left past them), each once the consumers have given it back: in grouped kernels (Notes)
// the segment's note, note(), in its first stage (SegmentNote); then `bytes` expected on the
// stage's full barrier and fill(stage, full, kt), the stage's copies (stage: its shared address).
template <int Stages, int StageBytes, bool Notes, class Note, class Fill>
__device__ __forceinline__ void fill_segment(uint32_t ring, uint32_t bars, RingPos<Stages> &pos, int64_t kt0,
                                             int64_t kt1, uint32_t bytes, SegmentNote *notes, Note note, Fill fill) {
  for (int64_t kt = kt0; kt < kt1; ++kt, pos.advance()) {
    const uint32_t stage = ring + pos.stage * StageBytes, full = ring_bar<Stages>(bars, 0, pos.stage),
                   empty = ring_bar<Stages>(bars, 1, pos.stage);
    const uint32_t parity = pos.phase ^ 1u;
    Probe::ring([=] { mbar_wait(empty, parity); });
    if constexpr (Notes)
      if (kt == kt0) notes[pos.stage] = note();
    mbar_arrive_expect_tx(full, bytes);
    fill(stage, full, kt);
  }
}

// Where GemmArgs::early_weights lets a kernel copy weights before it waits for the launch before
// (run_block's head_start, on thread 0 before the wait): the first `ahead` stages of the block's
// first segment, K tiles [kt0, kt0 + ahead) (ahead <= Stages) into the fresh ring from its first
// stage, each stage's `bytes` expected on its full barrier and weights(stage, full, kt) copied.
// The barriers cannot complete a phase before fill_rest_early has copied the rest, whose bytes
// they expect.
template <int Stages, int StageBytes, class Weights>
__device__ __forceinline__ void fill_weights_early(uint32_t ring, uint32_t bars, int64_t kt0, int ahead, uint32_t bytes,
                                                   Weights weights) {
#pragma unroll 1
  for (int s = 0; s < ahead; ++s) {
    const uint32_t full = ring_bar<Stages>(bars, 0, s);
    mbar_arrive_expect_tx(full, bytes);
    weights(ring + s * StageBytes, full, kt0 + s);
  }
}

// The producer's issuing thread, after the wait: the rest of those stages' copies,
// rest(stage, full, kt) for each; leaves `pos` past them.
template <int Stages, int StageBytes, class Rest>
__device__ __forceinline__ void fill_rest_early(uint32_t ring, uint32_t bars, RingPos<Stages> &pos, int64_t kt0,
                                                int ahead, Rest rest) {
#pragma unroll 1
  for (int s = 0; s < ahead; ++s, pos.advance()) rest(ring + s * StageBytes, ring_bar<Stages>(bars, 0, s), kt0 + s);
}

// A dense launch's work of this block, in order: f(m0, m_end, n0, expert, kt0, kt1, tile) per
// segment of the stream-K plan (scheduler/streamk.h, for_each_segment), K tiles [kt0, kt1) of the
// BM x BN tile in grouped order (scheduler/raster.h; row-major where the plan walks its rows in
// step, StreamKPlan::step_rows) from row m0 and channel n0 (m_end -1: up to m;
// expert 0; tile: the segment's tile index in the plan, for the fix-up). Params: a kernel's, with
// `plan`, `n_tiles` and `args`.
template <int BM, int BN, class Params, class F>
__device__ __forceinline__ void for_each_dense_segment(const Params &p, F f) {
  for_each_segment(p.plan, blockIdx.x, [&](int64_t tile, int64_t kt0, int64_t kt1) {
    const TileCoord c = p.plan.step_rows != 0 ? row_major_tile(tile, p.n_tiles)
                                              : grouped_tile(tile, (p.args.m + BM - 1) / BM, p.n_tiles);
    f(c.row * BM, int64_t{-1}, c.col * BN, 0, kt0, kt1, tile);
  });
}

// The producer's issuing thread of a grouped kernel, after the last segment of its block: the note
// that ends the consumers' walk (expert < 0), in the next stage once the consumers have given it
// back; the stage arrives with no copies (a kernel whose full barriers count more producer
// arrivals makes those too).
template <int Stages, int RingBytes>
__device__ __forceinline__ void note_end(char *ring_ptr, uint32_t bars, const RingPos<Stages> &pos) {
  mbar_wait(ring_bar<Stages>(bars, 1, pos.stage), pos.phase ^ 1u);
  ring_notes<Stages, RingBytes>(ring_ptr)[pos.stage] = SegmentNote{0, 0, 0, -1, 0, 0, -1};
  mbar_arrive(ring_bar<Stages>(bars, 0, pos.stage));
}

// The consumers of a grouped kernel: f(note) for each segment the producer noted, in order, each
// once its first stage has arrived, until the end note. f walks the segment's stages from `pos`
// (the consumers' own ring position) and leaves it past them.
template <int Stages, int RingBytes, class F>
__device__ __forceinline__ void for_each_note(const char *ring_ptr, uint32_t bars, RingPos<Stages> &pos, F f) {
  const SegmentNote *notes = ring_notes<Stages, RingBytes>(ring_ptr);
  for (;;) {
    const uint32_t full = ring_bar<Stages>(bars, 0, pos.stage), parity = pos.phase;
    Probe::ring([=] { mbar_wait(full, parity); });
    const SegmentNote note = notes[pos.stage];
    if (note.expert < 0) return;
    f(note);
  }
}

// One thread: every stage's "full" barrier waits for `FullArrivals` producer arrivals (and the
// bytes of their copies), every "empty" one for one arrival per consumer thread, every "converted"
// one (where ConvertArrivals > 0) for ConvertArrivals arrivals of the converting threads.
template <int Stages, int Consumers, int FullArrivals = 1, int ConvertArrivals = 0>
__device__ __forceinline__ void init_ring(uint32_t bars) {
  for (int s = 0; s < Stages; ++s) {
    mbar_init(ring_bar<Stages>(bars, 0, s), FullArrivals);
    mbar_init(ring_bar<Stages>(bars, 1, s), 128 * Consumers);
    if constexpr (ConvertArrivals > 0) mbar_init(ring_bar<Stages>(bars, 2, s), ConvertArrivals);
  }
  mbar_init_fence();
}

// A consumer thread's arrival on the empty barrier of `stage`, after its own shared loads and
// WGMMA reads of it are done. Every thread arrives (the release orders its own reads before the
// producer's next copy into the stage) rather than one lane per warp after __syncwarp: the two are
// equally correct under the PTX memory model, but compute-sanitizer's racecheck does not carry
// the other lanes' reads through __syncwarp and reported every ring that wraps as a hazard (H200,
// session 15: 96 hazards; session 16: none with every thread arriving). The extra arrivals cost
// nothing measurable (H200, u4g128 bf16, 5 layers x 6 values of M, graph us: within 0.7 us, none
// slower).
template <int Stages> __device__ __forceinline__ void release_stage(uint32_t bars, uint32_t stage) {
  mbar_arrive(ring_bar<Stages>(bars, 1, stage));
}

// A barrier of the consumer threads only (named barrier 1; the producer never joins it).
template <int ConsumerThreads> __device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(ConsumerThreads) : "memory");
}

// Raises a kernel's dynamic shared-memory limit; false where the device cannot give a block this
// much (the error is cleared).
inline bool allow_smem(const void *kernel, int bytes) {
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess) cudaGetLastError();
  return e == cudaSuccess;
}

// run_block's head_start where the kernel has none.
struct NoHeadStart {
  __device__ __forceinline__ void operator()(uint32_t, uint32_t) const {}
};

// A block's dynamic shared memory: the ring (1024-byte aligned, where the 128-byte swizzle
// repeats), then the full and empty barriers (and the converted ones), then the stream-K fix-up
// flag. The caller runs
// `prefetch` on thread 0 while it sets up the barriers, then the producer warpgroup gives registers
// back and each of its threads runs produce(t, ring, ring_ptr, bars) with t its index (the kernel
// picks which work); the consumers take the registers and run consume(ring, ring_ptr, bars, flag).
// Thread 0 also runs head_start(ring, bars) before the wait for the launch before: copies that
// may go first (fill_weights_early), or nothing.
// Stages: ring depth; Consumers: consumer warpgroups; RingBytes: bytes of the ring (with what the
// kernel keeps right after it, such as its output boxes);
// FullArrivals: producer arrivals each fill of a stage makes (init_ring); ProducerRegs: RegSplit's;
// ConvertArrivals: arrivals of the producer's converting threads per stage (0: none convert).
template <int Stages, int Consumers, int RingBytes, int FullArrivals, int ProducerRegs, int ConvertArrivals = 0,
          class Prefetch, class Produce, class Consume, class HeadStart = NoHeadStart>
__device__ __forceinline__ void run_block(char *smem, Prefetch prefetch, Produce produce, Consume consume,
                                          HeadStart head_start = {}) {
  const uint32_t raw = smem_addr(smem);
  uint32_t ring = (raw + 1023u) & ~1023u;
#ifdef HUMMING_SM90_OPAQUE_RING
  // Opt-in (CMAKE_CUDA_FLAGS=-DHUMMING_SM90_OPAQUE_RING, for A/B runs): the ring's address kept in
  // a register, where ptxas otherwise derives it again at every stage from the shared window
  // (ncu, session 42: S2UR SR_CgaCtaId and a dependent chain before each stage's first WGMMA of the
  // FP8 block tile t192n128s4). H100, session 42, GEMM alone, graph us, with / without: t192n128s4
  // 0.96-0.98x the time on 7168 x 16384 and 18432 x 7168 at m = 4096 and 8192, but t128n128s5
  // 1.00-1.07x; weight-only u4g128 t64 on 28672 x 8192 at m = 256 0.88x, t128 and the per-channel
  // FP8 t128x192 unchanged. Mixed, and one run on one card: not the default.
  asm volatile("" : "+r"(ring));
#endif
  char *ring_ptr = smem + (ring - raw);
  const uint32_t bars = ring + RingBytes;
  volatile int *flag =
      reinterpret_cast<volatile int *>(ring_ptr + RingBytes + ring_barrier_bytes<Stages, ConvertArrivals>());
  if (threadIdx.x == 0) {
    init_ring<Stages, Consumers, FullArrivals, ConvertArrivals>(bars);
    prefetch();
    head_start(ring, bars);
  }
  // With programmatic launches (backend/pdl.h) this block may start while the kernel before it
  // still runs: everything above touches only shared memory and the kernel's parameters (and, in
  // head_start, only the weight; see GemmArgs::early_weights); no global memory is read or written
  // before the kernel before has finished (it may have written the weights, the activations or the
  // workspace, or still read memory that this kernel's output reuses). Then the next programmatic
  // launch may be scheduled: its blocks take multiprocessors as this grid's blocks end, and wait for
  // the whole grid.
  pdl_wait();
  pdl_allow();
  __syncthreads();
  if (threadIdx.x < 128) {
    regs_dealloc<RegSplit<Consumers, ProducerRegs>::kProducer>();
    produce(static_cast<int>(threadIdx.x), ring, ring_ptr, bars);
  } else {
    regs_alloc<RegSplit<Consumers, ProducerRegs>::kConsumer>();
    consume(ring, ring_ptr, bars, flag);
  }
}

// The kernel of every sm90 kernel template K (K::run on sm_90a; other targets compile it empty).
template <class K>
__global__ void __launch_bounds__(K::kThreads, 1) dense_kernel(const __grid_constant__ typename K::Params p) {
  extern __shared__ __align__(1024) char smem[];
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  K::run(p, smem);
#endif
}

// What a TMA tensor map of the activations needs, as `what` (the kernels, for messages) says:
// rows of whole 16-byte units (k and, with more than one row, the row stride; elements of
// `elem_bytes`) and a 16-byte aligned start.
inline Status check_activation_rows(const GemmArgs &args, int elem_bytes, const char *what) {
  const int per16 = 16 / elem_bytes;
  if (args.dims.k % per16 != 0)
    return Status::Error(std::string(what) + " needs k to be a multiple of " + std::to_string(per16) +
                         " (16-byte activation rows), got k=" + std::to_string(args.dims.k));
  if (args.m > 1 && args.lda % per16 != 0)
    return Status::Error(std::string(what) + " needs the activation row stride to be a multiple of " +
                         std::to_string(per16) + " elements, got " + std::to_string(args.lda));
  if (reinterpret_cast<uintptr_t>(args.a) % 16 != 0)
    return Status::Error(std::string(what) + " needs 16-byte aligned activations");
  return Status::Ok();
}

// Stream-K scratch a launch of K with these arguments needs.
template <class K> size_t workspace_of(const GemmArgs &args) {
  return streamk_workspace_bytes(K::plan(args), K::kTileM, K::BN);
}

// K's parameters with the fields every sm90 kernel has: the arguments, the plan, the tiles per row.
template <class K> typename K::Params base_params(const GemmArgs &args) {
  typename K::Params p;
  p.args = args;
  p.plan = K::plan(args);
  p.n_tiles = K::n_tiles(args);
  return p;
}

// Loads K's kernel and raises its shared-memory limit, once per process; false where the device
// cannot give a block K::kSmemTotal bytes.
template <class K> bool prepare_blocks() {
  static const bool ok = allow_smem(reinterpret_cast<const void *>(&dense_kernel<K>), K::kSmemTotal);
  return ok;
}

template <class K> Status prepare_blocks(const char *what) {
  if (prepare_blocks<K>()) return Status::Ok();
  return Status::Error(std::string("this instance of ") + what + " needs " + std::to_string(K::kSmemTotal) +
                       " bytes of shared memory per block, more than this GPU allows");
}

// What a first launch of K would otherwise pay, done ahead (prepare_instance): the tensor-map
// encoder's driver lookup (once per process) and K's module load with its shared-memory limit.
template <class K> Status prepare_launch(const char *what) {
  std::string why;
  if (tensor_map_encoder(&why) == nullptr) return Status::Error(why);
  return prepare_blocks<K>(what);
}

// The rows of the activations' tail box of a dense launch of m rows in tiles of BM (why:
// backend/sm90/stage_loads.h): the last row of tiles' rows rounded up to 8, which keeps the stage's
// 128-byte swizzle whole (it repeats every 8 rows); 0 where that is BM or more, or where
// HUMMING_TAIL_BOXES=0 (read once) asks for whole boxes everywhere, for A/B measurements.
inline int tail_box_rows(int64_t m, int bm) {
  static const bool on = [] {
    const char *v = std::getenv("HUMMING_TAIL_BOXES");
    return v == nullptr || std::string(v) != "0";
  }();
  const int64_t left = m % bm, rows = (left + 7) / 8 * 8;
  return !on || left == 0 || rows >= bm ? 0 : static_cast<int>(rows);
}

// Host: p->tail_rows for a launch of BM-row tiles over args.a (elements of type `elem`), and where
// it is not 0, p->act_tail, the activations' map in boxes of that many rows.
template <int BM, class Params> Status prepare_tail_box(Params *p, const GemmArgs &args, MapElem elem) {
  p->tail_rows = tail_box_rows(args.m, BM);
  return p->tail_rows == 0 ? Status::Ok()
                           : cached_rows_map(&p->act_tail, args.a, elem, args.m, args.dims.k, args.lda, p->tail_rows);
}

// Host: the activations' side of a launch of BM-row tiles (elements of type `elem`): p->act, their
// map in boxes of BM rows; grouped launches (Grouped) p->experts, the rows of each expert, and
// whole boxes everywhere (their tiles end at their expert's last row, mostly inside the
// activations); dense ones the tail box (prepare_tail_box).
template <int BM, bool Grouped, class Params>
Status prepare_activation_rows(Params *p, const GemmArgs &args, MapElem elem) {
  const Status st = cached_rows_map(&p->act, args.a, elem, args.m, args.dims.k, args.lda, BM);
  if (!st) return st;
  p->experts = ExpertRows{};
  p->tail_rows = 0;
  if constexpr (Grouped) {
    p->experts = expert_rows(args);
    return Status::Ok();
  } else {
    return prepare_tail_box<BM>(p, args, elem);
  }
}

// Device: the rows of the activation boxes of the tile at row m0 (prepare_tail_box): BM, or the
// tail box's where the tile's rows end before BM and the launch has one.
template <int BM, class Params> __device__ __forceinline__ int box_rows(const Params &p, int64_t m0) {
  return p.tail_rows != 0 && p.args.m - m0 < BM ? p.tail_rows : BM;
}

// Host side of a launch of K with parameters `p` (p.plan made): the workspace its plan needs, the
// shared-memory limit raised once per process, p.plan.blocks blocks on `stream`. `what` names the
// kernels in messages.
template <class K>
Status launch_blocks(const typename K::Params &p, const GemmArgs &args, void *stream, const char *what) {
  const size_t need = streamk_workspace_bytes(p.plan, K::kTileM, K::BN);
  if (need > args.workspace_bytes || (need > 0 && args.workspace == nullptr))
    return Status::Error(std::string(what) + " need " + std::to_string(need) +
                         " bytes of workspace (its first 64 KiB zeroed), got " + std::to_string(args.workspace_bytes));
  Status st = prepare_blocks<K>(what);
  if (!st) return st;
  // Chained (backend/pdl.h): the block's prologue (barriers, tensor-map prefetch) overlaps the tail
  // of the kernel before.
  cudaError_t e = launch_chained(dense_kernel<K>, dim3(static_cast<unsigned>(p.plan.blocks)), dim3(K::kThreads),
                                 K::kSmemTotal, static_cast<cudaStream_t>(stream), p);
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) return Status::Error(std::string(what) + " failed to launch: " + cudaGetErrorString(e));
  return Status::Ok();
}

} // namespace sm90
} // namespace humming
