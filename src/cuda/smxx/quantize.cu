// src/cuda/smxx/quantize.cu: the expert input, from strided rows to the contiguous BF16 operand
// of GEMM1.
//
// Algorithm: one CTA per token row; each thread quantizes 8 consecutive elements with
// quantize_row.cuh (the routine the fused decode prologue shares), an MX block being 4
// consecutive lanes. w4a16: BF16 input is copied bit for bit, fp32 input is rounded to nearest
// even. w4a8: scale exponent E = mx_scale_exponent(amax, 448), code = float_to_e4m3(x / 2^E),
// stored value e4m3(code) * 2^E as BF16, which is exact (3 mantissa bits fit BF16's 7, and BF16
// has fp32's exponent range); computed by smxx/mxfp8_device.cuh (integer exponent, hardware
// E4M3 conversion), bit-identical to formats.h, so the values match mx_quant.h bit for bit.
// Layouts: x row r at x + r * x_stride elements (any stride >= H: chunked-prefill views);
// xq [T, H] contiguous. Launched with PDL (smxx/pdl.cuh): waits before reading x.
// Limitations: H % 32 == 0. NaN / Inf inputs give a NaN block (BF16 0x7FFF; the GPU path
// cannot throw).
#include <cuda_bf16.h>

#include "smxx/glue.h"
#include "smxx/pdl.cuh"
#include "smxx/quantize_row.cuh"

namespace mxmoe::smxx {
namespace {

constexpr int kThreads = 256;

template <bool kF32, bool kVec>
__global__ void __launch_bounds__(kThreads)
    quantize_input_kernel(const void* x, int64_t x_stride, int H, bool mxfp8, uint16_t* xq) {
  pdl::wait();
  pdl::launch_dependents();
  const int row = blockIdx.x;
  quantize_row<kF32, kVec>(x, static_cast<size_t>(row) * static_cast<size_t>(x_stride), H, mxfp8,
                           xq + static_cast<size_t>(row) * H, threadIdx.x, kThreads);
}

}  // namespace

cudaError_t launch_quantize_input(const void* x, bool x_is_f32, int64_t x_stride, int T, int H,
                                  bool mxfp8, __nv_bfloat16* xq, cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  if (H % 32 != 0) return cudaErrorInvalidValue;
  const bool vec = quantize_rows_vectorizable(x, x_is_f32, x_stride);
  auto kernel =
      x_is_f32 ? (vec ? quantize_input_kernel<true, true> : quantize_input_kernel<true, false>)
               : (vec ? quantize_input_kernel<false, true> : quantize_input_kernel<false, false>);
  return pdl::launch_pdl(kernel, dim3(T), dim3(kThreads), 0, stream, x, x_stride, H, mxfp8,
                         reinterpret_cast<uint16_t*>(xq));
}

}  // namespace mxmoe::smxx
