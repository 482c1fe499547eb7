// mxmoe/mx_quant.h: MXFP4 / MXFP8 block quantization of rows (host side).
//
// A row of K elements (K % 32 == 0) is cut into K/32 blocks. Each block gets one UE8M0 scale
// byte from the MX scale rule (formats.h: mx_scale_byte) and its elements are
// round-to-nearest-even of x / scale on the element grid. MXFP4 packs two E2M1 per byte, the low
// nibble first; MXFP8 stores one E4M3FN byte per element.
//
// Dequantization is exact: every (code, scale) pair is a float, and a BF16 whenever the scale
// exponent is within BF16's range (always true for the scales real models produce).
#pragma once

#include <cstdint>

#include "mxmoe/formats.h"

namespace mxmoe {

// Throws mxmoe::Error if K is not a multiple of 32 or x holds NaN/Inf.
void quantize_mxfp8_row(const float* x, int K, uint8_t* codes /*[K]*/, uint8_t* scales /*[K/32]*/);
void quantize_mxfp4_row(const float* x, int K, uint8_t* packed /*[K/2]*/,
                        uint8_t* scales /*[K/32]*/);

// Throws mxmoe::Error on a NaN scale byte (255) or a NaN E4M3 code.
void dequantize_mxfp8_row(const uint8_t* codes, const uint8_t* scales, int K, float* out);
void dequantize_mxfp4_row(const uint8_t* packed, const uint8_t* scales, int K, float* out);

// quantize then dequantize in one step: the values an MXFP8 consumer sees.
void fake_quantize_mxfp8_row(const float* x, int K, float* out);

}  // namespace mxmoe
