// src/cuda/sm90/grouped_gemm_ws_schedule.cuh: the warp-specialized kernel's persistent tile
// schedule: each expert's rows cut into token units (tile_heuristic.h's cut), the unit list every
// CTA builds in shared memory (widest first), a tile index decoded to (expert, rows, width,
// weight group), and GEMM2's per-expert wait for GEMM1's rows when it runs under GEMM1. Why this
// order: grouped_gemm_ws_kernel.cuh's header (Token tiles, Schedule).
#pragma once

#include <cstdint>

#include "sm90/grouped_gemm_kernel.cuh"
#include "sm90/grouped_gemm_ws_shape.cuh"
#include "sm90/ptx.cuh"
#include "sm90/tile_heuristic.h"
#include "smxx/warp_scan.cuh"

namespace mxmoe::sm90 {

constexpr int kWsExpertBits = 14;  // unit = (k << 14) | expert: num_experts <= 16384

struct WsTile {
  int e, p0, nrows, ncls, mg;  // mg: the CTA's group of C 64-row weight tiles
};

// Units of expert e at width cap (tile_heuristic.h's cut; none for an empty expert). sz is
// ws_unit_rows(r, cap) spelled out: calling that helper here moved the registers of the whole
// kernel (cuobjdump), so the shipped schedule keeps the inline form.
__device__ __forceinline__ void ws_units_of(const KernelArgs& p, int e, int cap, int* begin,
                                            int* rows, int* units, int* sz) {
  expert_rows(p, e, begin, rows);
  const int r = *rows;
  if (r == 0) {
    *units = 0;
    *sz = 1;
    return;
  }
  const int n = (r + cap - 1) / cap;
  *sz = (r + n - 1) / n;
  *units = ws_unit_count(r, *sz);
}

// Fills sUnits (all threads of the CTA): units ordered by class (wgmma N) descending, then
// expert, then piece. Returns the unit count (the same in every thread).
template <int C>
__device__ int ws_build_units(const KernelArgs& p, int cap, int max_units, int* sScan,
                              int* sUnits) {
  constexpr int kThreads = WsShape<C>::kThreads, kWsClasses = WsShape<C>::kClasses;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  constexpr int kWarps = kThreads / 32;
  const int E = p.num_experts;
  const int chunk = (E + kThreads - 1) / kThreads;
  const int e0 = min(E, tid * chunk), e1 = min(E, e0 + chunk);
  int cnt[kWsClasses];
#pragma unroll
  for (int c = 0; c < kWsClasses; ++c) cnt[c] = 0;
  for (int e = e0; e < e1; ++e) {
    int b, r, n, sz;
    ws_units_of(p, e, cap, &b, &r, &n, &sz);
    if (n == 0) continue;
    const int cs = ws_class_of(sz), cl = ws_class_of(r - (n - 1) * sz);
#pragma unroll
    for (int c = 0; c < kWsClasses; ++c) cnt[c] += (c == cs ? n - 1 : 0) + (c == cl ? 1 : 0);
  }
  int incl[kWsClasses];
#pragma unroll
  for (int c = 0; c < kWsClasses; ++c) {
    const int v = smxx::warp_inclusive_sum(cnt[c], lane);
    incl[c] = v;
    if (lane == 31) sScan[warp * kWsClasses + c] = v;
  }
  __syncthreads();
  int run[kWsClasses];
  int total = 0;
#pragma unroll
  for (int c = kWsClasses - 1; c >= 0; --c) {  // widest class first
    int before = 0, all = 0;
    for (int w = 0; w < kWarps; ++w) {
      const int v = sScan[w * kWsClasses + c];
      all += v;
      if (w < warp) before += v;
    }
    run[c] = total + before + incl[c] - cnt[c];
    total += all;
  }
  for (int e = e0; e < e1; ++e) {
    int b, r, n, sz;
    ws_units_of(p, e, cap, &b, &r, &n, &sz);
    if (n == 0) continue;
    const int cs = ws_class_of(sz), cl = ws_class_of(r - (n - 1) * sz);
    int pos = 0;
#pragma unroll
    for (int c = 0; c < kWsClasses; ++c) pos = c == cs ? run[c] : pos;
    for (int k = 0; k < n - 1; ++k) {
      if (pos + k < max_units) sUnits[pos + k] = (k << kWsExpertBits) | e;
    }
#pragma unroll
    for (int c = 0; c < kWsClasses; ++c) run[c] += c == cs ? n - 1 : 0;
#pragma unroll
    for (int c = 0; c < kWsClasses; ++c) pos = c == cl ? run[c] : pos;
    if (pos < max_units) sUnits[pos] = ((n - 1) << kWsExpertBits) | e;
#pragma unroll
    for (int c = 0; c < kWsClasses; ++c) run[c] += c == cl ? 1 : 0;
  }
  __syncthreads();
  return min(total, max_units);
}

__device__ __forceinline__ WsTile ws_decode(const KernelArgs& p, const int* sUnits, int cap,
                                            int m_groups, int tile) {
  WsTile T;
  const int u = tile / m_groups;
  T.mg = tile - u * m_groups;
  const int packed = sUnits[u];
  T.e = packed & ((1 << kWsExpertBits) - 1);
  const int k = packed >> kWsExpertBits;
  int begin, rows, n, sz;
  ws_units_of(p, T.e, cap, &begin, &rows, &n, &sz);
  T.p0 = begin + k * sz;
  T.nrows = min(sz, rows - k * sz);
  T.ncls = ws_width(T.nrows);
  return T;
}

// ---- GEMM2 started under GEMM1 (h_ready) ----
// GEMM1 with h_ready counts, per expert, its consumers' finished 64-row tiles (each after its
// h stores, a release), and triggers its dependents at its start; GEMM2 launched after it with
// the same counters skips pdl::wait, so its CTAs take the SMs GEMM1's CTAs leave during GEMM1's
// last wave. Before a tile's first copy of h, thread 0 of GEMM2's producer waits (acquire) until
// expert e counts all its units' 2I / 64 tiles (units: the same cut, both kernels at the same
// cap), and the producer warpgroup passes a named barrier. Everything else GEMM2 reads was
// written before GEMM1's pdl::wait returned, which precedes GEMM2's launch. No deadlock: GEMM2
// is launched only once every GEMM1 CTA has triggered, i.e. is resident or done.
template <int C>
__device__ __forceinline__ void ws_wait_rows(const KernelArgs& p, int cap, const int* h_ready,
                                             int h_tiles, int e) {
  if (threadIdx.x == 0) {
    int begin, rows, units, sz;
    ws_units_of(p, e, cap, &begin, &rows, &units, &sz);
    const int need = units * h_tiles;
    while (ptx::ld_acquire_gpu(h_ready + e) < need) __nanosleep(128);
  }
  ptx::named_barrier(WsShape<C>::kProducerBarrier, kWarpgroup);
}

}  // namespace mxmoe::sm90
