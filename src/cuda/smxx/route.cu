// src/cuda/smxx/route.cu: Kimi-K3 routing on the GPU (the CPU reference route_kimi is the spec).
//
// Algorithm: one warp per token, route_warp.cuh's route_token_warp (top-k by k rounds of warp
// argmax over order-preserving integer keys; ties to the lower id; NaN keys: NaN weights for
// that token, see there). Deterministic: no atomics, a fixed reduction tree.
// Layouts: logits row t at logits + t * logits_stride; ids / weights [T, k] contiguous.
// Launched with PDL (smxx/pdl.cuh): waits before reading the logits.
// Limitations: E <= kRouteMaxExperts (2 warps' keys in 48 KB of shared memory), k <= 64.
// Shared memory per warp: route_scratch_words (glue.h).
// sigmoid is formats.h's situ_sigmoid (1 / (1 + expf(-z))); device expf may differ from the
// host's by an ulp, so exact-tie choices between host and device can differ only at such ulps.
#include "smxx/glue.h"
#include "smxx/pdl.cuh"
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

}  // namespace

cudaError_t launch_route_kimi(const float* logits, int64_t logits_stride, const float* bias,
                              int T, int E, int k, bool renormalize, float scaling,
                              int32_t* ids, float* weights, cudaStream_t stream,
                              int reg_experts) {
  if (T <= 0) return cudaSuccess;
  if (E <= 0 || E > kRouteMaxExperts || k <= 0 || k > 64 || k > E) return cudaErrorInvalidValue;
  const int blocks = (T + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int words = route_scratch_words(E, reg_experts);
  const size_t smem = static_cast<size_t>(kWarpsPerBlock) * words * sizeof(uint32_t);
  return pdl::launch_pdl(route_kimi_kernel, dim3(blocks), dim3(kWarpsPerBlock * 32), smem, stream,
                         logits, logits_stride, bias, T, E, k, renormalize, scaling, ids, weights,
                         reg_experts, words);
}

}  // namespace mxmoe::smxx
