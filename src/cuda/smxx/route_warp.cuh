// src/cuda/smxx/route_warp.cuh: Kimi-K3 routing of one token by one warp, the device routine
// shared by the route kernel (route.cu) and the fused decode prologue (prologue.cu).
//
// Algorithm: each expert's selection key c[e] = sigmoid(logit[e]) + bias[e] becomes an
// order-preserving unsigned integer, in registers (E <= kRouteRegExperts: a round is two
// redux.sync reductions, see route_token_warp_regs) or in shared memory (larger E), and the top k
// are picked by k rounds of argmax. Shared-memory version: each lane scans its experts (e = lane,
// lane + 32, ...; ascending, so a strict > keeps the lower id on ties), then a shuffle reduction
// orders candidates by (key desc, id asc). The winner is retired by setting its key to 0, below every real key. Weights use s alone (the bias
// only selects): w_j = s_j / (s_0 + ... + s_{k-1}) * scaling, summed in slot order in fp32.
// Deterministic: no atomics, a fixed reduction tree.
//
// Key order: finite keys and +-Inf in numeric order (-0 == +0), then NaN keys, then retired ones.
// So a -inf correction bias (an expert masked out) ranks below every finite key and is still a
// valid pick when fewer than k experts remain, as in route_kimi (the CPU reference).
// NaN (docs/NUMERICS.md): the CPU reference rejects NaN logits / bias as bad input; the GPU path
// cannot throw, so a token with ANY NaN key gets NaN weights on all k slots (its ids stay k
// distinct valid experts, NaN keys ranked last, lower id first). The NaN then reaches exactly
// that token's output (GEMM2 scales by the weight) instead of being silently routed or zeroed;
// other tokens are untouched.
#pragma once

#include <climits>
#include <cstdint>

#include "mxmoe/formats.h"
#include "smxx/glue.h"  // kRouteRegExperts

namespace mxmoe::smxx {

__device__ __forceinline__ uint32_t route_order_key(float c) {
  if (c != c) return 1u;  // NaN: below every number
  uint32_t u = __float_as_uint(c);
  if (u == 0x80000000u) u = 0u;  // -0 ranks with +0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // -Inf -> 0x007FFFFF > 1
}

// Writes the weights of one token from the slot sigmoids (lane j < 32 holds slot j's my_s; slots
// 32.. were stored unscaled in weights[] by lane 0) and the slot-order sum.
__device__ __forceinline__ void route_write_weights(int k, bool renormalize, float scaling,
                                                    bool nan_token, float sum, float my_s,
                                                    int32_t my_id, int32_t* ids, float* weights) {
  const int lane = threadIdx.x % 32;
  const float kNan = __uint_as_float(0x7FFFFFFFu);
  if (lane < k && lane < 32) {
    ids[lane] = my_id;
    // sum == 0 (every chosen sigmoid underflowed) gives weight 0, as route_kimi does, not NaN.
    weights[lane] = nan_token     ? kNan
                    : renormalize ? (sum > 0.0f ? my_s / sum * scaling : 0.0f)
                                  : my_s * scaling;
  }
  if (k > 32) {
    __syncwarp();
    for (int j = 32 + lane; j < k; j += 32) {
      weights[j] = nan_token     ? kNan
                   : renormalize ? (sum > 0.0f ? weights[j] / sum * scaling : 0.0f)
                                 : weights[j] * scaling;
    }
  }
}

// The largest of N keys and its index (the lowest index among equal keys), by a pairwise tree:
// depth log2 N, where a scan is a chain of N dependent compare-and-selects (the winner lane
// re-scans its keys every round). Left halves hold the lower indices and win ties (strict >).
template <int W>
__device__ __forceinline__ void route_tree_level(uint32_t* v, int* ix) {
  if constexpr (W >= 1) {
#pragma unroll
    for (int m = 0; m < W; ++m) {
      const bool right = v[2 * m + 1] > v[2 * m];
      v[m] = right ? v[2 * m + 1] : v[2 * m];
      ix[m] = right ? ix[2 * m + 1] : ix[2 * m];
    }
    route_tree_level<W / 2>(v, ix);
  }
}
template <int N>
__device__ __forceinline__ void route_tree_max(const uint32_t (&key)[N], uint32_t& best,
                                               int& index) {
  static_assert(N >= 2 && (N & (N - 1)) == 0, "a power of two");
  uint32_t v[N];
  int ix[N];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    v[i] = key[i];
    ix[i] = i;
  }
  route_tree_level<N / 2>(v, ix);
  best = v[0];
  index = ix[0];
}

