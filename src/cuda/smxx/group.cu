// src/cuda/smxx/group.cu: grouping of the T*k token-expert pairs by local expert (EP filter +
// stable counting sort), deterministic and sized only by T*k (graph-capturable).
//
// Algorithm (pair i = t*k + j, local expert le = id - expert_start when owned; chunks of
// kGroupChunk pairs):
//  1. group_rank : one CTA per chunk; each pair's rank among the chunk's earlier pairs of its
//                  expert goes to pair_pos[i] (-1 if not owned), the chunk's count per expert to
//                  scratch[le, c] (expert-major, so the scan reads an expert's counts as
//                  contiguous lines). The chunk's 32-pair steps are split among `walkers`
//                  warps (as many as shared memory holds a counter array for: 8 up to 1530
//                  local experts); a walker takes its steps in order, and lanes with the same
//                  expert find each other with __match_any_sync and rank by lane order; then a
//                  scan across the walkers' counters per expert. With out_token it also tests
//                  whether each pair's token owns no other pair and flags the rank and the
//                  chunk's count (kSingleFlag). (One warp walking all 32 steps of its chunk
//                  while also placing the pairs took ~13 us at EP16 T=16384, bench/NOTES.md G
//                  round 7.)
//  2. group_scan : one CTA; per expert an exclusive scan along the chunks, then an exclusive
//                  scan of the per-expert totals -> expert_offsets[0..E]; scratch[le, c]
//                  becomes chunk c's first row of expert le, counted from the expert's first
//                  row (expert_offsets[le]); expert_has_out[le] = any chunk's flag. It also
//                  writes the local SiTU parameters when asked (GroupArgs::situ: a kernel
//                  of their own cost a launch and ~3 us, bench/NOTES.md G round 6).
//  3. group_place: one thread per pair: row = offsets[le] + scratch[le, c] + rank, then
//                  pair_pos / x_row / row_weight (and out_token) at that row. So rows are
//                  ordered by (expert, token, slot): stable.
// Outputs: x_row[p] = token, row_weight[p] = routing weight of sorted row p (p < offsets[E]);
// pair_pos[i] = sorted row of pair i, or -1 (id -1, another rank's id, or any id out of range);
// when asked, out_token[p] = the token if it owns no other pair (GEMM2 then writes its out row
// itself: smxx/gemm2_store.cuh), else -1, and expert_has_out[e] = 1 if any of expert e's rows
// has one, else 0. No atomics in global memory (the placement's integer atomicOr per warp and
// expert on expert_has_out, every warp's at once: bench/NOTES.md G round 8).
// Launched with PDL (smxx/pdl.cuh): each kernel waits before touching its predecessor's data.
// Limitations: expert_count <= kMaxLocal (one counter array and E bits in 48 KB of shared
// memory).
#include "smxx/cta_scan.cuh"
#include "smxx/glue.h"
#include "smxx/group_pairs.cuh"
#include "smxx/pdl.cuh"
#include "smxx/situ_fill.cuh"
#include "smxx/warp_scan.cuh"

