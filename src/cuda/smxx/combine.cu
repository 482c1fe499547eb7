// src/cuda/smxx/combine.cu: the routing-weighted sum of the expert outputs, and the small
// parameter fill the runtime needs.
//
// combine: out[t, :] = +0 + y[pair_pos[t*k + 0], :] + y[pair_pos[t*k + 1], :] + ... in slot order,
// in fp32, skipping -1 (GEMM2 already multiplied each row by its routing weight). One CTA per
// token, a thread per column (coalesced); no atomics, so runs are bit-identical, and every output row is
// written (a token with no owned expert gets zeros).
// Layouts: y [rows, H] contiguous (sorted pair rows); out row t at out + t * out_stride.
// Limitations: k <= 64 (the slot positions are staged in shared memory).
#include "smxx/glue.h"

namespace mxmoe::smxx {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    combine_kernel(const float* y, int H, const int32_t* pair_pos, int k, float* out,
                   int64_t out_stride) {
  __shared__ int32_t pos[64];
  const int t = blockIdx.x;
  if (threadIdx.x < k) pos[threadIdx.x] = pair_pos[static_cast<size_t>(t) * k + threadIdx.x];
  __syncthreads();
  float* o = out + static_cast<size_t>(t) * static_cast<size_t>(out_stride);
  for (int c = threadIdx.x; c < H; c += kThreads) {
    float acc = 0.0f;
    for (int j = 0; j < k; ++j) {
      const int p = pos[j];
      if (p >= 0) acc += y[static_cast<size_t>(p) * H + c];
    }
    o[c] = acc;
  }
}

__global__ void fill_params_kernel(const float* per_expert, float scalar, int start, int count,
                                   float* dst) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) dst[i] = per_expert ? per_expert[start + i] : scalar;
}

}  // namespace

cudaError_t launch_combine(const float* y, int H, const int32_t* pair_pos, int T, int k,
                           float* out, int64_t out_stride, cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  if (k <= 0 || k > 64) return cudaErrorInvalidValue;
  combine_kernel<<<T, kThreads, 0, stream>>>(y, H, pair_pos, k, out, out_stride);
  return cudaGetLastError();
}

cudaError_t launch_fill_params(const float* per_expert, float scalar, int start, int count,
                               float* dst, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  fill_params_kernel<<<(count + 255) / 256, 256, 0, stream>>>(per_expert, scalar, start, count,
                                                              dst);
  return cudaGetLastError();
}

}  // namespace mxmoe::smxx
