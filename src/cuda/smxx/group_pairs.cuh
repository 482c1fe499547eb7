// src/cuda/smxx/group_pairs.cuh: the per-pair decisions both grouping paths make (group.cu's
// scatter and prologue.cu's fused one), in one place so their outputs stay bit-identical.
#pragma once

#include <cstdint>

namespace mxmoe::smxx {

// The local expert of a global id, or -1 (id -1, another rank's id, or any id out of range).
__device__ __forceinline__ int local_expert(int32_t id, int start, int count) {
  const int le = id - start;  // id == -1 lands below 0 for start >= 0
  return (id >= 0 && le >= 0 && le < count) ? le : -1;
}

// One 32-pair step of the stable grouping (called by the whole warp, lane l holding one pair):
// the pair's row, next[le] plus the lanes below holding the same local expert (same =
// __match_any_sync of le), or -1 for le < 0; then each expert's lowest lane moves next[le] past
// the step's pairs of that expert. So rows follow pair order within each expert. (group.cu's
// walker spells the same lines out: through this helper its 32 unrolled steps compiled to ~2
// more instructions each, scripts/kernel_sass.sh.)
__device__ __forceinline__ int stable_row_step(int le, unsigned same, int lane, int32_t* next) {
  const unsigned before = same & ((1u << lane) - 1u);
  const int row = le >= 0 ? next[le] + __popc(before) : -1;
  __syncwarp();  // every lane has read its cursor before one moves it
  if (le >= 0 && before == 0) next[le] += __popc(same);
  __syncwarp();
  return row;
}

// Whether exactly one of the k ballot bits from `first` is set (a token whose k pairs lie in
// one 32-pair window, its first at lane `first`, owns exactly one of them).
__device__ __forceinline__ bool one_owned_in_window(unsigned owned, int first, int k) {
  return __popc(owned & ((k >= 32 ? ~0u : (1u << k) - 1u) << first)) == 1;
}

// Whether the token of owned pair i (token i / k) owns exactly one pair: then GEMM2 writes its
// out row itself and the combine skips it (smxx/gemm2_store.cuh). Called by the lanes of a warp
// that walks pairs [w0, w_end) (w_end <= w0 + 32, lane l holding pair w0 + l) with
// owned = __ballot_sync of "my pair is owned" over the whole warp. A token whose k pairs all lie
// in the window is counted from the ballot (always, when k divides 32 and the window starts at
// a multiple of k); one that straddles it reads its k ids again.
// (Out of line: inlined into group.cu's 32 unrolled steps it tripled the scatter's code and
// time, bench/NOTES.md G round 5; the callers arrange their windows so that it is rare.)
inline __device__ __noinline__ bool token_owns_one_pair_by_ids(int t0, int k, const int32_t* ids,
                                                               int start, int count) {
  int n = 0;
  for (int j = 0; j < k; ++j) n += local_expert(ids[t0 + j], start, count) >= 0 ? 1 : 0;
  return n == 1;
}
__device__ __forceinline__ bool token_owns_one_pair(unsigned owned, int i, int k, int w0, int w_end,
                                                    const int32_t* ids, int start, int count) {
  const int t0 = (i / k) * k;
  if (t0 >= w0 && t0 + k <= w_end) return one_owned_in_window(owned, t0 - w0, k);  // k <= 32
  return token_owns_one_pair_by_ids(t0, k, ids, start, count);
}

// A 32-pair step's results (called by the whole warp): out_token[pos] = token if single, else
// -1, for the lanes with an owned pair (pos >= 0), and expert_has_out[le] |= 1 for the experts
// that got a single-pair token (same = __match_any_sync of le): one integer atomicOr per expert
// group, order-independent, so the result is deterministic.
__device__ __forceinline__ void record_single_pairs(int32_t* out_token, int32_t* expert_has_out,
                                                    int pos, bool single, int token, int le,
                                                    unsigned same, int lane) {
  if (pos >= 0) out_token[pos] = single ? token : -1;
  const unsigned singles = __ballot_sync(~0u, single);
  if (le >= 0 && (same & ((1u << lane) - 1u)) == 0 && (same & singles) != 0)
    atomicOr(expert_has_out + le, 1);
}

}  // namespace mxmoe::smxx
