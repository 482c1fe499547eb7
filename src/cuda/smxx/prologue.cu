// src/cuda/smxx/prologue.cu: the fused decode prologue: quantize + EP filter + stable group +
// SiTU parameter fill in ONE launch, for small T * k (decode), with outputs bit-identical to the
// separate kernels (quantize.cu, group.cu, combine.cu's fill). With GPU routing, route.cu's
// kernel runs first (prologue_plan's route_first) and this kernel groups its ids.
//
// Why: at decode sizes each of those kernels runs for ~1-2 us but costs a launch and a drain in
// the stream (7 launches before GEMM1); one launch of a few CTAs removes all but one of them.
//
// Algorithm (one grid, 512 threads per CTA):
//  - CTAs 1..Q quantize token rows r = blockIdx.x - 1 (+= Q) with quantize_row.cuh, the very
//    routine of quantize.cu, while
//  - CTA 0 fills the local beta / linear_beta and groups the T * k pairs: the pairs are cut
//    into `chunks` contiguous chunks (one warp each);
//    per-(chunk, local expert) counts in shared memory, a scan down the chunks and across the
//    experts gives expert_offsets and each chunk's first row per expert, and each warp walks its
//    chunk 32 pairs at a time in pair order (__match_any_sync, ranks by lane order). The result
//    is the unique stable order (expert, token, slot), so it equals group.cu's bit for bit.
// Why the routing is not in here (it was, for T <= 16, until the fifty-fourth session): its ~80 KB
// of unrolled code sat between the kernel's entry and the grouping, so after an L2 flush (a real
// layer's weight stream, and the bench's) the grouping ran on cold instruction fetches: ncu, the
// routing instance alone 12.7 us at EP16 T=1, ~200 of its warp-state samples "no instruction"
// at the grouping's branch joins. route.cu's kernel, then this one (the 32 KB ids instance, its
// quantize CTAs not waiting for the routing: rows_before_wait), end to end, w4a16, H100, same
// call, us (bench/NOTES.md, fifty-fourth session, call 7): EP16 T=1 32.1 -> 30.6, T=8 77.1 ->
// 73.6, T=16 108.8 -> 105.1; TP8xEP4 T=8 52.2 -> 50.2, T=16 73.9 -> 69.2; the one cost, TP8xEP4
// T=1 28.3 -> 28.6 and T=2 31.5 -> 32.3 (a launch more where the chain is shortest).
// Launched with PDL (smxx/pdl.cuh): CTA 0 waits for the predecessor first, the quantize CTAs too
// unless rows_before_wait (route_kimi ran first).
// Limitations: T * k <= kPrologueMaxPairs and the shared-memory bounds of prologue_plan (the
// dispatcher falls back to the separate kernels otherwise); H % 32 == 0; k <= 64.
#include <algorithm>
#include <climits>

#include "smxx/cta_scan.cuh"
#include "smxx/env_knob.h"
#include "smxx/glue.h"
#include "smxx/glue_timeline.cuh"
#include "smxx/group_pairs.cuh"
#include "smxx/pdl.cuh"
#include "smxx/quantize_row.cuh"
#include "smxx/situ_fill.cuh"

