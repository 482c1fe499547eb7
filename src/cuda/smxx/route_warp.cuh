// src/cuda/smxx/route_warp.cuh: Kimi-K3 routing of one token by one warp, the device routine
// shared by the route kernel (route.cu) and the fused decode prologue (prologue.cu).
//
// Algorithm: each expert's selection key c[e] = sigmoid(logit[e]) + bias[e] becomes an
// order-preserving unsigned integer, in registers (E <= kRouteRegExperts, route_token_warp_regs:
// a threshold select ranks the few keys that can be picked, route_select_warp, with k rounds of
// argmax as its fallback) or in shared memory (larger E: k rounds of argmax). A round: each lane's
// best (ascending ids, a strict > keeps the lower id on ties), then a warp reduction orders the
// candidates by (key desc, id asc); the winner is retired by setting its key to 0, below every
// real key. Weights use s alone (the bias only selects): w_j = s_j / (s_0 + ... + s_{k-1}) *
// scaling, summed in slot order in fp32. Deterministic: no atomics, fixed reduction orders; all
// three ways pick the same experts and weights bit for bit (tests/gpu/test_route_warp_sim.cpp
// runs this routine on the CPU; GpuRoute.* on the device).
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
#include "smxx/warp_scan.cuh"

namespace mxmoe::smxx {

__device__ __forceinline__ uint32_t route_order_key(float c) {
  if (c != c) return 1u;  // NaN: below every number
  uint32_t u = __float_as_uint(c);
  if (u == 0x80000000u) u = 0u;                       // -0 ranks with +0
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

// The largest of the 32 keys (no index: the select needs only the value), by a pairwise tree.
__device__ __forceinline__ uint32_t route_max_key(const uint32_t (&key)[32]) {
  const auto larger = [](uint32_t a, uint32_t b) { return a > b ? a : b; };  // unsigned
  uint32_t v[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = larger(key[2 * i], key[2 * i + 1]);
#pragma unroll
  for (int w = 8; w >= 1; w /= 2) {
#pragma unroll
    for (int i = 0; i < w; ++i) v[i] = larger(v[2 * i], v[2 * i + 1]);
  }
  return v[0];
}

// 1 / x rounded to nearest (IEEE), branch-free, for x in [1, kRouteRcpMax]: rcp.approx and the
// two FMA correction steps of the compiler's own division fast path, which that range always
// takes (no denormal, infinite or NaN operand or result), minus the range check and the call of
// the slow path around every division: in route_lane_keys' 28 sigmoids per lane those branches
// kept the chains from overlapping, ~1.7 us of a token's ~3.7 us in the routine
// (bench_route_phases, bench/NOTES.md G round 13). GpuRoute.FastReciprocalIsIeeeOverItsRange
// checks every float of the range against the device's 1.0f / x, bit for bit. On the host
// (block_sim's CPU runs of this header) it is the division itself.
constexpr float kRouteRcpMax = 0x1p125f;
__device__ __forceinline__ float route_rcp_rn(float x) {
#ifdef __CUDA_ARCH__
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  r = fmaf(r, fmaf(-x, r, 1.0f), r);
  return fmaf(r, fmaf(-x, r, 1.0f), r);
#else
  return 1.0f / x;
#endif
}

// s[i] = situ_sigmoid(z[i]) bit for bit (1 / (1 + expf(-z)), the same expf and the same IEEE
// reciprocal), the N chains free to overlap: route_rcp_rn wherever 1 + expf(-z) is in its range,
// and situ_sigmoid for the whole lane otherwise (some z < ~-86.6, or NaN: rare, lane-divergent).
template <int N>
__device__ __forceinline__ void route_sigmoids(const float (&z)[N], float (&s)[N]) {
  bool outside = false;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float x = 1.0f + expf(-z[i]);
    outside |= !(x <= kRouteRcpMax);  // NaN included
    s[i] = route_rcp_rn(x);
  }
  if (outside) {
#pragma unroll
    for (int i = 0; i < N; ++i) s[i] = situ_sigmoid(z[i]);
  }
}

// (key, id) ranks before (key', id') in the routing order: higher key, then lower id.
__device__ __forceinline__ bool route_before(uint32_t key, int id, uint32_t key2, int id2) {
  return key > key2 || (key == key2 && id < id2);
}

// (key, id) as one word whose unsigned order is the routing order (key desc, id asc): the key
// high, ~id low. Ids are distinct, so two words never tie.
__device__ __forceinline__ uint64_t route_rank_word(uint32_t key, int id) {
  return (static_cast<uint64_t>(key) << 32) | static_cast<uint32_t>(~id);
}

// The top k (k <= 32) of the lane-held keys (expert lane + 32 i has key[i]; lb: this lane's best
// key), without k serial argmax rounds: tau, the k-th largest of the 32 lanes' best keys (equal
// keys counted apart), bounds the k-th best key overall from below (k lanes' bests are >= tau),
// so every pick is among the keys >= tau, which are few for real logits (~k..2k). Those
// candidates go to the warp's scratch (kRouteSelectWords words, 8-byte aligned) as rank words,
// and each one's rank among them is its slot: the rounds' order (key desc, id asc), so the same
// picks bit for bit. Returns false (scratch untouched, nothing picked) when more than
// kRouteSelectMax keys are >= tau (or, a guard that k <= E rules out, fewer than k lanes hold an
// expert); the caller then runs the rounds.
// Cost: one warp runs it alone, so its instructions and its dependent round trips are its
// latency: ~300 instructions on the wide CTA's path (was ~1,100), 0.75 us (0.96 with the tree) on
// an H100 (bench/NOTES.md, fifty-seventh session), now bound by the ~10 shared-memory and reduction
// round trips in a row rather than by issue. tau compares keys only (32 shuffles, a min-reduction),
// the candidates are one predicate mask, and the rank words compare in one 64-bit test each, over a
// list zero-padded to a multiple of 8 (zero ranks below every candidate: their keys are >= tau >=
// 1). The second 32 candidates are ranked only when there are more than 32. kSharedKeys:
// shared_keys holds the same keys in shared memory, expert e's at shared_keys[e], as the wide CTA
// has them, and the candidates are gathered by a loop over the lane's few, not 32 predicated steps
// over registers (a compile-time choice: a run-time null test kept both gathers in the kernel and
// tangled the mask's code with the unused one's); otherwise shared_keys is unused. The slots go
// through the scratch (a store, a barrier, a load): handing them out by six ballots and a
// shuffle instead measured 44 ns slower (a longer dependent chain; fifty-eighth session).
// Warp-uniform; *my_id: slot `lane`'s expert.
template <bool kSharedKeys>
__device__ __forceinline__ bool route_select_warp(const uint32_t (&key)[32], uint32_t lb, int k,
                                                  uint32_t* scratch, int32_t* my_id,
                                                  const uint32_t* shared_keys) {
  const int lane = threadIdx.x % 32;
  // A lane's best is >= the k-th largest iff fewer than k lanes' bests are above it, so the
  // least such best is tau.
  uint32_t above = 0;  // bit s: lane s's best is above this lane's
#pragma unroll
  for (int s = 0; s < 32; ++s) above |= (__shfl_sync(~0u, lb, s) > lb ? 1u : 0u) << s;
  const uint32_t tau = __reduce_min_sync(~0u, __popc(above) < k ? lb : ~0u);
  if (tau == 0u) return false;  // absent (key 0): fewer than k lanes hold an expert
  uint32_t mask = 0;            // bit i: key[i] is a candidate
#pragma unroll
  for (int i = 0; i < 32; ++i) mask |= (key[i] >= tau ? 1u : 0u) << i;
  int total;  // candidates in the warp; at: this lane's first one's place in the list
  const int at = warp_exclusive_sum_bits<6>(static_cast<unsigned>(__popc(mask)), lane, &total);
  if (total > kRouteSelectMax) return false;
  uint64_t* cand = reinterpret_cast<uint64_t*>(scratch);
  int32_t* slot = reinterpret_cast<int32_t*>(scratch + 2 * kRouteSelectMax);
  uint64_t* next = cand + at;
  if constexpr (kSharedKeys) {  // one pass per candidate of the lane (~1 for real logits)
    for (uint32_t m = mask; m != 0; m &= m - 1) {
      const int e = lane + 32 * (__ffs(m) - 1);
      *next++ = route_rank_word(shared_keys[e], e);
    }
  } else {  // key[i] by a run-time i would put the keys in local memory: 32 predicated stores
#pragma unroll
    for (int i = 0; i < 32; ++i)
      if (mask & (1u << i)) *next++ = route_rank_word(key[i], lane + 32 * i);
  }
  constexpr int kStep = 8;  // rank words per pass of the ranking loops
  static_assert(kRouteSelectMax % kStep == 0, "the padding stays inside the scratch");
  const int padded = (total + kStep - 1) / kStep * kStep;
  if (total + lane < padded) cand[total + lane] = 0u;
  __syncwarp();
  // Each candidate's rank: how many candidates come before it (broadcast reads of each one).
  const auto rank_of = [&](uint64_t c) {
    int r = 0;
    for (int j = 0; j < padded; j += kStep) {
      uint32_t before = 0;  // bit u: candidate j + u ranks before c (bits, not a serial sum)
#pragma unroll
      for (int u = 0; u < kStep; ++u) before |= (cand[j + u] > c ? 1u : 0u) << u;
      r += __popc(before);
    }
    return r;
  };
  const uint64_t c0 = lane < total ? cand[lane] : 0u;
  const int r0 = rank_of(c0);
  if (lane < total && r0 < k) slot[r0] = ~static_cast<int32_t>(static_cast<uint32_t>(c0));
  if (total > 32) {
    const uint64_t c1 = lane + 32 < total ? cand[lane + 32] : 0u;
    const int r1 = rank_of(c1);
    if (lane + 32 < total && r1 < k) slot[r1] = ~static_cast<int32_t>(static_cast<uint32_t>(c1));
  }
  __syncwarp();
  *my_id = lane < k ? slot[lane] : -1;
  __syncwarp();  // the scratch may be reused by this warp's next token
  return true;
}

// The sum of slots 0..min(k, 32) - 1's sigmoids (lane j holds slot j's my_s), in slot order.
// By groups of 8 slots, stopping after the group holding slot k - 1 (k is warp-uniform): k = 16
// runs 16 shuffles and adds, not 32.
__device__ __forceinline__ float route_slot_sum(float my_s, int k) {
  float sum = 0.0f;
  for (int j0 = 0; j0 < 32 && j0 < k; j0 += 8) {
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const float s = __shfl_sync(~0u, my_s, j0 + u);
      if (j0 + u < k) sum += s;
    }
  }
  return sum;
}

// The keys of experts e0 + 32 u (u < N) into key[u]; absent experts (e >= E) get 0, as if
// retired, so they are never picked when k <= E. Loads first: every logit and bias is requested
// before any arithmetic. Written with the sigmoid (whose IEEE division has a called slow path)
// between them, the route kernel alone took 15 us at T = 1, k = 1 from a warm L2 (2.6 us for an
// empty graph node): the loads are thought to have gone out one at a time (bench/NOTES.md G
// round 12). The sigmoids then run branch-free (route_sigmoids). Returns whether any present
// key's score (sigmoid + bias) is NaN. The register and the shared-memory routers both take
// their keys from here, so the two cannot drift apart.
template <int N>
__device__ __forceinline__ bool route_keys_strided(const float* row, const float* bias, int E,
                                                   int e0, uint32_t (&key)[N]) {
  float lg[N], bs[N];
#pragma unroll
  for (int u = 0; u < N; ++u) {
    const int e = e0 + 32 * u;
    lg[u] = e < E ? row[e] : 0.0f;
    bs[u] = bias != nullptr && e < E ? bias[e] : 0.0f;
  }
  float sg[N];
  route_sigmoids(lg, sg);
  bool saw_nan = false;
#pragma unroll
  for (int u = 0; u < N; ++u) {
    key[u] = 0u;
    if (e0 + 32 * u < E) {
      const float c = bias ? sg[u] + bs[u] : sg[u];
      saw_nan |= c != c;
      key[u] = route_order_key(c);
    }
  }
  return saw_nan;
}

// This lane's keys of experts lane + 32 i (E <= 32 * 32), for the register router.
__device__ __forceinline__ bool route_lane_keys(const float* row, const float* bias, int E,
                                                uint32_t (&key)[32]) {
  return route_keys_strided(row, bias, E, static_cast<int>(threadIdx.x % 32), key);
}

// E <= kRouteRegExperts: lane l holds the keys of experts l + 32 i in registers and its own best
// (highest key, lowest i). A round is two warp reductions (redux.sync: max key, then min id among
// the lanes holding it) and the winning lane's retire-and-rescan (route_tree_max). The slot
// sigmoids are recomputed from the winners' logits after the rounds (cache hits, all lanes at
// once) and summed in slot order, so they stay off the rounds' critical path. The keys:
// route_lane_keys.
// select_scratch (kRouteSelectWords words, 8-byte aligned, or null): with it and k <= 32 the
// picks come from route_select_warp, the rounds being its fallback.
// route_pick_regs is everything after the keys: key[i] holds expert lane + 32 i's key (0 where
// absent), nan_token whether any of the token's keys is NaN (warp-uniform). Its callers: the
// one-warp routine below, and route.cu's wide kernel, whose keys come from the CTA's warps
// (kSharedKeys, shared_keys: the same keys in shared memory; see route_select_warp).
template <bool kSharedKeys>
__device__ __forceinline__ void route_pick_regs(uint32_t (&key)[32], bool nan_token,
                                                const float* row, int k, bool renormalize,
                                                float scaling, int32_t* ids, float* weights,
                                                uint32_t* select_scratch,
                                                const uint32_t* shared_keys) {
  const int lane = threadIdx.x % 32;
  int32_t my_id = -1;  // lane j < k keeps slot j's expert
  const bool selected = select_scratch != nullptr && k <= 32 &&
                        route_select_warp<kSharedKeys>(key, route_max_key(key), k, select_scratch,
                                                       &my_id, shared_keys);
  if (!selected) {  // the rounds need each lane's best's index too
    uint32_t lb;
    int li;
    route_tree_max(key, lb, li);
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
  }
  // Slot sigmoids, summed in slot order (as route_kimi: s_0 + s_1 + ... in fp32).
  const float my_s = lane < k ? situ_sigmoid(row[my_id]) : 0.0f;
  float sum = route_slot_sum(my_s, k);
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

// One warp: this lane's keys (route_lane_keys), then route_pick_regs.
__device__ __forceinline__ void route_token_warp_regs(const float* row, const float* bias, int E,
                                                      int k, bool renormalize, float scaling,
                                                      int32_t* ids, float* weights,
                                                      uint32_t* select_scratch) {
  uint32_t key[32];
  const bool nan_token = __any_sync(~0u, route_lane_keys(row, bias, E, key));
  route_pick_regs<false>(key, nan_token, row, k, renormalize, scaling, ids, weights, select_scratch,
                         nullptr);
}

// Routes token row `row` (E logits) into ids[0..k) / weights[0..k). `keys` is this warp's
// shared-memory scratch, 8-byte aligned: E words, or for the register version
// (route_keys_in_registers) route_select_warp's kRouteSelectWords (route_scratch_words). Called
// by all 32 lanes of a warp.
__device__ __forceinline__ void route_token_warp(const float* row, const float* bias, int E, int k,
                                                 bool renormalize, float scaling, uint32_t* keys,
                                                 int32_t* ids, float* weights,
                                                 int reg_experts = kRouteRegExperts) {
  if (route_keys_in_registers(E, reg_experts)) {
    route_token_warp_regs(row, bias, E, k, renormalize, scaling, ids, weights, keys);
    return;
  }
  const int lane = threadIdx.x % 32;
  bool saw_nan = false;
  constexpr int kBatch = 8;  // loads in flight per lane before the sigmoids (route_keys_strided)
  for (int e0 = lane; e0 < E; e0 += 32 * kBatch) {
    uint32_t kb[kBatch];
    saw_nan |= route_keys_strided(row, bias, E, e0, kb);
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (e0 + 32 * u < E) keys[e0 + 32 * u] = kb[u];
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
      if (v > best) {
        best = v;
        best_id = e;
      }
    }
    for (int off = 16; off > 0; off >>= 1) {
      const uint32_t ov = __shfl_xor_sync(~0u, best, off);
      const int oid = __shfl_xor_sync(~0u, best_id, off);
      if (route_before(ov, oid, best, best_id)) {
        best = ov;
        best_id = oid;
      }
    }
    // k <= E, so an unretired expert (key >= 1) always exists: best_id is a valid id.
    const float s = situ_sigmoid(row[best_id]);
    sum += s;
    if (lane == j % 32 && j < 32) {
      my_s = s;
      my_id = best_id;
    }
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
