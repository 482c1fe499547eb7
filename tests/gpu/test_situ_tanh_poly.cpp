// tests/gpu/test_situ_tanh_poly.cpp (label cpu): the GPU SiTU's small-argument tanh
// (smxx/situ_tanh_poly.h) evaluated on the host, where it gives the device's bits (every step is
// one IEEE fp32 operation), against the double tanh over every float of [2^-12, 0.6) and a
// sample below. The large-argument branch uses MUFU instructions: tests/gpu/test_situ_device.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "mxmoe/formats.h"  // float_bits, bits_float
#include "smxx/situ_tanh_poly.h"

namespace mxmoe::smxx {
namespace {

// Error of got against tanh(z) in units of the fp32 spacing at the true value.
double ulp_error(float z, float got) {
  const double ref = std::tanh(static_cast<double>(z));
  const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(ref)) - 23);
  return std::fabs(static_cast<double>(got) - ref) / ulp;
}

TEST(SituTanhPoly, EveryFloatBelowTheBranchPoint) {
  double worst = 0;
  float worst_z = 0;
  const uint32_t lo = float_bits(std::ldexp(1.0f, -12)), hi = float_bits(kSituTanhSmall);
  for (uint32_t b = lo; b < hi; ++b) {
    const float z = bits_float(b);
    const double e = ulp_error(z, situ_tanh_small(z));
    if (e > worst) worst = e, worst_z = z;
  }
  // Below 2^-12, z^3 / 3 is under 2^-25 z: the result is z or its neighbour. Sampled.
  for (uint32_t b = float_bits(1e-30f); b < lo; b += 97) {
    const double e = ulp_error(bits_float(b), situ_tanh_small(bits_float(b)));
    if (e > worst) worst = e, worst_z = bits_float(b);
  }
  // The fit's bound (situ_tanh_poly.h): 1.86 ulp at z = 0.4827. 2 ulp is the bar.
  EXPECT_LT(worst, 2.0) << "worst at z = " << worst_z;
  std::printf("situ_tanh_small: worst %.3f ulp at z = %.8g\n", worst, worst_z);
}

TEST(SituTanhPoly, OddAndExactAtZero) {
  for (float z : {0.5f, 0.1f, 1e-3f, 0.59999996f}) {
    EXPECT_EQ(float_bits(situ_tanh_small(-z)), float_bits(-situ_tanh_small(z))) << z;
  }
  EXPECT_EQ(float_bits(situ_tanh_small(0.0f)), float_bits(0.0f));
  EXPECT_EQ(float_bits(situ_tanh_small(-0.0f)), float_bits(-0.0f));
}

}  // namespace
}  // namespace mxmoe::smxx
