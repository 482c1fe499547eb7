// src/cuda/smxx/combine.cu: the routing-weighted sum of the expert outputs.
//
// combine: out[t, :] = +0 + y[pair_pos[t*k + 0], :] + y[pair_pos[t*k + 1], :] + ... in slot order,
// in fp32, skipping -1 (GEMM2 already multiplied each row by its routing weight). One warp per
// token and column slice: lanes 0..k-1 read the token's slot positions, a ballot lists the
// owned slots, and for each 128-column chunk of the slice each lane sums 4 consecutive columns
// (16-byte loads and stores when H, the output stride and pointers allow it). The grid is
// (token groups, column slices) with a token loop (combine_grid.h): a decode step (T = 1)
// spreads its reads over H / 128 one-chunk slices, a prefill pass is a few waves of CTAs over
// whole rows (one CTA per token and chunk was CTA-launch bound: ~2 KB per CTA, ~160 us at
// T = 16384 on the H200, bench/NOTES.md G round 2). No atomics, so runs are
// bit-identical, and every output row is written (a token with no owned expert gets zeros),
// except, with skip_single, the rows of tokens that own exactly one pair: GEMM2 stored those
// (smxx/gemm2_store.cuh), bit for bit what this sum would give.
// Layouts: y [rows, H] contiguous (sorted pair rows); out row t at out + t * out_stride.
// Launched with PDL (smxx/pdl.cuh): waits before reading y / pair_pos.
// Limitations: k <= 64 (two ballots of 32 slots).
#include <algorithm>

#include "smxx/combine_grid.h"
#include "smxx/glue.h"
#include "smxx/glue_timeline.cuh"
#include "smxx/pdl.cuh"

namespace mxmoe::smxx {
namespace {

// (combine_grid.h)
constexpr int kWarps = kCombineWarps, kCols = kCombineCols, kSlice = kCombineChunk;

template <bool kVec>
__global__ void __launch_bounds__(kWarps * 32)
    combine_kernel(const float* y, int H, const int32_t* pair_pos, int T, int k, float* out,
                   int64_t out_stride, bool skip_single, int chunks) {
  const unsigned cta = blockIdx.y * gridDim.x + blockIdx.x;  // (the timeline's numbering)
  glue_stamp(cta, cta_timeline::kTlStart);  // (empty outside MXMOE_DECODE_TIMELINE builds)
  pdl::wait();
  glue_stamp(cta, cta_timeline::kTlWaited);
  pdl::launch_dependents();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int slice0 = blockIdx.y * chunks * kSlice;  // this CTA's first column
  for (int t = blockIdx.x * kWarps + warp; t < T; t += gridDim.x * kWarps) {
    const int32_t* pp = pair_pos + static_cast<size_t>(t) * k;
    const int32_t mine_lo = lane < k ? pp[lane] : -1;            // slots 0..31
    const int32_t mine_hi = 32 + lane < k ? pp[32 + lane] : -1;  // slots 32..63
    const unsigned live_lo = __ballot_sync(0xFFFFFFFFu, mine_lo >= 0);
    const unsigned live_hi = __ballot_sync(0xFFFFFFFFu, mine_hi >= 0);
    if (skip_single && __popc(live_lo) + __popc(live_hi) == 1) continue;  // GEMM2 wrote it
    float* o_row = out + static_cast<size_t>(t) * static_cast<size_t>(out_stride);
    for (int ci = 0; ci < chunks && slice0 + ci * kSlice < H; ++ci) {
      const int c0 = slice0 + ci * kSlice + lane * kCols;
      const int n = max(0, min(kCols, H - c0));
      float acc[kCols] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int half = 0; half < 2; ++half) {  // slots in ascending order
        const int32_t mine = half == 0 ? mine_lo : mine_hi;
        for (unsigned live = half == 0 ? live_lo : live_hi; live != 0u; live &= live - 1u) {
          const int p = __shfl_sync(0xFFFFFFFFu, mine, __ffs(live) - 1);
          const float* src = y + static_cast<size_t>(p) * H + c0;
          if constexpr (kVec) {
            if (n == kCols) {
              const float4 v = *reinterpret_cast<const float4*>(src);
              acc[0] += v.x;
              acc[1] += v.y;
              acc[2] += v.z;
              acc[3] += v.w;
            }
          } else {
            for (int i = 0; i < n; ++i) acc[i] += src[i];
          }
        }
      }
      float* o = o_row + c0;
      if constexpr (kVec) {
        if (n == kCols) *reinterpret_cast<float4*>(o) = make_float4(acc[0], acc[1], acc[2], acc[3]);
      } else {
        for (int i = 0; i < n; ++i) o[i] = acc[i];
      }
    }
  }
  glue_stamp(cta, cta_timeline::kTlExit);  // thread 0's tokens done
}

}  // namespace

cudaError_t combine_timeline_read(std::vector<uint64_t>* out) { return glue_timeline_read_tu(out); }
cudaError_t combine_timeline_reset(cudaStream_t stream) { return glue_timeline_reset_tu(stream); }

cudaError_t launch_combine(const float* y, int H, const int32_t* pair_pos, int T, int k, float* out,
                           int64_t out_stride, bool skip_single, cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  if (k <= 0 || k > 64) return cudaErrorInvalidValue;
  const bool vec = H % kCols == 0 && out_stride % kCols == 0 &&
                   reinterpret_cast<uintptr_t>(y) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const CombineGrid g = combine_grid(T, H);
  const dim3 grid(g.groups, g.slices);
  return vec ? pdl::launch_pdl(combine_kernel<true>, grid, dim3(kWarps * 32), 0, stream, y, H,
                               pair_pos, T, k, out, out_stride, skip_single, g.chunks)
             : pdl::launch_pdl(combine_kernel<false>, grid, dim3(kWarps * 32), 0, stream, y, H,
                               pair_pos, T, k, out, out_stride, skip_single, g.chunks);
}

}  // namespace mxmoe::smxx
