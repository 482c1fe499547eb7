// src/cuda/smxx/mxfp8_device.cuh: the MXFP8 (E4M3 + UE8M0 per 32) quantizer as fast device
// functions, bit-identical to formats.h's scalar codecs (the tests compare codes).
//
// API (all __device__, sm_89+ for the cvt instructions; mxmoe builds sm_90a only):
//   int      mxfp8_exponent(float amax)
//              == mx_scale_exponent(amax, kE4M3Max) for EVERY float amax (negative, +-0,
//              subnormal, FLT_MAX, +-Inf, NaN): E in [-127, 127], or 128 for NaN / +Inf amax.
//              Scale byte = E + 127.
//   float    mxfp8_pow2(int E)          2^E exactly, E in [-127, 127] (2^-127 is a subnormal).
//   uint32_t e4m3x2_rn(float x0, float x1)
//              the two E4M3 codes, x0 in bits 0..7, x1 in bits 8..15: == float_to_e4m3(x) (RNE,
//              satfinite: |x| >= 464 and +-Inf give +-448, -0 kept, subnormals, NaN -> 0x7F).
//   uint32_t mxfp8_quantize2(float v0, float v1, int E)
//              == float_to_e4m3(ldexpf(v, -E)) for v0 (bits 0..7) and v1 (bits 8..15),
//              for every E in [-127, 128] (128: the NaN-scale block formats.h still encodes).
//   float2   e4m3x2_to_float2(uint32_t codes)
//              == e4m3_to_float of bits 0..7 (.x) and 8..15 (.y), exact (NaN codes give NaN).
//   float2   mxfp8_dequantize2(uint32_t codes, int E)
//              == ldexpf(e4m3_to_float(code), E), exact, E in [-127, 128] (overflow gives +-Inf,
//              as ldexpf does; NaN codes give NaN, payload not specified).
//   float    mxfp8_fake_quantize(float v, int E), float2 mxfp8_fake_quantize2(v0, v1, E)
//              == ldexpf(e4m3_to_float(float_to_e4m3(ldexpf(v, -E))), E): the exact dequantized
//              MXFP8 value the CPU reference uses (fake_quantize_mxfp8_row, the GEMM1 epilogue).
//   Mxfp8Scale mxfp8_scale(int E), float2 mxfp8_fake_quantize_scaled(v0, scale0, v1, scale1):
//              the same for two values of two blocks, the blocks' multipliers computed once.
//
// Why each piece is exact (docs/NUMERICS.md has the rules):
//  - Exponent: 448 = 1.75 * 2^8. For amax = 1.m * 2^(b - 127) (biased exponent b >= 1),
//    amax <= 448 * 2^E  <=>  E >= b - 135 when 1.m <= 1.75 (mantissa field <= 0x600000), else
//    E >= b - 134. Subnormal amax (b = 0) and 0 land far below -127 and clamp there; b = 254
//    gives at most 120, so the upper clamp never binds. Negative non-NaN amax: formats.h's loops
//    run down to the clamp, -127. Integer ops only.
//  - Scaling: v * 2^-E is one IEEE multiply by an exact power of two, correctly rounded like
//    ldexpf (and like v / 2^E). For E <= 126, 2^-E is a normal float built from its bits; E =
//    127 / 128 use the subnormals 2^-127 / 2^-128 (mxmoe compiles without flush-to-zero, so the
//    multiply is still IEEE). A product below 2^-126 may round in fp32, but it is then far below
//    the smallest E4M3 step (2^-9), so the code (+-0) does not change.
//  - Codes: cvt.rn.satfinite.e4m3x2.f32 d, a, b puts a's code in the UPPER byte of d and b's in
//    the lower one, hence the swapped operands below. satfinite clamps finite overflow and +-Inf
//    to +-448 like float_to_e4m3; NaN gives the canonical 0x7F (checked by the GPU test).
//  - Decoding: every E4M3 value is a normal FP16 number (2^-9 >= FP16's 2^-14 normal limit,
//    448 < 65504), so cvt.rn.f16x2.e4m3x2 and FP16 -> fp32 are exact; the low byte goes to the
//    low half. The product by 2^E is an exact fp32 (subnormal results included, they are
//    multiples of 2^-136) or overflows to Inf exactly where ldexpf does.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mxmoe::smxx {

// The max of m over the 8 lanes of a warp that share lane % 4 (butterfly over xor 4, 8, 16): in
// an mma.sync / wgmma accumulator those lanes hold the same token column for the fragment's 8
// row groups, so this is a column's amax over the warp's rows (an MX block of 32 intermediates
// then also spans the warps, through shared memory).
__device__ __forceinline__ float max_over_row_lanes(float m) {
  m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 4));
  m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 8));
  m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 16));
  return m;
}