namespace mxmoe::smxx {
namespace {

constexpr int kMaxLocal = 8192;
constexpr int kScanThreads = 1024;
constexpr int kScanRounds = 8;  // 32-chunk groups per expert a scan warp loads at once
constexpr int kRankThreads = 256;
constexpr int kRankSmemInts = 12288;  // 48 KB: no opt-in attribute (graph-capture friendly)
constexpr int kChunkSteps = kGroupChunk / 32;
constexpr int kPlaceThreads = 256;
// group_rank -> group_scan / group_place: a pair's rank (pair_pos) and a chunk's count per
// expert (scratch) are below kGroupChunk; bit 30 says "the pair's token owns no other pair" /
// "one of the chunk's pairs of this expert is such a pair" (then group_scan sets
// expert_has_out, group_place out_token, without atomics in global memory).
constexpr int32_t kSingleFlag = 1 << 30;
static_assert(kGroupChunk % 32 == 0, "a chunk is walked 32 pairs at a time");
static_assert(kGroupChunk < kSingleFlag, "ranks and counts stay below the flag bit");
static_assert(kMaxLocal + kMaxLocal / 32 <= kRankSmemInts,
              "one walker's counters and the single-pair bits must fit shared memory");

// Walkers (warps) per chunk for E local experts: a power of two, at most 8, with one E-counter
// array each plus E bits in kRankSmemInts. Each walks kChunkSteps / walkers consecutive steps.
int rank_walkers(int E) {
  int w = 8;
  while (w > 1 && w * E + (E + 31) / 32 > kRankSmemInts) w /= 2;
  return w;
}

// kSingle: kNoSingle, no out_token; kSingleWindow, k divides 32: every token lies inside one
// 32-pair step (steps start at multiples of 32) and the test is a shifted ballot; kSingleAnyK:
// a token's pairs may straddle a step, then its ids are read again.
enum { kNoSingle = 0, kSingleWindow = 1, kSingleAnyK = 2 };

template <int kSteps, int kSingle>  // 32-pair steps per walker; walkers = kChunkSteps / kSteps
__global__ void __launch_bounds__(kRankThreads)
    group_rank_kernel(const int32_t* ids, int pairs, int k, int start, int E, int32_t* scratch,
                      int32_t* pair_pos) {
  constexpr int kWalkers = kChunkSteps / kSteps;
  static_assert(kWalkers * 32 <= kRankThreads, "every walker is a warp of the CTA");
  extern __shared__ int32_t cnt[];  // [kWalkers][E]: walker w's count per expert; then E bits
  uint32_t* single_bits = reinterpret_cast<uint32_t*>(cnt + kWalkers * E);
  const int bit_words = kSingle != kNoSingle ? (E + 31) / 32 : 0;
  pdl::wait();
  pdl::launch_dependents();
  for (int e = threadIdx.x; e < kWalkers * E + bit_words; e += kRankThreads) cnt[e] = 0;
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int base = blockIdx.x * kGroupChunk + warp * kSteps * 32;  // this walker's first pair
  const int end = min(blockIdx.x * kGroupChunk + kGroupChunk, pairs);
  int le[kSteps], rank[kSteps];
  if (warp < kWalkers) {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {  // all loads in flight before the serial walk
      const int i = base + 32 * s + lane;
      le[s] = i < end ? local_expert(ids[i], start, E) : -1;
    }
    int32_t* mine = cnt + warp * E;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const unsigned same = __match_any_sync(~0u, le[s]);
      const unsigned before = same & ((1u << lane) - 1u);
      rank[s] = le[s] >= 0 ? mine[le[s]] + __popc(before) : -1;
      __syncwarp();
      if (le[s] >= 0 && before == 0) mine[le[s]] += __popc(same);
      __syncwarp();
      if constexpr (kSingle != kNoSingle) {
        const unsigned owned = __ballot_sync(~0u, le[s] >= 0);
        bool single = false;
        if (le[s] >= 0) {
          const int i = base + 32 * s + lane, w0 = base + 32 * s;
          if constexpr (kSingle == kSingleAnyK) {
            single = token_owns_one_pair(owned, i, k, w0, min(w0 + 32, end), ids, start, E);
          } else {  // k is a power of two: the token's slots start at lane & ~(k - 1)
            single = one_owned_in_window(owned, lane & ~(k - 1), k);
          }
        }
        if (single) {
          rank[s] |= kSingleFlag;
          atomicOr(single_bits + (le[s] >> 5), 1u << (le[s] & 31));  // shared memory
        }
      }
    }
  }
  __syncthreads();
  // Per expert: the walkers' counts become exclusive prefixes; the total is the chunk's count.
  for (int e = threadIdx.x; e < E; e += kRankThreads) {
    int32_t run = 0;
#pragma unroll
    for (int w = 0; w < kWalkers; ++w) {
      const int32_t v = cnt[w * E + e];
      cnt[w * E + e] = run;
      run += v;
    }
    if (kSingle != kNoSingle && ((single_bits[e >> 5] >> (e & 31)) & 1u)) run |= kSingleFlag;
    scratch[static_cast<size_t>(e) * gridDim.x + blockIdx.x] = run;
  }
  __syncthreads();
  if (warp < kWalkers) {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int i = base + 32 * s + lane;
      if (i < end) pair_pos[i] = le[s] >= 0 ? rank[s] + cnt[warp * E + le[s]] : -1;
    }
  }
}

