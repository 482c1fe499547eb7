// src/cuda/smxx/quantize_mxfp8_codes.cu: MXFP8 quantization of the expert input into E4M3 codes
// + UE8M0 scale bytes (quantize_mxfp8_codes.h), for the FP8 W4A8 GEMMs.
//
// Algorithm: one CTA per token row, one warp per 32-element MX block (lane = element), the
// block's amax by a warp max-reduction, then mxfp8_device.cuh's exponent and encoder, which are
// bit-identical to formats.h's mx_scale_byte / float_to_e4m3 of x / scale (its GPU test sweeps
// all 2^32 floats): the codes equal mx_quant.cpp's bit for bit (checked by
// test_sm90_fp8_gemm.cpp) and code * scale is quantize.cu's BF16 value.
// Limitations: H % 32 == 0.
#include <cuda_bf16.h>

#include "mxmoe/formats.h"
#include "smxx/mxfp8_device.cuh"
#include "smxx/pdl.cuh"
#include "smxx/quantize_mxfp8_codes.h"

namespace mxmoe::smxx {
namespace {

constexpr int kWarps = 8;

__global__ void __launch_bounds__(kWarps * 32)
    quantize_mxfp8_codes_kernel(const void* x, bool x_is_f32, int64_t x_stride, int H,
                                uint8_t* codes, uint8_t* scales) {
  pdl::wait();  // x may come from an earlier kernel of the chain
  const int row = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t in_base = static_cast<size_t>(row) * static_cast<size_t>(x_stride);
  uint8_t* out = codes + static_cast<size_t>(row) * H;
  uint8_t* sout = scales + static_cast<size_t>(row) * (H / kMxBlock);
  for (int b = warp; b < H / kMxBlock; b += kWarps) {
    const int col = b * kMxBlock + lane;
    const float v = x_is_f32 ? static_cast<const float*>(x)[in_base + col]
                             : bf16_to_float(static_cast<const uint16_t*>(x)[in_base + col]);
    float amax = fabsf(v);
    if (amax != amax) amax = INFINITY;
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, off));
    const int E = mxfp8_exponent(amax);  // == mx_scale_exponent(amax, 448), 128 for NaN/Inf
    out[col] = static_cast<uint8_t>(mxfp8_quantize2(v, 0.0f, E) & 0xFFu);
    if (lane == 0) sout[b] = static_cast<uint8_t>(E + kUe8m0Bias);
  }
}

}  // namespace

cudaError_t launch_quantize_mxfp8_codes(const void* x, bool x_is_f32, int64_t x_stride, int T,
                                        int H, uint8_t* codes, uint8_t* scales,
                                        cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  if (!x || !codes || !scales || H <= 0 || H % kMxBlock != 0 || x_stride < H)
    return cudaErrorInvalidValue;
  cudaError_t e = pdl::launch_pdl(quantize_mxfp8_codes_kernel, dim3(T), dim3(kWarps * 32), 0,
                                  stream, x, x_is_f32, x_stride, H, codes, scales);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

}  // namespace mxmoe::smxx
