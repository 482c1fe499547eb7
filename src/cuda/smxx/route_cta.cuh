// src/cuda/smxx/route_cta.cuh: Kimi-K3 routing of one token by one CTA of kRouteWideWarps warps,
// the device routine of route.cu's wide kernel (few tokens: route.cu says when and why).
//
// Algorithm: the warps split the token's keys (warp w's lanes compute experts
// w * 32 * kPer + lane + 32 u, u < kPer, with route_warp.cuh's route_keys_strided; 0 where
// e >= E), store them to shared memory, and one barrier both publishes them and votes whether any
// key is NaN. Warp 0 then holds expert lane + 32 i's key in key[i], as route_lane_keys would have
// computed it, and picks with route_pick_regs: the same keys and the same pick, so the same bits
// as the one-warp router (tests/gpu/test_route_warp_sim.cpp runs this routine on the CPU;
// GpuRoute.WideMatchesOneWarpBitForBit compares the compiled kernels on the device).
// Limitations: E <= kRouteRegMax (register keys), called by all kRouteWideWarps * 32 threads of
// the CTA; warps 1.. return after the barrier (no block-wide barrier may follow).
#pragma once

#include <cstdint>

#include "smxx/glue.h"  // kRouteRegMax, kRouteWideWarps
#include "smxx/route_warp.cuh"

namespace mxmoe::smxx {

// Token t's row `row` into ids / weights ([T, k] contiguous: its slots are row t). keys:
// kRouteRegMax shared words; select_scratch: kRouteSelectWords shared words, 8-byte aligned.
__device__ __forceinline__ void route_token_cta(const float* row, const float* bias, int E, int k,
                                                bool renormalize, float scaling, uint32_t* keys,
                                                uint32_t* select_scratch, int t, int32_t* ids,
                                                float* weights) {
  constexpr int kPer = kRouteRegMax / 32 / kRouteWideWarps;
  static_assert(kPer * 32 * kRouteWideWarps == kRouteRegMax, "the warps split a lane's 32 keys");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int e0 = warp * 32 * kPer + lane;
  uint32_t kb[kPer];
  const bool nan = route_keys_strided(row, bias, E, e0, kb);
#pragma unroll
  for (int u = 0; u < kPer; ++u) keys[e0 + 32 * u] = kb[u];
  const bool nan_token = __syncthreads_or(nan) != 0;  // the barrier the keys need, and the vote
  if (warp != 0) return;
  uint32_t key[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) key[i] = keys[lane + 32 * i];
  route_pick_regs<true>(key, nan_token, row, k, renormalize, scaling,
                        ids + static_cast<size_t>(t) * k, weights + static_cast<size_t>(t) * k,
                        select_scratch, keys);
}

}  // namespace mxmoe::smxx
