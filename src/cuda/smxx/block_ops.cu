// src/cuda/smxx/block_ops.cu: the small kernels of the whole Kimi-K3 MoE block on the GPU (the
// CLI's --scope block path; the large products run in cuBLAS). The CPU reference_block is the
// spec; its rounding points are kept:
//   router_logits : logits[t, e] = fp32(sum_c x[t, c] * Wg[e, c]), accumulated in fp64 (one warp
//                   per (t, e), fixed lane order). fp64 rather than cuBLAS fp32 so that the top-k
//                   choice matches the reference's fp64 logits: a near-tie resolved differently
//                   would swap a whole expert.
//   rmsnorm_bf16  : out = BF16(r / sqrt(mean(r^2) + eps) * w) in fp64 with ONE rounding to BF16
//                   (round-to-odd to fp32, then RNE), sum of squares in a fixed tree order.
//   situ_bf16     : h = BF16(situ_glu(g, u, beta, linear_beta)) (formats.h, fp32).
//   add           : out += b (fp32).
// Limitations: deterministic but not fast (a CLI / check path, not the serving path).
#include <cuda_bf16.h>

#include "mxmoe/formats.h"
#include "smxx/block_ops.h"

namespace mxmoe::smxx {
namespace {

__global__ void router_logits_kernel(const uint16_t* x, const uint16_t* wg, int T, int E, int D,
                                     float* logits) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (warp >= T * E) return;
  const int t = warp / E, e = warp % E;
  const uint16_t* xr = x + static_cast<size_t>(t) * D;
  const uint16_t* wr = wg + static_cast<size_t>(e) * D;
  double acc = 0.0;
  for (int c = lane; c < D; c += 32)
    acc += static_cast<double>(bf16_to_float(xr[c])) * static_cast<double>(bf16_to_float(wr[c]));
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(~0u, acc, off);
  if (lane == 0) logits[static_cast<size_t>(t) * E + e] = static_cast<float>(acc);
}

// fp64 -> BF16 with a single rounding: round-to-odd to fp32 keeps the sticky bit.
__device__ __forceinline__ uint16_t bf16_from_double(double d) {
  float f = __double2float_rz(d);  // toward zero, then set the sticky bit if inexact
  if (isfinite(f) && static_cast<double>(f) != d) f = bits_float(float_bits(f) | 1u);
  return float_to_bf16(f);
}

constexpr int kNormThreads = 256;

__global__ void __launch_bounds__(kNormThreads)
    rmsnorm_kernel(const float* r, const uint16_t* w, int L, double eps, bool use_norm,
                   uint16_t* out) {
  __shared__ double part[kNormThreads];
  const float* row = r + static_cast<size_t>(blockIdx.x) * L;
  uint16_t* o = out + static_cast<size_t>(blockIdx.x) * L;
  if (!use_norm) {
    for (int c = threadIdx.x; c < L; c += kNormThreads) o[c] = float_to_bf16(row[c]);
    return;
  }
  double ss = 0;
  for (int c = threadIdx.x; c < L; c += kNormThreads) ss += static_cast<double>(row[c]) * row[c];
  part[threadIdx.x] = ss;
  __syncthreads();
  for (int s = kNormThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  const double inv = 1.0 / sqrt(part[0] / L + eps);
  for (int c = threadIdx.x; c < L; c += kNormThreads)
    o[c] = bf16_from_double(static_cast<double>(row[c]) * inv * bf16_to_float(w[c]));
}

__global__ void situ_kernel(const float* g, const float* u, size_t n, float beta, float lbeta,
                            uint16_t* h) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) h[i] = float_to_bf16(situ_glu(g[i], u[i], beta, lbeta));
}

__global__ void add_kernel(float* out, const float* b, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = out[i] + b[i];
}

unsigned blocks_for(size_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

}  // namespace

cudaError_t launch_router_logits(const uint16_t* x, const uint16_t* wg, int T, int E, int D,
                                 float* logits, cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  const size_t warps = static_cast<size_t>(T) * E;
  router_logits_kernel<<<blocks_for(warps * 32, 256), 256, 0, stream>>>(x, wg, T, E, D, logits);
  return cudaGetLastError();
}

cudaError_t launch_rmsnorm_bf16(const float* r, const uint16_t* w, int T, int L, double eps,
                                bool use_norm, uint16_t* out, cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  rmsnorm_kernel<<<T, kNormThreads, 0, stream>>>(r, w, L, eps, use_norm, out);
  return cudaGetLastError();
}

cudaError_t launch_situ_bf16(const float* g, const float* u, size_t n, float beta, float lbeta,
                             uint16_t* h, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  situ_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(g, u, n, beta, lbeta, h);
  return cudaGetLastError();
}

cudaError_t launch_add(float* out, const float* b, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  add_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, b, n);
  return cudaGetLastError();
}

}  // namespace mxmoe::smxx
