// src/cuda/smxx/warp_scan.cuh: prefix sums over one full warp (device), shared by the glue's
// grouping scans (group.cu, prologue.cu), the router's select (route_warp.cuh) and the SM90
// kernels' tile and unit lists.
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

// The sum of v over lanes 0..lane-1 (exclusive) and, in *total, over the whole warp, for
// 0 <= v < 2^kBits: one ballot per bit plane, all independent, where warp_inclusive_sum is five
// dependent shuffle round trips. For small counts on a latency-bound path (route_warp.cuh's
// select). All 32 lanes must call it.
template <int kBits>
__device__ __forceinline__ int warp_exclusive_sum_bits(unsigned v, int lane, int* total) {
  const unsigned below = (1u << lane) - 1u;  // the lanes under this one
  int before = 0, all = 0;
#pragma unroll
  for (int b = 0; b < kBits; ++b) {
    const unsigned plane = __ballot_sync(0xFFFFFFFFu, (v >> b) & 1u);
    before += __popc(plane & below) << b;
    all += __popc(plane) << b;
  }
  *total = all;
  return before;
}

}  // namespace mxmoe::smxx
