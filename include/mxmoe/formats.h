// mxmoe/formats.h: the scalar codecs of the MX formats, usable on host and device.
//
//   E2M1   (FP4): bit 3 sign, 2 exponent bits (bias 1), 1 mantissa bit.
//                 Magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}. Two per byte, LOW nibble first.
//   E4M3FN (FP8): bit 7 sign, 4 exponent bits (bias 7), 3 mantissa bits, no infinities,
//                 0x7F / 0xFF are NaN, max finite 448, smallest subnormal 2^-9.
//   UE8M0  scale: 2^(e - 127); e = 255 is NaN (OCP MX spec) and is rejected as bad input.
//   BF16:         the upper half of an IEEE fp32.
//
// Every encoder rounds to nearest, ties to even, and keeps the sign of zero. The MX scale rule
// (KIMI_K3.md, NVIDIA's quantizers): scale = 2^ceil(log2(amax / max_code)), so nothing clips.
//
// NOTES: all of these are exact functions of their inputs (no approximate math), so the CPU
// reference and the GPU kernels produce the same codes bit for bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "mxmoe/common.h"

namespace mxmoe {

constexpr int kMxBlock = 32;        // elements per MX scale
constexpr float kE2M1Max = 6.0f;    // largest E2M1 magnitude
constexpr float kE4M3Max = 448.0f;  // largest finite E4M3FN magnitude
constexpr uint8_t kUe8m0Nan = 255;  // the NaN scale byte
constexpr int kUe8m0Bias = 127;
constexpr int kScaleExpMin = -127;  // 2^-127 (byte 0)
constexpr int kScaleExpMax = 127;   // 2^127 (byte 254)

MXMOE_HD uint32_t float_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}
MXMOE_HD float bits_float(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

// ---- BF16 --------------------------------------------------------------------------------------
MXMOE_HD float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }
MXMOE_HD uint16_t float_to_bf16(float x) {
  uint32_t u = float_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
MXMOE_HD float round_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }

// ---- E2M1 --------------------------------------------------------------------------------------
MXMOE_HD float e2m1_to_float(uint8_t code) {
  const int mag = code & 7;
  const float v = mag < 2 ? 0.5f * mag : ldexpf(1.0f + 0.5f * (mag & 1), (mag >> 1) - 1);
  return (code & 8) ? -v : v;
}

// Round-to-nearest-even onto the E2M1 grid; |x| > 6 saturates to 6 (the MX scale rule never
// produces such inputs). NaN is not representable: callers reject it before encoding.
MXMOE_HD uint8_t float_to_e2m1(float x) {
  const float a = fabsf(x);
  uint8_t c;
  if (a <= 0.25f)
    c = 0;  // tie 0.25 -> 0 (even)
  else if (a < 0.75f)
    c = 1;  // tie 0.75 -> 1.0 (even)
  else if (a <= 1.25f)
    c = 2;  // tie 1.25 -> 1.0
  else if (a < 1.75f)
    c = 3;  // tie 1.75 -> 2.0
  else if (a <= 2.5f)
    c = 4;  // tie 2.5 -> 2.0
  else if (a < 3.5f)
    c = 5;  // tie 3.5 -> 4.0
  else if (a <= 5.0f)
    c = 6;  // tie 5.0 -> 4.0
  else
    c = 7;
  return static_cast<uint8_t>(c | ((float_bits(x) >> 28) & 8u));
}

// ---- E4M3FN ------------------------------------------------------------------------------------
MXMOE_HD bool e4m3_is_nan(uint8_t code) { return (code & 0x7F) == 0x7F; }
MXMOE_HD float e4m3_to_float(uint8_t code) {
  const int e = (code >> 3) & 15, m = code & 7;
  float v;
  if (e == 15 && m == 7)
    v = NAN;
  else if (e == 0)
    v = ldexpf(static_cast<float>(m), -9);
  else
    v = ldexpf(1.0f + m * 0.125f, e - 7);
  return (code & 0x80) ? -v : v;
}

