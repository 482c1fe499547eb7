// src/cuda/sm90/tile_prefix.cuh: the persistent grouped GEMMs' view of the expert offsets (device).
//
// Every grouped kernel (one-warpgroup, decode, FP8) walks (expert, weight tile, token tile) work
// from the same prefix of per-expert tile counts, so the clamping of an expert's rows and the
// prefix scan live here once. Params is any argument struct with `offsets` (device
// [num_experts + 1]), `num_experts` and `max_rows`.
#pragma once

#include "smxx/cta_scan.cuh"     // the grouping's CTA scan (build_tile_prefix_from_ids)
#include "smxx/group_pairs.cuh"  // local_expert: the grouping's own test of an id
#include "smxx/warp_scan.cuh"

namespace mxmoe::sm90 {

// Rows of expert e, clamped to [0, max_rows) so a bad offsets array cannot cause stray writes.
template <class Params>
__device__ __forceinline__ void expert_rows(const Params& p, int e, int* begin, int* rows) {
  int b = p.offsets[e], en = p.offsets[e + 1];
  b = max(0, min(b, p.max_rows));
  en = max(b, min(en, p.max_rows));
  *begin = b;
  *rows = en - b;
}

// sPrefix[e] = tiles (BN-token tiles x m_tiles weight tiles) of experts < e, sPrefix[E] = total.
// Called by all NT threads of the block (NT a multiple of 32, sWarp holds NT / 32 ints); ends
// with __syncthreads, so sPrefix is visible to the whole block. sSpan (optional, [E]): each
// expert's clamped begin | rows << 16, for kernels with max_rows <= 65535 that look them up
// once per tile (one ld.shared instead of two dependent global loads).
template <int BN, int NT, class Params>
__device__ __forceinline__ void build_tile_prefix(const Params& p, int m_tiles, int* sPrefix,
                                                  int* sWarp, uint32_t* sSpan = nullptr) {
  static_assert(NT % 32 == 0, "whole warps");
  const int tid = threadIdx.x, E = p.num_experts;
  const int chunk = (E + NT - 1) / NT;
  const int e0 = min(E, tid * chunk), e1 = min(E, e0 + chunk);
  int local = 0;
  for (int e = e0; e < e1; ++e) {
    int b, r;
    expert_rows(p, e, &b, &r);
    local += (r + BN - 1) / BN * m_tiles;
  }
  // inclusive scan of `local` over the NT threads
  const int lane = tid & 31, warp = tid >> 5;
  const int v = smxx::warp_inclusive_sum(local, lane);
  if (lane == 31) sWarp[warp] = v;
  __syncthreads();
  int before = 0;
  for (int w = 0; w < warp; ++w) before += sWarp[w];
  int run = before + v - local;  // exclusive prefix of this thread's chunk
  for (int e = e0; e < e1; ++e) {
    sPrefix[e] = run;
    int b, r;
    expert_rows(p, e, &b, &r);
    if (sSpan != nullptr) sSpan[e] = static_cast<uint32_t>(b) | static_cast<uint32_t>(r) << 16;
    run += (r + BN - 1) / BN * m_tiles;
  }
  if (tid == NT - 1) sPrefix[E] = before + v;
  __syncthreads();
}

// The expert that owns flat tile `tile` (0 <= tile < sPrefix[E]): the last e whose prefix is <=
// tile. Experts with no tiles share their successor's prefix, so the last one is the one with
// tiles. A binary search over the shared prefix: log2(E) dependent shared loads.
__device__ __forceinline__ int tile_owner(const int* sPrefix, int num_experts, int tile) {
  int lo = 0, hi = num_experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (sPrefix[mid] <= tile)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// The same sPrefix and sSpan as build_tile_prefix, found from the routing instead of the
// offsets: ids [pairs] are the top-k ids that p.offsets were (or will be) grouped from, by the
// glue's stable grouping, in which local expert e = smxx::local_expert(id, expert_start, E) owns
// the rows [count of the pairs below e, + its count). A kernel can then find its tiles before
// pdl::wait() when the ids were complete before its chain began (decode_gemm.h, DecodeSpec);
// they are read through L2 (ld.global.cg), never from a possibly stale L1 line.
// Needs pairs <= p.max_rows (so expert_rows' clamp is the identity, as it is on those offsets)
// and E <= kMaxE; sPrefix holds the rows' begins between the two scans (smxx::cta_exclusive_scan,
// the grouping's own), sSpan the counts. Called by all NT threads; ends with __syncthreads.
template <int BN, int NT, int kMaxE, class Params>
__device__ __forceinline__ void build_tile_prefix_from_ids(const Params& p, const int32_t* ids,
                                                           int pairs, int expert_start, int m_tiles,
                                                           int* sPrefix, int* sWarp,
                                                           uint32_t* sSpan) {
  constexpr int kMaxSeg = (kMaxE + NT - 1) / NT;
  const int tid = threadIdx.x, E = p.num_experts;
  for (int e = tid; e < E; e += NT) sSpan[e] = 0;
  __syncthreads();
  for (int i = tid; i < pairs; i += NT) {
    const int le = smxx::local_expert(__ldcg(ids + i), expert_start, E);
    if (le >= 0) atomicAdd(&sSpan[le], 1u);  // integer counts: the order does not matter
  }
  __syncthreads();
  // Rows: each expert's begin, then sSpan = begin | rows << 16 (pairs <= max_rows <= 65535).
  smxx::cta_exclusive_scan<NT, kMaxSeg>(
      E, sWarp, [&](int e) { return static_cast<int32_t>(sSpan[e]); },
      [&](int e, int32_t v) { sPrefix[e] = v; });
  __syncthreads();
  for (int e = tid; e < E; e += NT) sSpan[e] = static_cast<uint32_t>(sPrefix[e]) | sSpan[e] << 16;
  __syncthreads();
  // Tiles: (BN-token tiles x m_tiles) per expert, their prefix into sPrefix, the total at [E].
  smxx::cta_exclusive_scan<NT, kMaxSeg>(
      E, sWarp,
      [&](int e) { return (static_cast<int32_t>(sSpan[e] >> 16) + BN - 1) / BN * m_tiles; },
      [&](int e, int32_t v) { sPrefix[e] = v; });
  __syncthreads();
}

}  // namespace mxmoe::sm90