__global__ void __launch_bounds__(kScanThreads)
    group_scan_kernel(int chunks, int E, int32_t* scratch, int32_t* offsets,
                      int32_t* expert_has_out, SituFill fill, int start) {
  __shared__ int32_t totals[kMaxLocal];  // per expert, from the scans along the chunks
  __shared__ int32_t warp_sums[kScanThreads / 32];
  pdl::wait();
  pdl::launch_dependents();
  if (fill.beta_out) fill_situ(fill, start, E, threadIdx.x, blockDim.x);
  // Per expert: an exclusive scan along the chunks; the total goes to totals[e], the OR of the
  // chunks' single-pair flags to expert_has_out[e]. A warp takes one expert at a time (e = warp,
  // warp + 32, ...; three at once were slower at 224 experts: their scans ran one after another,
  // bench/NOTES.md G round 8), lane l chunk c0 + 32 b + l (coalesced loads and stores),
  // kScanRounds x 32 chunks per round with all loads in flight, then one warp scan per b. (Lane
  // l taking 8 consecutive chunks instead made every store instruction touch 32 sectors: the one
  // CTA's scan took 12.5 us at 56 experts and 33 us at 224, T=16384, G round 8; a serial walk
  // down 256 chunks, one dependent load at a time, took ~80 us.)
  constexpr int kWarps = kScanThreads / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int e = warp; e < E; e += kWarps) {
    int32_t* counts = scratch + static_cast<size_t>(e) * chunks;
    int32_t run = 0;
    uint32_t flags = 0u;
    for (int c0 = 0; c0 < chunks; c0 += 32 * kScanRounds) {
      int32_t v[kScanRounds];
#pragma unroll
      for (int b = 0; b < kScanRounds; ++b) {
        const int c = c0 + 32 * b + lane;
        v[b] = c < chunks ? counts[c] : 0;
      }
#pragma unroll
      for (int b = 0; b < kScanRounds; ++b) {
        flags |= static_cast<uint32_t>(v[b]);
        const int32_t x = v[b] & ~kSingleFlag;
        const int32_t incl = warp_inclusive_sum(x, lane);
        const int c = c0 + 32 * b + lane;
        if (c < chunks) counts[c] = run + incl - x;
        run += __shfl_sync(0xFFFFFFFFu, incl, 31);
      }
    }
    const uint32_t any = __reduce_or_sync(0xFFFFFFFFu, flags);
    if (lane == 0) {
      totals[e] = run;
      if (expert_has_out)
        expert_has_out[e] = (any & static_cast<uint32_t>(kSingleFlag)) != 0u ? 1 : 0;
    }
  }
  __syncthreads();
  // Exclusive scan of the totals into offsets[0..E].
  cta_exclusive_scan<kScanThreads, kMaxLocal / kScanThreads>(
      E, warp_sums, [&](int e) { return totals[e]; }, [&](int e, int32_t v) { offsets[e] = v; });
  // scratch[e, c] stays relative to expert e's first row: group_place adds offsets[e].
}

