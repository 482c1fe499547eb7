// src/cuda/smxx/quantize_mxfp8_codes.h: the expert input quantized to MXFP8 as E4M3 codes plus
// UE8M0 scale bytes (internal), the activation operand of the FP8 W4A8 GEMMs (sm90/fp8_gemm.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mxmoe::smxx {

// x [T, H] (BF16 or fp32, row r at x + r * x_stride elements) -> codes [T, H] and scales
// [T, H/32], both contiguous: per 32 along H, scale byte = mx_scale_byte(amax, 448) and code =
// float_to_e4m3(x / 2^E): the same codes and bytes as mx_quant.h's quantize_mxfp8_row and the
// same values quantize.cu stores as BF16. NaN / Inf give scale byte 255 (no throw on the GPU).
// H % 32 == 0; codes 16-byte aligned. Launched with PDL (waits before reading x).
cudaError_t launch_quantize_mxfp8_codes(const void* x, bool x_is_f32, int64_t x_stride, int T,
                                        int H, uint8_t* codes, uint8_t* scales,
                                        cudaStream_t stream);

}  // namespace mxmoe::smxx
