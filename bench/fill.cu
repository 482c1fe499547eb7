// bench/fill.cu: the benchmark's own small device kernels (device_util.h): random fills of the
// activations / dense operands and the ahead-of-time MXFP4 dequantization for the cuBLAS
// baselines. None of them is timed; they are plain grid-stride loops.
#include <cuda_runtime.h>

#include "device_util.h"
#include "mxmoe/formats.h"

namespace mxmoe::bench {
namespace {

__device__ __forceinline__ float hash_unit(uint64_t seed, size_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;  // [-1, 1)
}

__global__ void fill_bf16_kernel(uint16_t* p, size_t n, uint64_t seed, float amp) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    p[i] = float_to_bf16(amp * hash_unit(seed, i));
}

// Four independent 16-byte loads per thread before the stores: enough bytes in flight per SM to
// cover HBM latency with a grid of a few CTAs per SM.
__global__ void copy_v4_kernel(uint4* __restrict__ dst, const uint4* __restrict__ src, size_t n) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a;
    dst[i + stride] = b;
    dst[i + 2 * stride] = c;
    dst[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

__global__ void fill_e4m3_kernel(uint8_t* p, size_t n, uint64_t seed, float amp) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    p[i] = float_to_e4m3(amp * hash_unit(seed, i));
}

__global__ void fill_f32_kernel(float* p, size_t n, float v) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    p[i] = v;
}

// One thread per packed byte (two elements).
__global__ void dequant_bf16_kernel(const uint8_t* packed, const uint8_t* scales, int rows, int k,
                                    uint16_t* out) {
  const size_t n = static_cast<size_t>(rows) * k / 2;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const size_t r = i / (k / 2), c = 2 * (i % (k / 2));
    const float s = ue8m0_to_float(scales[r * (k / 32) + c / 32]);
    const uint8_t b = packed[i];
    out[r * k + c] = float_to_bf16(e2m1_to_float(b & 15) * s);
    out[r * k + c + 1] = float_to_bf16(e2m1_to_float(b >> 4) * s);
  }
}

// One block per row: the row's largest scale becomes the per-row fp32 factor, the rest is folded
// into the E4M3 values as a power of two (exact within the window in device_util.h).
__global__ void dequant_e4m3_kernel(const uint8_t* packed, const uint8_t* scales, int k,
                                    uint8_t* out, float* row_scale) {
  const int r = blockIdx.x, nb = k / 32;
  const uint8_t* sr = scales + static_cast<size_t>(r) * nb;
  __shared__ int smax;
  if (threadIdx.x == 0) {
    int m = 0;
    for (int j = 0; j < nb; ++j) m = max(m, static_cast<int>(sr[j]));
    smax = m;
    row_scale[r] = ue8m0_to_float(static_cast<uint8_t>(m));
  }
  __syncthreads();
  const uint8_t* pr = packed + static_cast<size_t>(r) * (k / 2);
  uint8_t* orow = out + static_cast<size_t>(r) * k;
  for (int i = threadIdx.x; i < k / 2; i += blockDim.x) {
    const float f = ldexpf(1.0f, static_cast<int>(sr[(2 * i) / 32]) - smax);
    orow[2 * i] = float_to_e4m3(e2m1_to_float(pr[i] & 15) * f);
    orow[2 * i + 1] = float_to_e4m3(e2m1_to_float(pr[i] >> 4) * f);
  }
}

// One thread per BF16 pair (cols is even).
__global__ void scale_bf16_rows_kernel(uint32_t* y, size_t rows, int cols,
                                       const int32_t* row_expert, const float* w_scale,
                                       bool per_col, const float* x_scale) {
  const size_t half = static_cast<size_t>(cols) / 2, n = rows * half;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const size_t r = i / half, c = 2 * (i % half);
    const float* ws = w_scale + static_cast<size_t>(row_expert[r]) * cols;
    const float xs = x_scale[r];
    const uint32_t v = y[i];
    const float a = bf16_to_float(static_cast<uint16_t>(v & 0xFFFF)) * (ws[per_col ? c : 0] * xs);
    const float b = bf16_to_float(static_cast<uint16_t>(v >> 16)) * (ws[per_col ? c + 1 : 0] * xs);
    y[i] = float_to_bf16(a) | static_cast<uint32_t>(float_to_bf16(b)) << 16;
  }
}

unsigned grid_for(size_t n) {
  const size_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 65536 ? (blocks ? blocks : 1) : 65536);
}

}  // namespace

void fill_bf16(uint16_t* p, size_t n, uint64_t seed, float amplitude, cudaStream_t s) {
  fill_bf16_kernel<<<grid_for(n), 256, 0, s>>>(p, n, seed, amplitude);
}
void fill_e4m3(uint8_t* p, size_t n, uint64_t seed, float amplitude, cudaStream_t s) {
  fill_e4m3_kernel<<<grid_for(n), 256, 0, s>>>(p, n, seed, amplitude);
}
void copy_kernel(void* dst, const void* src, size_t bytes, int num_sms, cudaStream_t s) {
  copy_v4_kernel<<<num_sms * 4, 512, 0, s>>>(static_cast<uint4*>(dst),
                                             static_cast<const uint4*>(src), bytes / 16);
}

void fill_f32(float* p, size_t n, float value, cudaStream_t s) {
  fill_f32_kernel<<<grid_for(n), 256, 0, s>>>(p, n, value);
}
void dequant_mxfp4_bf16(const uint8_t* packed, const uint8_t* scales, int rows, int k,
                        uint16_t* out, cudaStream_t s) {
  dequant_bf16_kernel<<<grid_for(static_cast<size_t>(rows) * k / 2), 256, 0, s>>>(packed, scales,
                                                                                  rows, k, out);
}
void dequant_mxfp4_e4m3(const uint8_t* packed, const uint8_t* scales, int rows, int k, uint8_t* out,
                        float* row_scale, cudaStream_t s) {
  dequant_e4m3_kernel<<<rows, 256, 0, s>>>(packed, scales, k, out, row_scale);
}

void scale_bf16_rows(uint16_t* y, size_t rows, int cols, const int32_t* row_expert,
                     const float* w_scale, bool per_col, const float* x_scale, cudaStream_t s) {
  const size_t n = rows * static_cast<size_t>(cols / 2);
  scale_bf16_rows_kernel<<<grid_for(n), 256, 0, s>>>(reinterpret_cast<uint32_t*>(y), rows, cols,
                                                     row_expert, w_scale, per_col, x_scale);
}

}  // namespace mxmoe::bench
