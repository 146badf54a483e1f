// Programmatic dependent launch (PDL), shared by the sm90 GEMMs, the MoE helper kernels
// (src/moe_route.cu) and activation quantization (src/quantize_act.cu): with HUMMING_PDL on, a
// launch may start while the kernel before it in the stream still runs, so that its launch and
// prologue overlap that kernel's tail. The rules that keep it correct: every kernel launched this
// way calls pdl_wait() before it reads or writes global memory (the wait returns once the grid
// before has finished and its writes are visible, so whatever ran before that grid is finished
// too), and a kernel calls pdl_allow() only to let the next launch be scheduled early, never as a
// signal about its own results. The one exception: where the caller promises that the launch before
// began only once everything before it had finished and that nothing since wrote the weight
// (GemmArgs::early_weights), the sm90 8-bit activation GEMM copies weight boxes before its wait.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <string>
#include <utility>

namespace humming {

// Waits until the grid this launch depends on has finished and its memory is visible (at once
// where the launch had no programmatic dependency; compiled out before sm_90, where no launch is
// programmatic: launch_chained checks the device).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next programmatic launch in the stream be scheduled once every block of this grid has
// called it or ended (its blocks then wait in pdl_wait for this grid to finish).
__device__ __forceinline__ void pdl_allow() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// HUMMING_PDL (read once): "0" turns programmatic launches off; anything else, or unset, leaves
// them on.
inline bool programmatic_launch() {
  static const bool on = [] {
    const char *v = std::getenv("HUMMING_PDL");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

// Whether the current device takes programmatic launches (compute capability 9.0 and newer; the
// kernels for older ones compile pdl_wait out), cached per device.
inline bool device_chains() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  static int known[64] = {}; // 0 unknown, 1 no, 2 yes
  if (dev < 0 || dev >= 64) return false;
  if (known[dev] == 0) {
    int major = 0;
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess;
    known[dev] = ok && major >= 9 ? 2 : 1;
  }
  return known[dev] == 2;
}

// Launches `kernel` on grid x block threads with `smem` bytes of dynamic shared memory on `stream`,
// programmatically where HUMMING_PDL and the device allow (the kernel then must call pdl_wait
// before it touches global memory). The launch's error, as cudaGetLastError would give it.
template <class... Params, class... Args>
cudaError_t launch_chained(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                           Args &&...args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  if (programmatic_launch() && device_chains()) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attr;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

} // namespace humming