// E <= kRouteRegExperts: lane l holds the keys of experts l + 32 i in registers and its own best
// (highest key, lowest i). A round is two warp reductions (redux.sync: max key, then min id among
// the lanes holding it) and the winning lane's retire-and-rescan (route_tree_max). The slot
// sigmoids are recomputed from the winners' logits after the rounds (cache hits, all lanes at
// once) and summed in slot order, so they stay off the rounds' critical path.
// Loads first: every logit and bias of the lane is requested before any arithmetic. With the
// sigmoid (whose IEEE division is a subroutine call) between them, the loads went out one at a
// time: ~10 us per token at E = 896 from L2 (bench/NOTES.md G round 12).
__device__ __forceinline__ void route_token_warp_regs(const float* row, const float* bias, int E,
                                                      int k, bool renormalize, float scaling,
                                                      int32_t* ids, float* weights) {
  const int lane = threadIdx.x % 32;
  float lg[32], bs[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int e = lane + 32 * i;
    lg[i] = e < E ? row[e] : 0.0f;
    bs[i] = bias != nullptr && e < E ? bias[e] : 0.0f;
  }
  uint32_t key[32];
  bool saw_nan = false;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    key[i] = 0u;  // absent experts look retired: never picked (k <= E)
    if (lane + 32 * i < E) {
      const float s = situ_sigmoid(lg[i]);
      const float c = bias ? s + bs[i] : s;
      saw_nan |= c != c;
      key[i] = route_order_key(c);
    }
  }
  const bool nan_token = __any_sync(~0u, saw_nan);
  uint32_t lb;
  int li;
  route_tree_max(key, lb, li);
  int32_t my_id = -1;  // lane j < k keeps slot j's expert
  for (int j = 0; j < k; ++j) {
    const uint32_t m = __reduce_max_sync(~0u, lb);
    const int best_id = __reduce_min_sync(~0u, lb == m ? li * 32 + lane : INT_MAX);
    if (lane == (best_id & 31)) {  // retire the winner, find this lane's next best
      const int win_i = best_id >> 5;
#pragma unroll
      for (int i = 0; i < 32; ++i) key[i] = i == win_i ? 0u : key[i];
      route_tree_max(key, lb, li);
    }
    if (lane == j % 32 && j < 32) my_id = best_id;
    if (j >= 32 && lane == 0) ids[j] = best_id;  // slots 32..63: stored by lane 0
  }
  // Slot sigmoids, summed in slot order (as route_kimi: s_0 + s_1 + ... in fp32).
  const float my_s = lane < k ? situ_sigmoid(row[my_id]) : 0.0f;
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const float s = __shfl_sync(~0u, my_s, j);
    if (j < k) sum += s;
  }
  if (k > 32) {  // slots 32..63: stored unscaled by lane 0 (route_write_weights scales them)
    __syncwarp();
    for (int j = 32; j < k; ++j) {
      const float s = situ_sigmoid(row[ids[j]]);
      sum += s;
      if (lane == 0) weights[j] = s;
    }
  }
  route_write_weights(k, renormalize, scaling, nan_token, sum, my_s, my_id, ids, weights);
}

// Routes token row `row` (E logits) into ids[0..k) / weights[0..k). `keys` is this warp's
// shared-memory scratch of E words (unused when E <= reg_experts, at most kRouteRegMax: the
// register version). Called by all 32 lanes of a warp.
__device__ __forceinline__ void route_token_warp(const float* row, const float* bias, int E, int k,
                                                 bool renormalize, float scaling, uint32_t* keys,
                                                 int32_t* ids, float* weights,
                                                 int reg_experts = kRouteRegExperts) {
  if (E <= reg_experts && E <= kRouteRegMax) {
    route_token_warp_regs(row, bias, E, k, renormalize, scaling, ids, weights);
    return;
  }
  const int lane = threadIdx.x % 32;
  bool saw_nan = false;
  constexpr int kBatch = 8;  // loads in flight per lane before the sigmoids (see above)
  for (int e0 = lane; e0 < E; e0 += 32 * kBatch) {
    float lg[kBatch], bs[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int e = e0 + 32 * u;
      lg[u] = e < E ? row[e] : 0.0f;
      bs[u] = bias != nullptr && e < E ? bias[e] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int e = e0 + 32 * u;
      if (e < E) {
        const float s = situ_sigmoid(lg[u]);
        const float c = bias ? s + bs[u] : s;
        saw_nan |= c != c;
        keys[e] = route_order_key(c);
      }
    }
  }
  const bool nan_token = __any_sync(~0u, saw_nan);
  __syncwarp();
  float sum = 0.0f;
  float my_s = 0.0f;  // lane j < k keeps slot j's sigmoid
  int32_t my_id = -1;
  for (int j = 0; j < k; ++j) {
    uint32_t best = 0;
    int best_id = INT_MAX;
    for (int e = lane; e < E; e += 32) {
      const uint32_t v = keys[e];
      if (v > best) { best = v; best_id = e; }
    }
    for (int off = 16; off > 0; off >>= 1) {
      const uint32_t ov = __shfl_xor_sync(~0u, best, off);
      const int oid = __shfl_xor_sync(~0u, best_id, off);
      if (ov > best || (ov == best && oid < best_id)) { best = ov; best_id = oid; }
    }
    // k <= E, so an unretired expert (key >= 1) always exists: best_id is a valid id.
    const float s = situ_sigmoid(row[best_id]);
    sum += s;
    if (lane == j % 32 && j < 32) { my_s = s; my_id = best_id; }
    if (lane == 0) keys[best_id] = 0u;
    // Slots 32..63 are written directly by lane 0 (rare; keeps registers fixed).
    if (j >= 32 && lane == 0) {
      ids[j] = best_id;
      weights[j] = s;
    }
    __syncwarp();
  }
  route_write_weights(k, renormalize, scaling, nan_token, sum, my_s, my_id, ids, weights);
}

}  // namespace mxmoe::smxx
