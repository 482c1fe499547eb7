// src/cuda/smxx/situ_tanh_poly.h: tanh(z) for |z| < 0.6 as z + z^3 P(z^2), the small-argument
// branch of the GPU SiTU's tanh (situ_device.cuh). Host and device: the CPU test runs this same
// code over every float of its range against the double tanh (tests/gpu/test_situ_tanh_poly.cpp,
// label cpu).
//
// P is this project's own minimax fit (relative error of z + z^3 P(z^2) against tanh, weighted
// Lawson iteration on (0, 0.6], coefficients rounded to float): 1.9 ulp at most after the fp32
// evaluation below, against 4 ulp for a plain Taylor-style fit of the same degree. Below 0.6 the
// exponential form 1 - 2 / (1 + e^(2z)) would cancel (its error is absolute, not relative).
#pragma once

#include <cmath>

#include "mxmoe/common.h"  // MXMOE_HD

namespace mxmoe::smxx {

constexpr float kSituTanhSmall = 0.6f;  // the branch point: |z| below it takes the polynomial
constexpr float kSituTanhP0 = -0.33332598209381104f;
constexpr float kSituTanhP1 = 0.13313114643096924f;
constexpr float kSituTanhP2 = -0.05221167579293251f;
constexpr float kSituTanhP3 = 0.015612414106726646f;

// Every step is one IEEE fp32 operation (explicit fmaf, products that feed no addition), so host
// and device give the same bits. z^2 P is formed as fmaf(P, z^2, +0), which is +0 (not P's -0)
// at z = +-0, so that z + z * (+0) keeps the sign of a zero z: tanh(-0) = -0, as tanhf gives.
// p3 is kSituTanhP3 (a parameter so that the GPU can pass it in a register).
MXMOE_HD float situ_tanh_small(float z, float p3 = kSituTanhP3) {
  const float s = z * z;
  float p = fmaf(p3, s, kSituTanhP2);
  p = fmaf(p, s, kSituTanhP1);
  p = fmaf(p, s, kSituTanhP0);
  const float ps = fmaf(p, s, 0.0f);
  return fmaf(z, ps, z);
}

}  // namespace mxmoe::smxx
