// src/cuda/smxx/quantize.cu: the expert input, from strided rows to the contiguous BF16 operand
// of GEMM1.
//
// Algorithm: one CTA per token row, one warp per 32-element MX block (lane = element), the
// block's amax by a warp max-reduction. w4a16: BF16 input is copied bit for bit, fp32 input is
// rounded to nearest even. w4a8: scale byte = mx_scale_byte(amax, 448), code = float_to_e4m3(x /
// 2^E), and the stored value is e4m3(code) * 2^E as BF16, which is exact (3 mantissa bits fit
// BF16's 7, and BF16 has fp32's exponent range). formats.h's codecs are the very functions the
// CPU reference uses, so the values match mx_quant.h bit for bit.
// Layouts: x row r at x + r * x_stride elements (any stride >= H: chunked-prefill views);
// xq [T, H] contiguous.
// Limitations: H % 32 == 0. NaN / Inf inputs give a NaN block (the GPU path cannot throw).
#include <cuda_bf16.h>

#include "mxmoe/formats.h"
#include "smxx/glue.h"

namespace mxmoe::smxx {
namespace {

constexpr int kWarps = 8;

__device__ __forceinline__ float load_x(const void* x, bool f32, size_t i) {
  if (f32) return static_cast<const float*>(x)[i];
  return bf16_to_float(static_cast<const uint16_t*>(x)[i]);
}

__global__ void __launch_bounds__(kWarps * 32)
    quantize_input_kernel(const void* x, bool x_is_f32, int64_t x_stride, int H, bool mxfp8,
                          uint16_t* xq) {
  const int row = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t in_base = static_cast<size_t>(row) * static_cast<size_t>(x_stride);
  uint16_t* out = xq + static_cast<size_t>(row) * H;
  for (int b = warp; b < H / kMxBlock; b += kWarps) {
    const int col = b * kMxBlock + lane;
    const float v = load_x(x, x_is_f32, in_base + col);
    if (!mxfp8) {
      // fp32 -> BF16 RNE; a BF16 input round-trips unchanged.
      out[col] = x_is_f32 ? float_to_bf16(v)
                          : static_cast<const uint16_t*>(x)[in_base + col];
      continue;
    }
    float amax = fabsf(v);
    if (amax != amax) amax = INFINITY;  // NaN poisons the block like the scale rule says
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, off));
    // The same operations as mx_quant.cpp (x / scale, code * scale): IEEE division and a
    // product by a power of two, so device and host agree bit for bit. Byte 255 (NaN/Inf
    // block) gives a NaN scale and so NaN values.
    const float scale = ue8m0_to_float(mx_scale_byte(amax, kE4M3Max));
    const uint8_t code = float_to_e4m3(v / scale);
    out[col] = float_to_bf16(e4m3_to_float(code) * scale);
  }
}

}  // namespace

cudaError_t launch_quantize_input(const void* x, bool x_is_f32, int64_t x_stride, int T, int H,
                                  bool mxfp8, __nv_bfloat16* xq, cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  quantize_input_kernel<<<T, kWarps * 32, 0, stream>>>(x, x_is_f32, x_stride, H, mxfp8,
                                                       reinterpret_cast<uint16_t*>(xq));
  return cudaGetLastError();
}

}  // namespace mxmoe::smxx
