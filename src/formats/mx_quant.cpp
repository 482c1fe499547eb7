// mx_quant.cpp: MXFP4 / MXFP8 block quantization of rows, declared in mxmoe/mx_quant.h.
//
// Layouts: a row of K elements (K % 32 == 0) has K/32 UE8M0 scale bytes; MXFP8 stores K E4M3FN
// bytes, MXFP4 K/2 bytes with the even element in the low nibble.
// Per block: scale byte = mx_scale_byte(amax, max_code) (formats.h), element code =
// round-to-nearest-even of x / 2^E. Dividing by a power of two is exact in fp32 except where the
// quotient falls below 2^-126, and such a quotient is far below half the smallest E4M3/E2M1 step,
// so it rounds to (signed) zero either way: the codes are those of the exact real quotient.
// Limitations: host only (the GPU kernels use formats.h's codecs directly).
#include "mxmoe/mx_quant.h"

#include <cfloat>
#include <cmath>
#include <string>

namespace mxmoe {
namespace {

void check_k(int K, const char* fn) {
  if (K < 0 || K % kMxBlock != 0)
    throw Error(std::string(fn) + ": K = " + std::to_string(K) + " is not a multiple of 32");
}

// amax of one block; throws on NaN/Inf because they have no MX encoding (the scale would be
// NaN and every element of the block would be lost silently).
float block_amax(const float* x, int k0, const char* fn) {
  float amax = 0.0f;
  for (int i = 0; i < kMxBlock; ++i) {
    const float a = std::fabs(x[k0 + i]);
    if (!(a <= FLT_MAX))
      throw Error(std::string(fn) + ": element " + std::to_string(k0 + i) + " is " +
                  (a != a ? "NaN" : "Inf"));
    amax = a > amax ? a : amax;
  }
  return amax;
}

float scale_value(uint8_t byte, int block, const char* fn) {
  if (byte == kUe8m0Nan)
    throw Error(std::string(fn) + ": scale byte 255 (NaN) in block " + std::to_string(block));
  return ue8m0_to_float(byte);
}

// code_value * scale is exact unless it overflows fp32 (scale bytes >= 247 with large codes,
// never produced by the quantizers here); an overflow would silently become Inf, so refuse it.
float checked_product(float v, float scale, int k, const char* fn) {
  const float r = v * scale;
  if (!(std::fabs(r) <= FLT_MAX))
    throw Error(std::string(fn) + ": element " + std::to_string(k) + " overflows fp32");
  return r;
}

}  // namespace

void quantize_mxfp8_row(const float* x, int K, uint8_t* codes, uint8_t* scales) {
  check_k(K, "quantize_mxfp8_row");
  for (int b = 0; b < K / kMxBlock; ++b) {
    const int k0 = b * kMxBlock;
    const uint8_t sb = mx_scale_byte(block_amax(x, k0, "quantize_mxfp8_row"), kE4M3Max);
    scales[b] = sb;
    const float scale = ue8m0_to_float(sb);
    for (int i = 0; i < kMxBlock; ++i) codes[k0 + i] = float_to_e4m3(x[k0 + i] / scale);
  }
}

void quantize_mxfp4_row(const float* x, int K, uint8_t* packed, uint8_t* scales) {
  check_k(K, "quantize_mxfp4_row");
  for (int b = 0; b < K / kMxBlock; ++b) {
    const int k0 = b * kMxBlock;
    const uint8_t sb = mx_scale_byte(block_amax(x, k0, "quantize_mxfp4_row"), kE2M1Max);
    scales[b] = sb;
    const float scale = ue8m0_to_float(sb);
    for (int i = 0; i < kMxBlock; i += 2) {
      packed[(k0 + i) / 2] =
          e2m1_pack(float_to_e2m1(x[k0 + i] / scale), float_to_e2m1(x[k0 + i + 1] / scale));
    }
  }
}

void dequantize_mxfp8_row(const uint8_t* codes, const uint8_t* scales, int K, float* out) {
  check_k(K, "dequantize_mxfp8_row");
  for (int b = 0; b < K / kMxBlock; ++b) {
    const float scale = scale_value(scales[b], b, "dequantize_mxfp8_row");
    for (int i = 0; i < kMxBlock; ++i) {
      const int k = b * kMxBlock + i;
      if (e4m3_is_nan(codes[k]))
        throw Error("dequantize_mxfp8_row: NaN E4M3 code at element " + std::to_string(k));
      out[k] = checked_product(e4m3_to_float(codes[k]), scale, k, "dequantize_mxfp8_row");
    }
  }
}

void dequantize_mxfp4_row(const uint8_t* packed, const uint8_t* scales, int K, float* out) {
  check_k(K, "dequantize_mxfp4_row");
  // A table instead of e2m1_to_float per element: the CPU reference dequantizes whole experts.
  static const float* const lut = [] {
    static float t[16];
    for (int c = 0; c < 16; ++c) t[c] = e2m1_to_float(static_cast<uint8_t>(c));
    return t;
  }();
  for (int b = 0; b < K / kMxBlock; ++b) {
    const float scale = scale_value(scales[b], b, "dequantize_mxfp4_row");
    const int k0 = b * kMxBlock;
    if (scales[b] < 250) {  // 6 * 2^(249-127) < FLT_MAX: no overflow possible, skip the checks
      float tab[16];        // the block's 16 values: 16 exact products instead of 32
      for (int c = 0; c < 16; ++c) tab[c] = lut[c] * scale;
      for (int i = 0; i < kMxBlock; i += 2) {
        const uint8_t byte = packed[(k0 + i) / 2];
        out[k0 + i] = tab[byte & 15];
        out[k0 + i + 1] = tab[byte >> 4];
      }
    } else {
      for (int i = 0; i < kMxBlock; ++i)
        out[k0 + i] =
            checked_product(lut[e2m1_get(packed, k0 + i)], scale, k0 + i, "dequantize_mxfp4_row");
    }
  }
}

void fake_quantize_mxfp8_row(const float* x, int K, float* out) {
  check_k(K, "fake_quantize_mxfp8_row");
  for (int b = 0; b < K / kMxBlock; ++b) {
    const int k0 = b * kMxBlock;
    const uint8_t sb = mx_scale_byte(block_amax(x, k0, "fake_quantize_mxfp8_row"), kE4M3Max);
    const float scale = ue8m0_to_float(sb);
    // The quantizer never yields a NaN code or an overflowing product (|code| <= 448, scale
    // <= 2^120 for finite input), so no checks are needed on the way back.
    for (int i = 0; i < kMxBlock; ++i)
      out[k0 + i] = e4m3_to_float(float_to_e4m3(x[k0 + i] / scale)) * scale;
  }
}

}  // namespace mxmoe
