// src/cuda/smxx/situ_device.cuh: SiTU-GLU for the GPU GEMM1 epilogues (every SM90 kernel that
// ends GEMM1 calls this one function, so their outputs stay bit-identical to each other).
//
// The formula of formats.h's situ_glu (docs/NUMERICS.md), evaluated for the least issue work,
// since the epilogue is ~10% of the prefill GEMM1 (bench/NOTES.md P round 9) and the consumers
// are issue/latency bound there:
//  - g / beta and u / linear_beta are products with reciprocals computed once per tile (exact
//    for a power-of-two beta such as 4.0, else within one ulp of the quotient); beta *
//    linear_beta is one product per tile too;
//  - sigmoid = rcp.approx(1 + expf(-g)): the MUFU.RCP that __fdividef(1, x) reduces to for
//    1 <= x < 2^126, without its five instructions of range handling for x it never sees here;
//    above 2^126 (g < -87, sigmoid below 1e-38) the result flushes to 0 as __fdividef's does;
//  - tanh(z): situ_tanh_poly.h's polynomial below |z| = 0.6, above it 1 - 2 / (1 + e^(2|z|))
//    with the sign of z, which is the accurate tanhf's own split (MUFU.EX2 + MUFU.RCP) minus its
//    saturation test: past |z| = 9 the quotient is under an ulp of 1 and past ~44 e^(2|z|) is
//    +inf, 2 / inf = 0, so the expression saturates by itself.
// In a 40-element loop (a 160-wide tile's thread) 1856 instructions where the toolkit's tanhf
// and __fdividef took 2136 (6 MUFU per element either way; bench/NOTES.md P round 25).
// Accuracy: tests/gpu/test_situ_device.cpp checks < 2e-6 relative against the double formula
// over the CPU test's grid (docs/NUMERICS.md), never tanh.approx.
#pragma once

#include "smxx/situ_tanh_poly.h"

namespace mxmoe::smxx {

// Per tile. two and p3 are constants held in registers: an FFMA takes one immediate, so as
// immediates they cost a MOV per use (per element and tanh; ptxas rematerializes a constant it
// can see, even through an asm mov). fmaf(0, beta, k) is k for every finite beta and cannot be
// folded (0 * inf is NaN); a non-finite beta makes the whole SiTU NaN anyway.
struct SituCoeffs {
  float inv_beta, inv_linear_beta, scale;  // 1 / beta, 1 / linear_beta, beta * linear_beta
  float two, p3;                           // 2, kSituTanhP3
};

__device__ __forceinline__ SituCoeffs situ_coeffs(float beta, float linear_beta) {
  return {1.0f / beta, 1.0f / linear_beta, beta * linear_beta, fmaf(0.0f, beta, 2.0f),
          fmaf(0.0f, beta, kSituTanhP3)};
}

__device__ __forceinline__ float rcp_approx_ftz(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float ex2_approx_ftz(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ float situ_tanh(float z, const SituCoeffs& c) {
  const float a = fabsf(z);
  const float e = ex2_approx_ftz(a * 2.88539008f);  // e^(2|z|): 2 log2(e) = 2.8853900818
  const float big = fmaf(rcp_approx_ftz(e + 1.0f), -c.two, 1.0f);
  return a < kSituTanhSmall ? situ_tanh_small(z, c.p3) : copysignf(big, z);
}

// The up half, linear_beta * tanh(u / linear_beta); the gate half times it is situ_glu_dev.
__device__ __forceinline__ float situ_up(float u, const SituCoeffs& c) {
  return situ_tanh(u * c.inv_linear_beta, c) * c.scale;
}
__device__ __forceinline__ float situ_gate_times(float g, float up, const SituCoeffs& c) {
  const float sigmoid = rcp_approx_ftz(1.0f + expf(-g));
  return (situ_tanh(g * c.inv_beta, c) * sigmoid) * up;
}
__device__ __forceinline__ float situ_glu_dev(float g, float u, const SituCoeffs& c) {
  return situ_gate_times(g, situ_up(u, c), c);
}

#ifndef MXMOE_SITU_UP_VOTE
#define MXMOE_SITU_UP_VOTE 1
#endif

// SiTU over one thread's GEMM1 accumulators in the wgmma m64 layout with gate and up rows
// interleaved by 8: d[4j + {0,1}] gate, d[4j + {2,3}] up, outputs v[2j + {0,1}], j < J.
// With kVote, when every up value of the warp is below 0.6 linear_beta (trained MoE layers:
// linear_beta = 25 is a clamp for outliers), the up halves take the polynomial alone: the same
// bits as situ_up (its branch would pick the polynomial for each of them; the test is made on
// fl(max |u| / linear_beta), which bounds every fl(|u| / linear_beta)), ~8 instructions fewer
// per element. The vote spans the active lanes (all 32 in every epilogue). Measured against the
// general path alone (bench/NOTES.md P round 25, H100): ~1% faster at ep16 T=4096-8192 in two
// of three readings.
template <int J, bool kVote = (MXMOE_SITU_UP_VOTE != 0)>
__device__ __forceinline__ void situ_glu_fragment(float* v, const float* d, const SituCoeffs& c) {
  bool small = false;
  if constexpr (kVote) {
    float m = 0.0f;
#pragma unroll
    for (int j = 0; j < J; ++j) m = fmaxf(m, fmaxf(fabsf(d[4 * j + 2]), fabsf(d[4 * j + 3])));
    small = __all_sync(__activemask(), m * c.inv_linear_beta < kSituTanhSmall);
  }
  if (small) {
#pragma unroll
    for (int j = 0; j < J; ++j) {
      v[2 * j] = situ_tanh_small(d[4 * j + 2] * c.inv_linear_beta, c.p3) * c.scale;
      v[2 * j + 1] = situ_tanh_small(d[4 * j + 3] * c.inv_linear_beta, c.p3) * c.scale;
    }
  } else {
#pragma unroll
    for (int j = 0; j < J; ++j) {
      v[2 * j] = situ_up(d[4 * j + 2], c);
      v[2 * j + 1] = situ_up(d[4 * j + 3], c);
    }
  }
#pragma unroll
  for (int j = 0; j < J; ++j) {
    v[2 * j] = situ_gate_times(d[4 * j], v[2 * j], c);
    v[2 * j + 1] = situ_gate_times(d[4 * j + 1], v[2 * j + 1], c);
  }
}

}  // namespace mxmoe::smxx