// Round-to-nearest-even onto E4M3FN; |x| beyond 448 saturates to 448 (satfinite, as the
// hardware conversion does); NaN -> 0x7F.
MXMOE_HD uint8_t float_to_e4m3(float x) {
  const uint8_t sign = static_cast<uint8_t>((float_bits(x) >> 24) & 0x80u);
  const float a = fabsf(x);
  if (a != a) return 0x7F;
  if (a >= 464.0f) return sign | 0x7E;  // 464 is the tie between 448 and the (absent) 480
  uint8_t mag;
  if (a < 0.015625f) {  // below 2^-6: subnormal grid of step 2^-9 (q == 8 is 2^-6, code 0x08)
    mag = static_cast<uint8_t>(rintf(a * 512.0f));
  } else {
    int ex;
    frexpf(a, &ex);        // a = f * 2^ex, f in [0.5, 1)
    const int E = ex - 1;  // a = mant * 2^E, mant in [1, 2)
    const float mant = ldexpf(a, -E);
    int q = static_cast<int>(rintf((mant - 1.0f) * 8.0f));
    int be = E + 7;
    if (q == 8) {
      q = 0;
      ++be;
    }
    mag = static_cast<uint8_t>((be << 3) | q);
    if (mag > 0x7E) mag = 0x7E;
  }
  return sign | mag;
}

// ---- UE8M0 scales ------------------------------------------------------------------------------
MXMOE_HD float ue8m0_to_float(uint8_t e) {
  return e == kUe8m0Nan ? NAN : ldexpf(1.0f, static_cast<int>(e) - kUe8m0Bias);
}

// The MX scale exponent for a block: the smallest E with amax <= max_code * 2^E, clamped to
// [-127, 127]; amax == 0 gives -127 (byte 0). Returns 128 (-> byte 255, NaN) for NaN/Inf amax.
// Exact: the bound max_code * 2^E is a representable float for every E in range.
MXMOE_HD int mx_scale_exponent(float amax, float max_code) {
  if (!(amax <= 3.402823466e38f)) return 128;  // NaN or Inf
  if (amax == 0.0f) return kScaleExpMin;
  int ea, em;
  frexpf(amax, &ea);
  frexpf(max_code, &em);
  int E = ea - em;
  while (amax > ldexpf(max_code, E)) ++E;
  while (E > kScaleExpMin - 2 && amax <= ldexpf(max_code, E - 1)) --E;
  if (E < kScaleExpMin) E = kScaleExpMin;
  if (E > kScaleExpMax) E = kScaleExpMax;
  return E;
}
MXMOE_HD uint8_t mx_scale_byte(float amax, float max_code) {
  return static_cast<uint8_t>(mx_scale_exponent(amax, max_code) + kUe8m0Bias);
}

// ---- packing -----------------------------------------------------------------------------------
// Element k of a packed MXFP4 row: byte k/2, low nibble for even k.
MXMOE_HD uint8_t e2m1_get(const uint8_t* packed, int k) {
  const uint8_t b = packed[k >> 1];
  return (k & 1) ? static_cast<uint8_t>(b >> 4) : static_cast<uint8_t>(b & 15);
}
MXMOE_HD uint8_t e2m1_pack(uint8_t even, uint8_t odd) {
  return static_cast<uint8_t>((even & 15) | ((odd & 15) << 4));
}

// ---- SiTU-GLU ----------------------------------------------------------------------------------
// situ_glu(g, u) = [beta * tanh(g / beta) * sigmoid(g)] * [linear_beta * tanh(u / linear_beta)]
// Evaluated in fp32 with the accurate tanhf/expf (a few ulp on host and device), never with
// tanh.approx: its absolute error would be amplified by linear_beta = 25. FlashInfer's
// 2 * sigmoid(2z) - 1 form is avoided too, since it loses relative accuracy for small z.
MXMOE_HD float situ_sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }
MXMOE_HD float situ_glu(float g, float u, float beta, float linear_beta) {
  const float gate = beta * tanhf(g / beta) * situ_sigmoid(g);
  const float up = linear_beta * tanhf(u / linear_beta);
  return gate * up;
}

}  // namespace mxmoe