// Selects only: with early returns nvcc made each call a branch with its own reconvergence
// point, so an unrolled epilogue ran its N / 4 blocks one after another (the GEMM1 MXFP8
// epilogue, bench/NOTES.md P round 14).
__device__ __forceinline__ int mxfp8_exponent(float amax) {
  const uint32_t u = __float_as_uint(amax);
  const uint32_t mag = u & 0x7FFFFFFFu;
  // A positive finite amax (the sign bit is 0, so mag >> 23 is its biased exponent).
  int E = static_cast<int>(mag >> 23) - 135 + ((u & 0x7FFFFFu) > 0x600000u ? 1 : 0);
  E = E < -127 ? -127 : E;
  E = (u >> 31) != 0u ? -127 : E;  // negative, -0 and -Inf: formats.h gives the clamp
  // NaN (any sign) or +Inf: 128 (byte 255).
  return (mag > 0x7F800000u || u == 0x7F800000u) ? 128 : E;
}

__device__ __forceinline__ float mxfp8_pow2(int E) {
  // E >= -126: a normal float; E = -127: the subnormal 2^-127.
  return __uint_as_float(E >= -126 ? static_cast<uint32_t>(E + 127) << 23 : 0x00400000u);
}

// 2^-E for E in [-127, 128] (2^-127 and 2^-128 are subnormal).
__device__ __forceinline__ float mxfp8_inv_pow2(int E) {
  return __uint_as_float(E <= 126 ? static_cast<uint32_t>(127 - E) << 23
                                  : 0x00400000u >> (E - 127));
}

__device__ __forceinline__ uint32_t e4m3x2_rn(float x0, float x1) {
  uint16_t d;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(d) : "f"(x1), "f"(x0));
  return d;
}

__device__ __forceinline__ uint32_t mxfp8_quantize2(float v0, float v1, int E) {
  const float inv = mxfp8_inv_pow2(E);
  return e4m3x2_rn(v0 * inv, v1 * inv);
}

__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t codes) {
  uint32_t h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"(static_cast<uint16_t>(codes)));
  return __half22float2(*reinterpret_cast<__half2*>(&h2));
}

__device__ __forceinline__ float2 mxfp8_dequantize2(uint32_t codes, int E) {
  float2 f = e4m3x2_to_float2(codes);
  const float s = mxfp8_pow2(E > 127 ? 127 : E);
  f.x *= s;
  f.y *= s;
  if (E > 127) {  // 2^128 is not a float: two exact steps (the second may overflow, as ldexpf)
    f.x *= 2.0f;
    f.y *= 2.0f;
  }
  return f;
}

__device__ __forceinline__ float2 mxfp8_fake_quantize2(float v0, float v1, int E) {
  return mxfp8_dequantize2(mxfp8_quantize2(v0, v1, E), E);
}

__device__ __forceinline__ float mxfp8_fake_quantize(float v, int E) {
  return mxfp8_fake_quantize2(v, 0.0f, E).x;
}
// A block's multipliers, worked out once per block: 2^-E, then 2^E in two exact steps
// (2^min(E, 127), then 2 for E = 128, else 1), as mxfp8_quantize2 / mxfp8_dequantize2 do.
struct Mxfp8Scale {
  float inv, s, s2;
};
__device__ __forceinline__ Mxfp8Scale mxfp8_scale(int E) {
  return {mxfp8_inv_pow2(E), mxfp8_pow2(E > 127 ? 127 : E), E > 127 ? 2.0f : 1.0f};
}
// Two values of two blocks (e.g. two tokens' blocks in a GEMM1 epilogue), one conversion pair
// for both: == {mxfp8_fake_quantize(v0, E0), mxfp8_fake_quantize(v1, E1)} with a =
// mxfp8_scale(E0), b = mxfp8_scale(E1) (the extra product by 1 is exact).
__device__ __forceinline__ float2 mxfp8_fake_quantize_scaled(float v0, const Mxfp8Scale& a,
                                                             float v1, const Mxfp8Scale& b) {
  float2 f = e4m3x2_to_float2(e4m3x2_rn(v0 * a.inv, v1 * b.inv));
  f.x *= a.s;
  f.y *= b.s;
  f.x *= a.s2;
  f.y *= b.s2;
  return f;
}

}  // namespace mxmoe::smxx
