// src/cuda/smxx/situ_device.cuh: SiTU-GLU for the GPU GEMM1 epilogues (every SM90 kernel that
// ends GEMM1 calls this one function, so their outputs stay bit-identical to each other).
//
// The same formula as formats.h's situ_glu (docs/NUMERICS.md), with the three divisions of the
// per-element path replaced: g / beta and u / linear_beta become products with reciprocals
// computed once per tile (exact for a power-of-two beta such as 4.0, else within one ulp of the
// quotient), and sigmoid's 1 / (1 + e) uses the fast division (2 ulp; 0 once 1 + e passes
// 2^126, i.e. for g < -87, where sigmoid is below 1e-38 anyway). tanhf / expf stay the accurate
// ones. Why: an IEEE division is a ~15-instruction sequence; with three per element the SiTU
// epilogue was ~20% of the prefill consumers' time (bench/NOTES.md P round 5).
#pragma once

namespace mxmoe::smxx {

struct SituCoeffs {
  float beta, inv_beta, linear_beta, inv_linear_beta;
};

__device__ __forceinline__ SituCoeffs situ_coeffs(float beta, float linear_beta) {
  return {beta, 1.0f / beta, linear_beta, 1.0f / linear_beta};
}

__device__ __forceinline__ float situ_glu_dev(float g, float u, const SituCoeffs& c) {
  const float sigmoid = __fdividef(1.0f, 1.0f + expf(-g));
  const float gate = c.beta * tanhf(g * c.inv_beta) * sigmoid;
  const float up = c.linear_beta * tanhf(u * c.inv_linear_beta);
  return gate * up;
}

}  // namespace mxmoe::smxx
