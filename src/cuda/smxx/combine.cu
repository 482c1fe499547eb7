// src/cuda/smxx/combine.cu: the routing-weighted sum of the expert outputs, and the small
// parameter fill the runtime needs.
//
// combine: out[t, :] = +0 + y[pair_pos[t*k + 0], :] + y[pair_pos[t*k + 1], :] + ... in slot order,
// in fp32, skipping -1 (GEMM2 already multiplied each row by its routing weight). Grid
// (token, column slice): each thread sums 4 consecutive columns (16-byte loads and stores when
// H, the output stride and pointer allow it), so a decode step (T = 1) spreads its
// k x H x 4 bytes of reads over several SMs instead of one. No atomics, so runs are
// bit-identical, and every output row is written (a token with no owned expert gets zeros).
// Layouts: y [rows, H] contiguous (sorted pair rows); out row t at out + t * out_stride.
// Launched with PDL (smxx/pdl.cuh): waits before reading y / pair_pos.
// Limitations: k <= 64 (the slot positions are staged in shared memory).
#include "smxx/glue.h"
#include "smxx/pdl.cuh"

namespace mxmoe::smxx {
namespace {

constexpr int kThreads = 128;
constexpr int kCols = 4;  // columns per thread

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    combine_kernel(const float* y, int H, const int32_t* pair_pos, int k, float* out,
                   int64_t out_stride) {
  __shared__ int32_t pos[64];
  pdl::wait();
  pdl::launch_dependents();
  const int t = blockIdx.x;
  if (threadIdx.x < k) pos[threadIdx.x] = pair_pos[static_cast<size_t>(t) * k + threadIdx.x];
  __syncthreads();
  float* o = out + static_cast<size_t>(t) * static_cast<size_t>(out_stride);
  const int c0 = (blockIdx.y * kThreads + threadIdx.x) * kCols;
  if (c0 >= H) return;
  if constexpr (kVec) {
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int j = 0; j < k; ++j) {
      const int p = pos[j];
      if (p < 0) continue;
      const float4 v = *reinterpret_cast<const float4*>(y + static_cast<size_t>(p) * H + c0);
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
    *reinterpret_cast<float4*>(o + c0) = acc;
  } else {
    float acc[kCols] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int n = min(kCols, H - c0);
    for (int j = 0; j < k; ++j) {
      const int p = pos[j];
      if (p < 0) continue;
      for (int i = 0; i < n; ++i) acc[i] += y[static_cast<size_t>(p) * H + c0 + i];
    }
    for (int i = 0; i < n; ++i) o[c0 + i] = acc[i];
  }
}

__global__ void fill_params_kernel(const float* per_a, float a, const float* per_b, float b,
                                   int start, int count, float* dst_a, float* dst_b) {
  pdl::wait();
  pdl::launch_dependents();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) {
    dst_a[i] = per_a ? per_a[start + i] : a;
    dst_b[i] = per_b ? per_b[start + i] : b;
  }
}

}  // namespace

cudaError_t launch_combine(const float* y, int H, const int32_t* pair_pos, int T, int k,
                           float* out, int64_t out_stride, cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  if (k <= 0 || k > 64) return cudaErrorInvalidValue;
  const bool vec = H % kCols == 0 && out_stride % kCols == 0 &&
                   reinterpret_cast<uintptr_t>(y) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const dim3 grid(T, (H + kThreads * kCols - 1) / (kThreads * kCols));
  return vec ? pdl::launch_pdl(combine_kernel<true>, grid, dim3(kThreads), 0, stream, y, H,
                               pair_pos, k, out, out_stride)
             : pdl::launch_pdl(combine_kernel<false>, grid, dim3(kThreads), 0, stream, y, H,
                               pair_pos, k, out, out_stride);
}

cudaError_t launch_fill_params(const float* per_expert_a, float scalar_a, const float* per_expert_b,
                               float scalar_b, int start, int count, float* dst_a, float* dst_b,
                               cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  return pdl::launch_pdl(fill_params_kernel, dim3((count + 255) / 256), dim3(256), 0, stream,
                         per_expert_a, scalar_a, per_expert_b, scalar_b, start, count, dst_a,
                         dst_b);
}

}  // namespace mxmoe::smxx
