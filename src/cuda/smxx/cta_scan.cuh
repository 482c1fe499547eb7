// src/cuda/smxx/cta_scan.cuh: the exclusive prefix sum of a few thousand counts by one CTA
// (device), shared by the grouping's totals scans (group.cu's group_scan, prologue.cu's CTA 0).
#pragma once

#include <cstdint>

#include "smxx/warp_scan.cuh"

namespace mxmoe::smxx {

// store(i, v[0] + ... + v[i - 1]) for i = 0..n, where v[i] = load(i): every thread of the CTA
// (kThreads of them) must call it, with n <= kThreads * kMaxSeg. Each thread takes a contiguous
// segment of ceil(n / kThreads) values, the segment sums get a warp scan, and warp 0 scans the
// warps' sums (warp_sums: kThreads / 32 ints of shared memory): two barriers in all (a
// shared-memory scan with one step per bit took twenty, bench/NOTES.md G round 7). Every load
// happens before the first barrier, so the stores may overwrite what the loads read. The
// segment loops stop at the segment's end: unrolled with predicates instead, every thread issued
// all kMaxSeg iterations though a segment is one value up to kThreads experts (G round 9).
template <int kThreads, int kMaxSeg, typename Load, typename Store>
__device__ __forceinline__ void cta_exclusive_scan(int n, int32_t* warp_sums, Load load,
                                                   Store store) {
  static_assert(kThreads % 32 == 0 && kThreads <= 32 * 32, "one warp scans the warps' sums");
  constexpr int kWarps = kThreads / 32;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int seg = (n + kThreads - 1) / kThreads;
  const int lo = min(n, tid * seg), hi = min(n, lo + seg);
  int32_t v[kMaxSeg];
  int32_t mine = 0;
#pragma unroll
  for (int s = 0; s < kMaxSeg; ++s) {
    if (lo + s >= hi) break;
    v[s] = load(lo + s);
    mine += v[s];
  }
  const int32_t incl = warp_inclusive_sum(mine, lane);
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const int32_t w = lane < kWarps ? warp_sums[lane] : 0;
    const int32_t before = warp_inclusive_sum(w, lane) - w;
    if (lane < kWarps) warp_sums[lane] = before;
  }
  __syncthreads();
  int32_t run = warp_sums[warp] + incl - mine;  // this segment's exclusive prefix
#pragma unroll
  for (int s = 0; s < kMaxSeg; ++s) {
    if (lo + s >= hi) break;
    store(lo + s, run);
    run += v[s];
  }
  if (tid == kThreads - 1) store(n, run);  // the last segment ends at n: run is the total
}

}  // namespace mxmoe::smxx
