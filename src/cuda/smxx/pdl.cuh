// src/cuda/smxx/pdl.cuh: programmatic dependent launch (PDL), the one convention every kernel of
// the run_moe chain follows.
//
// Why: at decode sizes each kernel of the chain runs for a few microseconds, and a plain stream
// order makes the next kernel's launch and prologue wait for the previous kernel's last CTA to
// retire and its writes to flush. With PDL the next kernel is launched while the previous one
// drains; it does its independent set-up (shared-memory carve-up, barrier init, weight prefetch
// of data no earlier kernel writes) and then blocks in wait() until the previous grid has
// completed and its memory is visible. This is valid in CUDA graph capture (the captured edge
// becomes a programmatic one).
//
// Rules for a kernel launched with launch_pdl():
//  - call pdl::wait() before the first read of anything an earlier kernel of the chain wrote
//    (and before the first write of anything an earlier kernel still reads);
//  - it may call pdl::launch_dependents() once its own remaining work no longer needs the SMs
//    exclusively (optional: without it the dependent starts as this grid's CTAs exit).
// One exception, the warp-specialized GEMM2 started under GEMM1 (sm90/grouped_gemm_ws_schedule.cuh,
// ws_wait_rows): GEMM1 triggers right after its own wait, so everything before GEMM1 is complete
// when GEMM2 launches, and GEMM2 skips wait() and instead waits per expert on counters GEMM1
// releases after its stores of h, the only thing GEMM2 reads from GEMM1.
// What a kernel may read before wait(): anything written before the chain began. Every kernel of
// the chain waits before it triggers, so a kernel starts only once everything before the chain
// has completed; the decode GEMMs read the caller's top-k ids there (sm90/decode_gemm.h,
// DecodeSpec), the fused prologue's quantize CTAs the hidden rows when route_kimi is the chain's
// first kernel (smxx/prologue.cu), and the weights never change.
// On a kernel launched without the attribute, wait() returns at once, so kernels stay correct
// under plain <<<>>> launches (tests).
#pragma once

#include <cuda_runtime.h>

namespace mxmoe::pdl {

__device__ __forceinline__ void wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Launches kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialization
// allowed, so it may start before the previous kernel on the stream has finished (see above).
template <typename... KArgs, typename... Args>
cudaError_t launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                       cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
}

}  // namespace mxmoe::pdl
