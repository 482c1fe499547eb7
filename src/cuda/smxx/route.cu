// src/cuda/smxx/route.cu: Kimi-K3 routing on the GPU (the CPU reference route_kimi is the spec).
//
// Algorithm: one warp per token, route_warp.cuh's route_token_warp (top-k by k rounds of warp
// argmax over order-preserving integer keys; ties to the lower id; NaN keys: NaN weights for
// that token, see there). Deterministic: no atomics, a fixed reduction tree.
// Few tokens (T <= wide_tokens, register keys): one CTA of kRouteWideWarps = 8 warps per token
// instead (route_cta.cuh). Each warp computes 128 experts' keys (28 sigmoid chains a lane become
// 4) into shared memory, and warp 0 reads its lanes' 32 keys back and picks (route_pick_regs):
// the same keys, the same pick, so the same bits as one warp. At decode sizes the routine is on
// the chain's critical path (GEMM1 waits for the ids): on an H100 the wide CTAs took 2-5 us off
// the GPU router's end-to-end time at T = 1..16 and ~6 at T = 64-128, 16 warps no better than 8;
// from T = 512 on they lost (8 warps -0.6..+4 at 512, +4..+6 at 1024, +26 at 4096, where one
// warp per token already fills the GPU), hence kRouteWideTokens = 256 (bench/NOTES.md,
// fifty-fifth session, calls 3-4). The kernel is compiled for 128 registers (__maxnreg__), not
// for its CTA size: under __launch_bounds__(512) ptxas scheduled the pick ~45% slower
// (fifty-third session, call 6).
// Layouts: logits row t at logits + t * logits_stride; ids / weights [T, k] contiguous.
// Launched with PDL (smxx/pdl.cuh): waits before reading the logits.
// Limitations: E <= kRouteMaxExperts (2 warps' keys in 48 KB of shared memory), k <= 64.
// Shared memory per warp: route_scratch_words (glue.h).
// sigmoid is formats.h's situ_sigmoid (1 / (1 + expf(-z))); device expf may differ from the
// host's by an ulp, so exact-tie choices between host and device can differ only at such ulps.
#include "smxx/glue.h"
#include "smxx/pdl.cuh"
#include "smxx/route_cta.cuh"
#include "smxx/route_warp.cuh"

namespace mxmoe::smxx {
namespace {

constexpr int kWarpsPerBlock = 2;

__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    route_kimi_kernel(const float* logits, int64_t stride, const float* bias, int T, int E, int k,
                      bool renormalize, float scaling, int32_t* ids, float* weights,
                      int reg_experts, int scratch_words) {
  extern __shared__ uint32_t route_keys[];
  pdl::wait();
  pdl::launch_dependents();
  const int warp = threadIdx.x / 32;
  const int t = blockIdx.x * kWarpsPerBlock + warp;
  if (t >= T) return;  // whole warp leaves together: no block-wide barrier below
  route_token_warp(logits + static_cast<size_t>(t) * static_cast<size_t>(stride), bias, E, k,
                   renormalize, scaling, route_keys + static_cast<size_t>(warp) * scratch_words,
                   ids + static_cast<size_t>(t) * k, weights + static_cast<size_t>(t) * k,
                   reg_experts);
}

// One token per CTA of kRouteWideWarps warps (register keys, E <= kRouteRegMax): route_cta.cuh.
__global__ void __maxnreg__(128)
    route_kimi_wide_kernel(const float* logits, int64_t stride, const float* bias, int E, int k,
                           bool renormalize, float scaling, int32_t* ids, float* weights) {
  __shared__ uint32_t keys[kRouteRegMax];
  __shared__ alignas(8) uint32_t select_scratch[kRouteSelectWords];
  pdl::wait();
  pdl::launch_dependents();
  const int t = blockIdx.x;
  route_token_cta(logits + static_cast<size_t>(t) * static_cast<size_t>(stride), bias, E, k,
                  renormalize, scaling, keys, select_scratch, t, ids, weights);
}

}  // namespace

cudaError_t launch_route_kimi(const float* logits, int64_t logits_stride, const float* bias, int T,
                              int E, int k, bool renormalize, float scaling, int32_t* ids,
                              float* weights, cudaStream_t stream, int reg_experts,
                              int wide_tokens) {
  if (T <= 0) return cudaSuccess;
  if (E <= 0 || E > kRouteMaxExperts || k <= 0 || k > 64 || k > E) return cudaErrorInvalidValue;
  if (T <= wide_tokens && route_keys_in_registers(E, reg_experts)) {
    return pdl::launch_pdl(route_kimi_wide_kernel, dim3(T), dim3(kRouteWideWarps * 32), 0, stream,
                           logits, logits_stride, bias, E, k, renormalize, scaling, ids, weights);
  }
  const int blocks = (T + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int words = route_scratch_words(E, reg_experts);
  const size_t smem = static_cast<size_t>(kWarpsPerBlock) * words * sizeof(uint32_t);
  return pdl::launch_pdl(route_kimi_kernel, dim3(blocks), dim3(kWarpsPerBlock * 32), smem, stream,
                         logits, logits_stride, bias, T, E, k, renormalize, scaling, ids, weights,
                         reg_experts, words);
}

}  // namespace mxmoe::smxx
