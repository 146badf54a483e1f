// The host side of the sm80 family's kernels (kernel/sm80_dense.cuh, kernel/sm80_a8_dense.cuh),
// shared because their launches are alike: one __global__ template per kernel struct and form
// (wide, or narrow for launches of at most 8 rows), a block's dynamic shared memory raised once
// per process, the stream-K plan's workspace, and the launch.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "humming/backend/sm80/warp_sums.h"
#include "humming/humming.h"
#include "humming/scheduler/streamk.h"

namespace humming {
namespace sm80 {

// K: the kernel struct (sm80::Dense or sm80::DenseA8): kThreads, kMinBlocks, kSmemTotal,
//    kHasNarrow, kNarrowRows, kBM, BN, its Params, make_params and run<Narrow>.
// Narrow: the form for m <= 8, for kernels whose warps hold one mma tile.
template <class K, bool Narrow>
__global__ void __launch_bounds__(K::kThreads, K::kMinBlocks)
    dense_kernel(const __grid_constant__ typename K::Params p) {
  extern __shared__ __align__(16) char smem[];
  K::template run<Narrow>(p, smem);
}

// Blocks of K's kernels one multiprocessor holds at once, after raising their shared-memory
// limit (queried once per process; a process drives one kind of GPU). Stream-K fills that many
// slots per SM. Negative: the device cannot give a block this much shared memory.
template <class K> int resident_blocks() {
  static const int blocks = [] {
    cudaError_t e =
        cudaFuncSetAttribute(dense_kernel<K, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, K::kSmemTotal);
    if constexpr (K::kHasNarrow)
      if (e == cudaSuccess)
        e = cudaFuncSetAttribute(dense_kernel<K, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, K::kSmemTotal);
    if (e != cudaSuccess) {
      cudaGetLastError(); // clear the error, so that a later launch reports its own
      return -1;
    }
    // Both kernels are built for the same blocks per SM (__launch_bounds__), so one answers.
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, dense_kernel<K, false>, K::kThreads, K::kSmemTotal) !=
        cudaSuccess) {
      cudaGetLastError();
      return 1;
    }
    return b > 0 ? b : 1;
  }();
  return blocks;
}

// The stream-K scratch a launch of K with these arguments needs.
template <class K> size_t launch_workspace_bytes(const GemmArgs &args) {
  const auto p = K::make_params(args);
  return streamk_workspace_bytes(p.plan, args.m < K::kBM ? args.m : K::kBM, K::BN);
}

// Loads K's kernels (resident_blocks sets their shared-memory limit and asks their occupancy);
// `what` names the instance's kind in the message.
template <class K> Status prepare_kernels(const char *what) {
  if (resident_blocks<K>() < 0)
    return Status::Error(std::string("this ") + what + " instance needs " + std::to_string(K::kSmemTotal) +
                         " bytes of shared memory per block, more than this GPU allows; use a smaller tile");
  return Status::Ok();
}

// One launch of K: the narrow form for at most kNarrowRows rows where K has it (and
// HUMMING_NARROW does not turn it off), else the wide one. `what` names the kernels in messages.
template <class K> Status launch_kernels(const GemmArgs &args, void *stream, const char *what) {
  if (args.m == 0) return Status::Ok();
  const auto p = K::make_params(args);
  const size_t need = streamk_workspace_bytes(p.plan, args.m < K::kBM ? args.m : K::kBM, K::BN);
  if (need > args.workspace_bytes || (need > 0 && args.workspace == nullptr))
    return Status::Error(std::string("the ") + what + " kernels need " + std::to_string(need) +
                         " bytes of workspace (its first 64 KiB zeroed), got " + std::to_string(args.workspace_bytes));
  const Status st = prepare_kernels<K>(what);
  if (!st) return st;
  const dim3 grid(static_cast<unsigned>(p.plan.blocks));
  bool narrow = false;
  if constexpr (K::kHasNarrow) narrow = args.m <= K::kNarrowRows && narrow_enabled();
  if constexpr (K::kHasNarrow)
    if (narrow) dense_kernel<K, true><<<grid, K::kThreads, K::kSmemTotal, static_cast<cudaStream_t>(stream)>>>(p);
  if (!narrow) dense_kernel<K, false><<<grid, K::kThreads, K::kSmemTotal, static_cast<cudaStream_t>(stream)>>>(p);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return Status::Error(std::string(what) + " kernel failed to launch: " + cudaGetErrorString(e));
  return Status::Ok();
}

} // namespace sm80
} // namespace humming
