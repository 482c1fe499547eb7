// src/cuda/smxx/warp_scan.cuh: the inclusive prefix sum over one full warp (device), shared by
// the glue's grouping scans (group.cu, prologue.cu) and the SM90 kernels' tile and unit lists.
#pragma once

namespace mxmoe::smxx {

// v summed over lanes 0..lane of the calling warp (all 32 lanes must call it).
template <typename T>
__device__ __forceinline__ T warp_inclusive_sum(T v, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T n = __shfl_up_sync(0xFFFFFFFFu, v, o);
    if (lane >= o) v += n;
  }
  return v;
}

}  // namespace mxmoe::smxx
