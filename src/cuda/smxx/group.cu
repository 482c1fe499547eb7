// src/cuda/smxx/group.cu: grouping of the T*k token-expert pairs by local expert (EP filter +
// stable counting sort), deterministic and sized only by T*k (graph-capturable).
//
// Algorithm (pair i = t*k + j, local expert le = id - expert_start when owned):
//  1. group_hist   : one CTA per chunk of kGroupChunk pairs; shared-memory histogram of le;
//                    scratch[le, c] = count of chunk c (integer atomics: order-independent).
//                    Expert-major, so the scan reads each expert's counts as contiguous lines.
//  2. group_scan   : one CTA; per expert (a warp) an exclusive scan along the chunks, then an
//                    exclusive scan of the per-expert totals -> expert_offsets[0..E];
//                    scratch[le, c] becomes chunk c's first row of expert le, counted from the
//                    expert's first row (expert_offsets[le]). It also writes the local SiTU
//                    parameters when asked (GroupArgs::beta_out: a kernel of their own cost a
//                    launch and ~3 us, bench/NOTES.md G round 6).
//  3. group_scatter: one warp per chunk loads its ids and weights, then walks them 32 pairs at a
//                    time, in pair order; lanes with the same expert find each other with
//                    __match_any_sync and take consecutive rows by lane order. So rows are
//                    ordered by (expert, token, slot): stable.
// Outputs: x_row[p] = token, row_weight[p] = routing weight of sorted row p (p < offsets[E]);
// pair_pos[i] = sorted row of pair i, or -1 (id -1, another rank's id, or any id out of range);
// when asked, out_token[p] = the token if it owns no other pair (GEMM2 then writes its out row
// itself: smxx/gemm2_store.cuh), else -1, and expert_has_out[e] = 1 if any of expert e's rows
// has one (zeroed by group_scan, set by the scatter with integer atomicOr), else 0.
// Launched with PDL (smxx/pdl.cuh): each kernel waits before touching its predecessor's data.
// Limitations: expert_count <= kMaxLocal (shared-memory counters).
#include "smxx/glue.h"
#include "smxx/group_pairs.cuh"
#include "smxx/pdl.cuh"
#include "smxx/warp_scan.cuh"