namespace mxmoe::smxx {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kSmemBudget = 48 * 1024;  // no opt-in attribute needed (graph-capture friendly)
// At most kQuantCtas CTAs quantize (or copy) the token rows, each looping over its rows. Each CTA
// used to take most of an SM's registers (512 threads; at 40 a thread, since the fifty-second
// session, they leave room), so the count also set how many SMs the decode GEMM1's CTAs, launched
// under PDL at the prologue's start, found free: with one CTA per token up to 128 (before),
// TP8xEP4 T=128 left GEMM1 3 free SMs and ran ~17 us longer than its kernels' sum. Same binary on
// an H100 (bench/NOTES.md, thirtieth session; us, w4a16, 128 -> 32): TP8xEP4 T=128 215.6 -> 200.8,
// T=192 224.5 -> 214.3, T=256 233.5 -> 223.6; EP16 T=192 387.8 -> 378.6; T <= 96 within +-0.9%
// (w4a8 included). MXMOE_PROLOGUE_QUANT_CTAS=n (1..kMaxQuantCtas) replaces it for same-binary A/Bs;
// read once, so the plan stays a function of sizes (graph-safe). Re-timed once the ids instance's
// CTAs co-reside with GEMM1's (H100, same call, fifty-third session): 16 and 64 were level with 32
// within 1 us at T = 16..512 but for 16 at TP8xEP4 T=128 (-2.4..-3.6) and T=256 w4a8 (+2.7), and 64
// at EP16 T=64 (+3.5..+4.3).
constexpr int kQuantCtas = 32;
constexpr int kMaxQuantCtas = 128;
int max_quant_ctas() {
  static const int cap = [] {
    const int v = env_int("MXMOE_PROLOGUE_QUANT_CTAS", 0);
    return v >= 1 && v <= kMaxQuantCtas ? v : kQuantCtas;
  }();
  return cap;
}
constexpr int kMaxScanSeg = 16;  // experts per thread in the offsets scan (<= 8192 / 512)

// Registers: 40 a thread, where the kernel took 128 while it held the router (and a router
// change had moved the ids path's decode times by +-1 us with no line of that path changed). At
// 40 x 512 a CTA does not fill an SM's register file, so GEMM1's CTAs, launched under PDL, share
// the prologue's SMs. Same call, H100, caller ids, w4a16 (bench/NOTES.md, fifty-second session,
// call 5, first of two passes): EP16 T=1 25.6 -> 24.0 us, T=2 36.4 -> 32.9, T=8 72.3 -> 68.9;
// TP8xEP4 T=1 23.6 -> 19.8. And where 33 CTAs used to fill 33 SMs (fifty-third session, call 1):
// EP16 T=16 103.1 -> 99.4, T=128 335.9 -> 326.7, T=256 387.3 -> 377.9; TP8xEP4 T=16 68.2 ->
// 63.0, T=256 221.3 -> 214.4; T=512 level.
template <bool kF32, bool kVec>
__global__ void __launch_bounds__(kThreads) prologue_kernel(PrologueArgs a) {
  extern __shared__ uint32_t smem[];
  __shared__ int32_t warp_sums[kWarps];
  glue_stamp(blockIdx.x, cta_timeline::kTlStart);  // (empty outside MXMOE_DECODE_TIMELINE builds)
  // The quantize CTAs read only x, written before the chain began: once this kernel is not the
  // chain's first (route_kimi ran before it), they may start before the wait (smxx/pdl.cuh says
  // why that holds), and the rows are quantized while the routing still runs.
  if (!a.rows_before_wait || blockIdx.x == 0) pdl::wait();
  glue_stamp(blockIdx.x, cta_timeline::kTlWaited);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (blockIdx.x == 0 && a.ids_ready != nullptr) {
    // The ids were final before this kernel (the caller's, or route_kimi's, which this grid's
    // wait above covers): released at once, before the dependents may launch.
    if (tid == 0) {
      *reinterpret_cast<volatile int32_t*>(a.ids_ready) = 1;
      __threadfence();
    }
    __syncthreads();
  }
  pdl::launch_dependents();

  if (blockIdx.x > 0) {  // ---- quantize CTAs ----
    for (int r = blockIdx.x - 1; r < a.T; r += gridDim.x - 1)
      quantize_row<kF32, kVec>(a.x, static_cast<size_t>(r) * static_cast<size_t>(a.x_stride), a.H,
                               a.mxfp8, a.xq + static_cast<size_t>(r) * a.H, tid, kThreads);
    glue_stamp(blockIdx.x, cta_timeline::kTlExit);  // thread 0's rows done
    return;
  }

  const int El = a.expert_count, k = a.k, P = a.T * a.k;
  // Chunks of a multiple of 32 pairs: with k dividing 32, no token straddles a 32-pair window of
  // the scatter below (group_pairs.cuh); the stable order does not depend on the chunking.
  const int S = (P + 32 * a.chunks - 1) / (32 * a.chunks) * 32;
  const int c_begin = warp * S, c_end = min(P, c_begin + S);
  // The caller's id and routing weight of this lane's first pair, requested before anything
  // else: their DRAM round trip runs under the SiTU fill and the counters' zeroing, and the
  // scatter's weight needs no second one (bench/NOTES.md D round 37).
  const int i_first = c_begin + lane;
  const bool early = warp < a.chunks && i_first < c_end;
  const int32_t id_first = early ? a.ids[i_first] : -1;
  const float w_first = early ? a.weights[i_first] : 0.0f;
  // ---- SiTU parameters ----
  fill_situ(a.situ, a.expert_start, El, tid, kThreads);

  // ---- grouping: counts per (chunk, local expert) ----
  int32_t* cnt = reinterpret_cast<int32_t*>(smem);  // [chunks][El]
  int32_t* off = cnt + a.chunks * El;               // [El + 1]
  for (int i = tid; i < a.chunks * El; i += kThreads) cnt[i] = 0;
  __syncthreads();
  if (warp < a.chunks)
    for (int i = c_begin + lane; i < c_end; i += 32) {
      const int le = local_expert(early && i == i_first ? id_first : a.ids[i], a.expert_start, El);
      if (le >= 0) atomicAdd(&cnt[warp * El + le], 1);  // integer: order-independent
    }
  __syncthreads();
  glue_stamp(0, cta_timeline::kTlData);  // timeline: the ids read and counted
  // Per expert: exclusive scan down the chunks; the total to off[e + 1] for now.
  for (int e = tid; e < El; e += kThreads) {
    int32_t run = 0;
    for (int c = 0; c < a.chunks; ++c) {
      const int32_t v = cnt[c * El + e];
      cnt[c * El + e] = run;
      run += v;
    }
    off[e + 1] = run;
  }
  __syncthreads();
  // Exclusive scan of the totals into off[0..El] (reads off[1..El] before it writes).
  cta_exclusive_scan<kThreads, kMaxScanSeg>(
      El, warp_sums, [&](int e) { return off[e + 1]; }, [&](int e, int32_t v) { off[e] = v; });
  __syncthreads();
  for (int e = tid; e <= El; e += kThreads) a.expert_offsets[e] = off[e];
  if (a.out_token)  // the scatter below ORs into it (after the barrier that follows)
    for (int e = tid; e < El; e += kThreads) a.expert_has_out[e] = 0;
  // Each chunk's first row per expert, absolute. (Adding off[le] in the scatter instead saves
  // this pass's instructions but puts one more dependent shared load in every 32-pair round:
  // ep16 T=1 +1.5 us end to end, bench/NOTES.md G round 11.)
  for (int i = tid; i < a.chunks * El; i += kThreads) cnt[i] += off[i % El];
  __syncthreads();
  glue_stamp(0, cta_timeline::kTlMath);  // timeline: the offsets written, the scatter next

  // ---- grouping: stable scatter, one warp per chunk, 32 pairs at a time in pair order ----
  if (warp < a.chunks) {
    int32_t* next = cnt + warp * El;
    for (int i0 = c_begin; i0 < c_end; i0 += 32) {
      const int i = i0 + lane;
      const int le =
          i < c_end ? local_expert(early && i == i_first ? id_first : a.ids[i], a.expert_start, El)
                    : -2;
      const unsigned same = __match_any_sync(~0u, le);
      const unsigned owned = __ballot_sync(~0u, le >= 0);
      const int pos = stable_row_step(le, same, lane, next);
      if (i < c_end) {
        a.pair_pos[i] = pos;
        if (pos >= 0) {
          a.x_row[pos] = i / k;
          a.row_weight[pos] = early && i == i_first ? w_first : a.weights[i];
        }
      }
      if (a.out_token) {
        const bool single = le >= 0 && token_owns_one_pair(owned, i, k, i0, min(i0 + 32, c_end),
                                                           a.ids, a.expert_start, El);
        record_single_pairs(a.out_token, a.expert_has_out, pos, single, i / k, le, same, lane);
      }
    }
  }
  glue_stamp(0, cta_timeline::kTlExit);  // thread 0 (warp 0: a scatter warp) done
}

}  // namespace

