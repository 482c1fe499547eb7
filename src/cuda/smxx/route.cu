// src/cuda/smxx/route.cu: Kimi-K3 routing on the GPU (the CPU reference route_kimi is the spec).
//
// Algorithm: one warp per token. The warp writes c[e] = sigmoid(logit[e]) + bias[e] for all E
// experts into shared memory, then picks the top k by k rounds of argmax: each lane scans its
// experts (e = lane, lane + 32, ...; ascending, so a strict > keeps the lower id on ties), then
// a shuffle reduction orders candidates by (value desc, id asc). The winner is retired with
// -inf (c is never -inf: s is in [0, 1] and the bias is finite). Weights use s alone (the bias
// only selects): w_j = s_j / (s_0 + ... + s_{k-1}) * scaling, summed in slot order in fp32.
// Deterministic: no atomics, a fixed reduction tree.
// Layouts: logits row t at logits + t * logits_stride; ids / weights [T, k] contiguous.
// Limitations: E <= kRouteMaxExperts (2 warps' scores in 48 KB of shared memory), k <= 64.
// sigmoid is formats.h's situ_sigmoid (1 / (1 + expf(-z))); device expf may differ from the
// host's by an ulp, so exact-tie choices between host and device can differ only at such ulps.
#include <cfloat>

#include "mxmoe/formats.h"
#include "smxx/glue.h"

namespace mxmoe::smxx {
namespace {

constexpr int kWarpsPerBlock = 2;

__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    route_kimi_kernel(const float* logits, int64_t stride, const float* bias, int T, int E, int k,
                      bool renormalize, float scaling, int32_t* ids, float* weights) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * kWarpsPerBlock + warp;
  if (t >= T) return;  // whole warp leaves together: no block-wide barrier below
  float* c = smem + static_cast<size_t>(warp) * E;
  const float* row = logits + static_cast<size_t>(t) * static_cast<size_t>(stride);
  for (int e = lane; e < E; e += 32) {
    const float s = situ_sigmoid(row[e]);
    c[e] = bias ? s + bias[e] : s;
  }
  __syncwarp();
  float sum = 0.0f;
  float my_s = 0.0f;  // lane j < k keeps slot j's sigmoid
  int32_t my_id = -1;
  for (int j = 0; j < k; ++j) {
    float best = -INFINITY;
    int best_id = INT_MAX;
    for (int e = lane; e < E; e += 32) {
      const float v = c[e];
      if (v > best) { best = v; best_id = e; }
    }
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(~0u, best, off);
      const int oid = __shfl_xor_sync(~0u, best_id, off);
      if (ov > best || (ov == best && oid < best_id)) { best = ov; best_id = oid; }
    }
    // NaN scores never win a comparison: fall back to the lowest unchosen id so k distinct
    // experts are still returned (the CPU reference rejects NaN logits as bad input).
    if (best_id == INT_MAX) {
      int cand = INT_MAX;
      for (int e = lane; e < E; e += 32)
        if (c[e] != -INFINITY) { cand = e; break; }
      for (int off = 16; off > 0; off >>= 1) cand = min(cand, __shfl_xor_sync(~0u, cand, off));
      best_id = cand;
    }
    const float s = situ_sigmoid(row[best_id]);
    sum += s;
    if (lane == j % 32 && j < 32) { my_s = s; my_id = best_id; }
    if (lane == 0) c[best_id] = -INFINITY;
    // Slots 32..63 are written directly by lane 0 (rare; keeps registers fixed).
    if (j >= 32 && lane == 0) {
      ids[static_cast<size_t>(t) * k + j] = best_id;
      weights[static_cast<size_t>(t) * k + j] = s;
    }
    __syncwarp();
  }
  if (lane < k && lane < 32) {
    ids[static_cast<size_t>(t) * k + lane] = my_id;
    // sum == 0 (every chosen sigmoid underflowed) gives weight 0, as route_kimi does, not NaN.
    weights[static_cast<size_t>(t) * k + lane] =
        renormalize ? (sum > 0.0f ? my_s / sum * scaling : 0.0f) : my_s * scaling;
  }
  if (k > 32) {
    __syncwarp();
    for (int j = 32 + lane; j < k; j += 32) {
      const size_t i = static_cast<size_t>(t) * k + j;
      weights[i] = renormalize ? (sum > 0.0f ? weights[i] / sum * scaling : 0.0f)
                               : weights[i] * scaling;
    }
  }
}

}  // namespace

cudaError_t launch_route_kimi(const float* logits, int64_t logits_stride, const float* bias,
                              int T, int E, int k, bool renormalize, float scaling,
                              int32_t* ids, float* weights, cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  if (E <= 0 || E > kRouteMaxExperts || k <= 0 || k > 64 || k > E) return cudaErrorInvalidValue;
  const int blocks = (T + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const size_t smem = static_cast<size_t>(kWarpsPerBlock) * E * sizeof(float);
  route_kimi_kernel<<<blocks, kWarpsPerBlock * 32, smem, stream>>>(
      logits, logits_stride, bias, T, E, k, renormalize, scaling, ids, weights);
  return cudaGetLastError();
}

}  // namespace mxmoe::smxx