using RankKernel = void (*)(const int32_t*, int, int, int, int, int32_t*, int32_t*);
template <int kSteps>
RankKernel rank_kernel(int single) {
  return single == kNoSingle       ? group_rank_kernel<kSteps, kNoSingle>
         : single == kSingleWindow ? group_rank_kernel<kSteps, kSingleWindow>
                                   : group_rank_kernel<kSteps, kSingleAnyK>;
}

// One thread per pair; out_token (may be null) from group_rank's single-pair flag.
__global__ void __launch_bounds__(kPlaceThreads)
    group_place_kernel(const int32_t* ids, const float* weights, int pairs, int k, int start, int E,
                       int chunks, const int32_t* scratch, const int32_t* offsets, int32_t* x_row,
                       float* row_weight, int32_t* pair_pos, int32_t* out_token) {
  pdl::wait();
  pdl::launch_dependents();
  const int i = blockIdx.x * kPlaceThreads + threadIdx.x;
  if (i >= pairs) return;
  const int le = local_expert(ids[i], start, E);
  const int32_t rank = pair_pos[i];  // group_rank's rank within the chunk (| kSingleFlag)
  const float w = weights[i];
  int pos = -1;
  if (le >= 0) {
    pos = offsets[le] + scratch[static_cast<size_t>(le) * chunks + i / kGroupChunk] +
          (rank & ~kSingleFlag);
    x_row[pos] = i / k;
    row_weight[pos] = w;
    if (out_token) out_token[pos] = (rank & kSingleFlag) != 0 ? i / k : -1;
  }
  pair_pos[i] = pos;
}

}  // namespace

cudaError_t launch_group(const GroupArgs& a, cudaStream_t stream, const char** failed_kernel) {
  const int pairs = a.T * a.k;
  const int E = a.expert_count;
  *failed_kernel = "group_rank";
  if (E <= 0 || E > kMaxLocal || (a.out_token && !a.expert_has_out) ||
      (a.situ.beta_out && !a.situ.linear_beta_out))
    return cudaErrorInvalidValue;
  const int chunks = group_num_chunks(pairs);
  if (chunks > 0) {
    const int walkers = rank_walkers(E);
    const int single = !a.out_token ? kNoSingle : 32 % a.k == 0 ? kSingleWindow : kSingleAnyK;
    const RankKernel rank = walkers == 8   ? rank_kernel<kChunkSteps / 8>(single)
                            : walkers == 4 ? rank_kernel<kChunkSteps / 4>(single)
                            : walkers == 2 ? rank_kernel<kChunkSteps / 2>(single)
                                           : rank_kernel<kChunkSteps>(single);
    const size_t smem = (static_cast<size_t>(walkers) * E + (E + 31) / 32) * sizeof(int32_t);
    if (cudaError_t e = pdl::launch_pdl(rank, dim3(chunks), dim3(kRankThreads), smem, stream, a.ids,
                                        pairs, a.k, a.expert_start, E, a.scratch, a.pair_pos);
        e != cudaSuccess)
      return e;
  }
  *failed_kernel = "group_scan";
  if (cudaError_t e = pdl::launch_pdl(
          group_scan_kernel, dim3(1), dim3(kScanThreads), 0, stream, chunks, E, a.scratch,
          a.expert_offsets, a.out_token ? a.expert_has_out : nullptr, a.situ, a.expert_start);
      e != cudaSuccess)
    return e;
  if (chunks > 0) {
    *failed_kernel = "group_place";
    const int ctas = (pairs + kPlaceThreads - 1) / kPlaceThreads;
    if (cudaError_t e =
            pdl::launch_pdl(group_place_kernel, dim3(ctas), dim3(kPlaceThreads), 0, stream, a.ids,
                            a.weights, pairs, a.k, a.expert_start, E, chunks, a.scratch,
                            a.expert_offsets, a.x_row, a.row_weight, a.pair_pos, a.out_token);
        e != cudaSuccess)
      return e;
  }
  *failed_kernel = nullptr;
  return cudaSuccess;
}

}  // namespace mxmoe::smxx