namespace mxmoe::smxx {
namespace {

constexpr int kMaxLocal = 8192;
constexpr int kScanThreads = 1024;
constexpr int kScanBatch = 8;  // 32-chunk groups a scan warp loads at once
static_assert(kGroupChunk % 32 == 0, "the scatter walks a chunk 32 pairs at a time");

__global__ void group_hist_kernel(const int32_t* ids, int pairs, int start, int E,
                                  int32_t* scratch) {
  extern __shared__ int32_t cnt[];
  pdl::wait();
  pdl::launch_dependents();
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  const int base = blockIdx.x * kGroupChunk;
  const int end = min(base + kGroupChunk, pairs);
  for (int i = base + threadIdx.x; i < end; i += blockDim.x) {
    const int le = local_expert(ids[i], start, E);
    if (le >= 0) atomicAdd(&cnt[le], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x)
    scratch[static_cast<size_t>(e) * gridDim.x + blockIdx.x] = cnt[e];
}

// GroupArgs' SiTU fill (beta_out null: none).
struct SituFill {
  const float* per_beta;
  float beta;
  const float* per_linear_beta;
  float linear_beta;
  float* beta_out;
  float* linear_beta_out;
  int32_t* h_ready;
  int start;
};

__global__ void __launch_bounds__(kScanThreads)
    group_scan_kernel(int chunks, int E, int32_t* scratch, int32_t* offsets,
                      int32_t* expert_has_out, SituFill fill) {
  __shared__ int32_t part[kScanThreads];
  pdl::wait();
  pdl::launch_dependents();
  if (expert_has_out)  // the scatter ORs into it
    for (int e = threadIdx.x; e < E; e += blockDim.x) expert_has_out[e] = 0;
  if (fill.beta_out)
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
      fill.beta_out[e] = fill.per_beta ? fill.per_beta[fill.start + e] : fill.beta;
      fill.linear_beta_out[e] =
          fill.per_linear_beta ? fill.per_linear_beta[fill.start + e] : fill.linear_beta;
      if (fill.h_ready) fill.h_ready[e] = 0;
    }
  // Per expert (one warp each): exclusive scan along the chunks, kScanBatch x 32 chunks per round
  // with all their loads in flight (a serial walk down 256 chunks, one dependent load at a time,
  // took ~80 us at T=16384, k=16 on the H200; chunk-major counts, one sector per load, ~27 us);
  // the total goes to offsets[e + 1] for now.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int e = warp; e < E; e += kScanThreads / 32) {
    int32_t* counts = scratch + static_cast<size_t>(e) * chunks;
    int32_t run = 0;
    for (int c0 = 0; c0 < chunks; c0 += kScanBatch * 32) {
      int32_t v[kScanBatch];
#pragma unroll
      for (int b = 0; b < kScanBatch; ++b) {
        const int c = c0 + 32 * b + lane;
        v[b] = c < chunks ? counts[c] : 0;
      }
#pragma unroll
      for (int b = 0; b < kScanBatch; ++b) {
        const int32_t incl = warp_inclusive_sum(v[b], lane);
        const int c = c0 + 32 * b + lane;
        if (c < chunks) counts[c] = run + incl - v[b];
        run += __shfl_sync(0xFFFFFFFFu, incl, 31);
      }
    }
    if (lane == 0) offsets[e + 1] = run;
  }
  __syncthreads();
  // Exclusive scan of the totals: each thread a contiguous segment, then a scan of segments.
  constexpr int kMaxSeg = kMaxLocal / kScanThreads;
  const int seg = (E + kScanThreads - 1) / kScanThreads;  // <= kMaxSeg
  const int lo = min(E, static_cast<int>(threadIdx.x) * seg), hi = min(E, lo + seg);
  int32_t tot[kMaxSeg];
  int32_t mine = 0;
#pragma unroll
  for (int s = 0; s < kMaxSeg; ++s) {
    tot[s] = lo + s < hi ? offsets[lo + s + 1] : 0;
    mine += tot[s];
  }
  part[threadIdx.x] = mine;
  __syncthreads();  // also: every total is read before any offsets[] is overwritten below
  for (int off = 1; off < kScanThreads; off <<= 1) {
    const int32_t v = threadIdx.x >= static_cast<unsigned>(off) ? part[threadIdx.x - off] : 0;
    __syncthreads();
    part[threadIdx.x] += v;
    __syncthreads();
  }
  int32_t run = part[threadIdx.x] - mine;  // exclusive prefix of this segment
#pragma unroll
  for (int s = 0; s < kMaxSeg; ++s) {
    if (lo + s < hi) offsets[lo + s] = run;
    run += tot[s];
  }
  if (threadIdx.x == kScanThreads - 1) offsets[E] = part[kScanThreads - 1];
  if (E == 0 && threadIdx.x == 0) offsets[0] = 0;
  // scratch[c, e] stays relative to expert e's first row: the scatter adds offsets[e].
}

// kSingle: kNoSingle, no out_token (the kernel as it was before out_token existed: its
// single-pair work, ~60 instructions in each of the 32 unrolled steps, made it 35-80% slower,
// bench/NOTES.md G round 5); kSingleWindow, k divides 32: every token lies inside one 32-pair
// step (chunks start at multiples of 1024) and the test is a shifted ballot; kSingleAnyK: a
// token's pairs may straddle a step, then its ids are read again.
enum { kNoSingle = 0, kSingleWindow = 1, kSingleAnyK = 2 };
template <int kSingle>
__global__ void group_scatter_kernel(const int32_t* ids, const float* weights, int pairs, int k,
                                     int start, int E, const int32_t* scratch,
                                     const int32_t* offsets, int32_t* x_row, float* row_weight,
                                     int32_t* pair_pos, int32_t* out_token,
                                     int32_t* expert_has_out) {
  extern __shared__ int32_t next[];  // next sorted row per local expert, for this chunk
  pdl::wait();
  pdl::launch_dependents();
  const int lane = threadIdx.x;
  for (int e = lane; e < E; e += 32) {
    next[e] = offsets[e] + scratch[static_cast<size_t>(e) * gridDim.x + blockIdx.x];
  }
  const int base = blockIdx.x * kGroupChunk;
  const int end = min(base + kGroupChunk, pairs);
  // The chunk's ids and weights, all loads in flight before the (serial) placement walk.
  constexpr int kSteps = kGroupChunk / 32;
  int32_t id[kSteps];
  float w[kSteps];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int i = base + 32 * s + lane;
    id[s] = i < end ? ids[i] : -1;
    w[s] = i < end ? weights[i] : 0.0f;
  }
  __syncwarp();
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int i = base + 32 * s + lane;
    const int le = i < end ? local_expert(id[s], start, E) : -2;
    const unsigned same = __match_any_sync(~0u, le);
    int pos = -1;
    if (le >= 0) pos = next[le] + __popc(same & ((1u << lane) - 1u));
    __syncwarp();
    if (le >= 0 && (same & ((1u << lane) - 1u)) == 0) next[le] += __popc(same);
    __syncwarp();
    if (i < end) {
      pair_pos[i] = pos;
      if (pos >= 0) {
        x_row[pos] = i / k;
        row_weight[pos] = w[s];
      }
    }
    if constexpr (kSingle != kNoSingle) {
      const unsigned owned = __ballot_sync(~0u, le >= 0);
      const int w0 = base + 32 * s;
      bool single = false;
      if (le >= 0) {
        if constexpr (kSingle == kSingleAnyK) {
          single = token_owns_one_pair(owned, i, k, w0, min(w0 + 32, end), ids, start, E);
        } else {  // k is a power of two: the token's slots start at lane & ~(k - 1)
          single = one_owned_in_window(owned, lane & ~(k - 1), k);
        }
      }
      record_single_pairs(out_token, expert_has_out, pos, single, i / k, le, same, lane);
    }
  }
}

}  // namespace