cudaError_t prologue_timeline_read(std::vector<uint64_t>* out) {
  return glue_timeline_read_tu(out);
}
cudaError_t prologue_timeline_reset(cudaStream_t stream) { return glue_timeline_reset_tu(stream); }

PrologueShape prologue_plan(int T, int k, int num_experts_total, int expert_count, bool routing) {
  PrologueShape s;
  const int64_t P = static_cast<int64_t>(T) * k;
  if (T <= 0 || k <= 0 || k > 64 || P > kPrologueMaxPairs || expert_count <= 0) return s;
  const int64_t El = expert_count;
  if ((El + kThreads - 1) / kThreads > kMaxScanSeg) return s;
  const int64_t words = kSmemBudget / 4;
  // Counters: chunks * El + El + 1 words; at least one chunk, at most one per warp, and no chunk
  // shorter than a warp's 32 pairs.
  int64_t chunks = (words - El - 1) / El;
  if (chunks < 1) return s;
  chunks = std::min<int64_t>({chunks, kWarps, (P + 31) / 32});
  if (routing && (num_experts_total <= 0 || k > num_experts_total)) return s;
  s.ok = true;
  s.route_first = routing;  // route.cu's kernel, then this one on its ids (the file's header)
  s.chunks = static_cast<int>(chunks);
  s.quant_ctas = std::min(T, max_quant_ctas());
  s.smem_bytes = 4 * static_cast<size_t>(chunks * El + El + 1);
  return s;
}

cudaError_t launch_prologue(const PrologueArgs& a, const PrologueShape& s, cudaStream_t stream) {
  if (!s.ok || a.T <= 0 || a.H % 32 != 0 || a.ids == nullptr || a.weights == nullptr ||
      (a.out_token != nullptr && a.expert_has_out == nullptr))
    return cudaErrorInvalidValue;
  PrologueArgs args = a;
  args.chunks = s.chunks;
  args.rows_before_wait = s.route_first;
  const bool vec = quantize_rows_vectorizable(a.x, a.x_is_f32, a.x_stride);
  auto kernel = a.x_is_f32 ? (vec ? prologue_kernel<true, true> : prologue_kernel<true, false>)
                           : (vec ? prologue_kernel<false, true> : prologue_kernel<false, false>);
  return pdl::launch_pdl(kernel, dim3(1 + s.quant_ctas), dim3(kThreads), s.smem_bytes, stream,
                         args);
}

}  // namespace mxmoe::smxx