cudaError_t launch_group(const GroupArgs& a, cudaStream_t stream, const char** failed_kernel) {
  const int pairs = a.T * a.k;
  const int E = a.expert_count;
  *failed_kernel = "group_hist";
  if (E <= 0 || E > kMaxLocal || (a.out_token && !a.expert_has_out) ||
      (a.beta_out && !a.linear_beta_out))
    return cudaErrorInvalidValue;
  const int chunks = group_num_chunks(pairs);
  const size_t smem = static_cast<size_t>(E) * sizeof(int32_t);
  if (chunks > 0) {
    if (cudaError_t e = pdl::launch_pdl(group_hist_kernel, dim3(chunks), dim3(256), smem, stream,
                                        a.ids, pairs, a.expert_start, E, a.scratch);
        e != cudaSuccess)
      return e;
  }
  *failed_kernel = "group_scan";
  const SituFill fill{a.per_expert_beta, a.beta,     a.per_expert_linear_beta, a.linear_beta,
                      a.beta_out,        a.linear_beta_out, a.h_ready,        a.expert_start};
  if (cudaError_t e = pdl::launch_pdl(group_scan_kernel, dim3(1), dim3(kScanThreads), 0, stream,
                                      chunks, E, a.scratch, a.expert_offsets,
                                      a.out_token ? a.expert_has_out : nullptr, fill);
      e != cudaSuccess)
    return e;
  if (chunks > 0) {
    *failed_kernel = "group_scatter";
    auto* scatter = !a.out_token      ? group_scatter_kernel<kNoSingle>
                    : 32 % a.k == 0 ? group_scatter_kernel<kSingleWindow>
                                    : group_scatter_kernel<kSingleAnyK>;
    if (cudaError_t e = pdl::launch_pdl(scatter,
                                        dim3(chunks), dim3(32), smem,
                                        stream, a.ids, a.weights, pairs, a.k, a.expert_start, E,
                                        a.scratch, a.expert_offsets, a.x_row, a.row_weight,
                                        a.pair_pos, a.out_token,
                                        a.out_token ? a.expert_has_out : nullptr);
        e != cudaSuccess)
      return e;
  }
  *failed_kernel = nullptr;
  return cudaSuccess;
}

}  // namespace mxmoe::smxx
