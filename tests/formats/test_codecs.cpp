// test_codecs.cpp: exhaustive tests of formats.h's scalar codecs (E2M1, E4M3FN, UE8M0, BF16), the
// MX scale exponent and SiTU-GLU, against the independent double models in oracle.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <random>
#include <vector>

#include "mxmoe/formats.h"
#include "oracle.h"

namespace {

using namespace mxmoe;

// Bitwise float equality (distinguishes -0 from +0, and compares NaN payload-free by class).
bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return float_bits(a) == float_bits(b);
}

// ---- E2M1 --------------------------------------------------------------------------------------

TEST(E2M1, DecodeEveryCode) {
  const double expect_mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};  // KIMI_K3.md
  for (int c = 0; c < 16; ++c) {
    const float v = e2m1_to_float(static_cast<uint8_t>(c));
    EXPECT_EQ(static_cast<double>(v), oracle::e2m1_value(c)) << "code " << c;
    EXPECT_EQ(std::fabs(static_cast<double>(v)), expect_mag[c & 7]) << "code " << c;
    EXPECT_EQ(std::signbit(v), (c & 8) != 0) << "code " << c;  // code 8 is -0
  }
}

TEST(E2M1, EncodeDecodeRoundTripEveryCode) {
  for (int c = 0; c < 16; ++c)
    EXPECT_EQ(float_to_e2m1(e2m1_to_float(static_cast<uint8_t>(c))), c) << "code " << c;
}

// Every midpoint between neighbouring magnitudes goes to the even code; one ulp either side goes
// to the nearer one. Both signs.
TEST(E2M1, TiesToEvenAtEveryMidpoint) {
  for (int c = 0; c < 7; ++c) {
    const double lo = oracle::e2m1_value(c), hi = oracle::e2m1_value(c + 1);
    const float mid = static_cast<float>((lo + hi) / 2);  // exact: 2 significant bits + 1
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const int even = (c & 1) == 0 ? c : c + 1;
    for (int s = 0; s < 2; ++s) {
      const float sg = s ? -1.0f : 1.0f;
      const int sb = s ? 8 : 0;
      EXPECT_EQ(float_to_e2m1(sg * mid), even | sb) << "midpoint " << mid;
      EXPECT_EQ(float_to_e2m1(sg * std::nextafter(mid, 0.0f)), c | sb) << "below " << mid;
      EXPECT_EQ(float_to_e2m1(sg * std::nextafter(mid, 100.0f)), (c + 1) | sb) << "above " << mid;
    }
  }
  // The subnormal 0.5: 0.25 is the tie with 0 (-> 0), 0.75 the tie with 1.0 (-> 1.0).
  EXPECT_EQ(float_to_e2m1(0.25f), 0);
  EXPECT_EQ(float_to_e2m1(0.2500001f), 1);
  EXPECT_EQ(float_to_e2m1(0.75f), 2);
  EXPECT_EQ(float_to_e2m1(-0.25f), 8);  // -0 keeps its sign
  EXPECT_EQ(float_to_e2m1(-0.0f), 8);
}

TEST(E2M1, Saturates) {
  for (float x : {6.0f, 6.5f, 7.0f, 100.0f, 1e30f, FLT_MAX, INFINITY}) {
    EXPECT_EQ(float_to_e2m1(x), 7) << x;
    EXPECT_EQ(float_to_e2m1(-x), 15) << x;
  }
}

TEST(E2M1, MatchesBruteForceOnRandomAndDenseInputs) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-8.0f, 8.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = u(rng);
    ASSERT_EQ(float_to_e2m1(x), oracle::e2m1_encode(x)) << x;
  }
  for (float x = -7.0f; x <= 7.0f; x += 1.0f / 64)
    ASSERT_EQ(float_to_e2m1(x), oracle::e2m1_encode(x)) << x;
}

TEST(E2M1, PackLowNibbleFirst) {
  for (int a = 0; a < 16; ++a)
    for (int b = 0; b < 16; ++b) {
      const uint8_t byte = e2m1_pack(static_cast<uint8_t>(a), static_cast<uint8_t>(b));
      EXPECT_EQ(byte, a | (b << 4));
      EXPECT_EQ(e2m1_get(&byte, 0), a);
      EXPECT_EQ(e2m1_get(&byte, 1), b);
    }
}

// ---- E4M3FN ------------------------------------------------------------------------------------

TEST(E4M3, DecodeEveryCode) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3_to_float(static_cast<uint8_t>(c));
    const double o = oracle::e4m3_value(c);
    if (std::isnan(o)) {
      ++nans;
      EXPECT_TRUE(std::isnan(v)) << "code " << c;
      EXPECT_TRUE(e4m3_is_nan(static_cast<uint8_t>(c)));
      continue;
    }
    EXPECT_FALSE(e4m3_is_nan(static_cast<uint8_t>(c))) << "code " << c;
    EXPECT_EQ(static_cast<double>(v), o) << "code " << c;
    EXPECT_EQ(std::signbit(v), c >= 128) << "code " << c;
  }
  EXPECT_EQ(nans, 2);  // 0x7F and 0xFF only
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xFF)));
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
}

TEST(E4M3, EncodeDecodeRoundTripEveryCode) {
  for (int c = 0; c < 256; ++c) {
    if (c == 0x7F || c == 0xFF) continue;
    EXPECT_EQ(float_to_e4m3(e4m3_to_float(static_cast<uint8_t>(c))), c) << "code " << c;
  }
}

TEST(E4M3, TiesToEvenAtEveryMidpoint) {
  for (int c = 0; c < 126; ++c) {  // neighbours c, c+1 up to 0x7D / 0x7E (448)
    const double lo = oracle::e4m3_value(c), hi = oracle::e4m3_value(c + 1);
    const float mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const int even = (c & 1) == 0 ? c : c + 1;
    for (int s = 0; s < 2; ++s) {
      const float sg = s ? -1.0f : 1.0f;
      const int sb = s ? 0x80 : 0;
      EXPECT_EQ(float_to_e4m3(sg * mid), even | sb) << "midpoint " << mid;
      EXPECT_EQ(float_to_e4m3(sg * std::nextafter(mid, 0.0f)), c | sb) << "below " << mid;
      EXPECT_EQ(float_to_e4m3(sg * std::nextafter(mid, 1000.0f)), (c + 1) | sb) << "above " << mid;
    }
  }
}

TEST(E4M3, Subnormals) {
  // Subnormal step 2^-9; the first midpoint 2^-10 ties to 0 (even).
  for (int m = 0; m < 8; ++m) EXPECT_EQ(float_to_e4m3(std::ldexp(static_cast<float>(m), -9)), m);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(float_to_e4m3(-std::ldexp(1.0f, -10)), 0x80);
  EXPECT_EQ(float_to_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(float_to_e4m3(std::ldexp(3.0f, -10)), 0x02);   // tie 1.5 steps -> 2 (even)
  EXPECT_EQ(float_to_e4m3(std::ldexp(15.0f, -10)), 0x08);  // tie 7.5 steps -> 2^-6 (normal)
  EXPECT_EQ(float_to_e4m3(1e-30f), 0x00);
  EXPECT_EQ(float_to_e4m3(-1e-30f), 0x80);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -149)), 0x00);  // fp32 subnormal input
}

TEST(E4M3, SaturatesAndNaN) {
  for (float x : {448.0f, 450.0f, 463.99f, 464.0f, 480.0f, 1e6f, FLT_MAX, INFINITY}) {
    EXPECT_EQ(float_to_e4m3(x), 0x7E) << x;
    EXPECT_EQ(float_to_e4m3(-x), 0xFE) << x;
  }
  EXPECT_TRUE(e4m3_is_nan(float_to_e4m3(NAN)));
}

TEST(E4M3, MatchesBruteForceOverManyMagnitudes) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-14, 9);
  for (int i = 0; i < 300000; ++i) {
    float x = std::ldexp(mant(rng), ex(rng));
    if (i & 1) x = -x;
    ASSERT_EQ(float_to_e4m3(x), oracle::e4m3_encode(x)) << x;
  }
}

// ---- UE8M0 and the MX scale rule ---------------------------------------------------------------

TEST(UE8M0, DecodeEveryByte) {
  for (int e = 0; e < 255; ++e) {
    const float v = ue8m0_to_float(static_cast<uint8_t>(e));
    EXPECT_EQ(static_cast<double>(v), std::ldexp(1.0, e - 127)) << "byte " << e;
  }
  EXPECT_TRUE(std::isnan(ue8m0_to_float(255)));
}

TEST(ScaleRule, ExactPowersOfTwoAndOneUlpAbove) {
  for (float max_code : {kE4M3Max, kE2M1Max}) {
    for (int E = -127; E <= 127; ++E) {
      const double bound = std::ldexp(static_cast<double>(max_code), E);
      if (bound > FLT_MAX) break;
      const float amax = static_cast<float>(bound);
      ASSERT_EQ(static_cast<double>(amax), bound);  // max_code * 2^E is a float
      EXPECT_EQ(mx_scale_exponent(amax, max_code), E) << "max " << max_code << " E " << E;
      const float up = std::nextafter(amax, INFINITY);
      EXPECT_EQ(mx_scale_exponent(up, max_code), std::min(E + 1, 127)) << "E " << E;
      const float down = std::nextafter(amax, 0.0f);
      EXPECT_EQ(mx_scale_exponent(down, max_code),
                std::max(oracle::scale_exponent(down, max_code), -127));
      EXPECT_EQ(mx_scale_byte(amax, max_code), E + 127);
    }
  }
}

TEST(ScaleRule, ZeroNaNInfAndClamping) {
  EXPECT_EQ(mx_scale_exponent(0.0f, kE4M3Max), -127);
  EXPECT_EQ(mx_scale_byte(0.0f, kE4M3Max), 0);
  EXPECT_EQ(mx_scale_exponent(NAN, kE4M3Max), 128);
  EXPECT_EQ(mx_scale_exponent(INFINITY, kE2M1Max), 128);
  EXPECT_EQ(mx_scale_byte(NAN, kE2M1Max), kUe8m0Nan);
  EXPECT_EQ(mx_scale_byte(INFINITY, kE4M3Max), kUe8m0Nan);
  // Below 448 * 2^-127 every amax clamps to the smallest scale, including fp32 subnormals.
  EXPECT_EQ(mx_scale_exponent(std::ldexp(1.0f, -149), kE4M3Max), -127);
  EXPECT_EQ(mx_scale_exponent(1e-40f, kE2M1Max), -127);
  // ceil(log2(FLT_MAX / 1)) = 128 clamps to 127; with max 6 it is 126.
  EXPECT_EQ(mx_scale_exponent(FLT_MAX, 1.0f), 127);
  EXPECT_EQ(mx_scale_exponent(FLT_MAX, kE2M1Max), 126);
  EXPECT_EQ(mx_scale_exponent(FLT_MAX, kE4M3Max), 120);
}

TEST(ScaleRule, MatchesOracleOnRandomAmax) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits(0, 0x7F7FFFFFu);  // every finite positive float
  for (int i = 0; i < 200000; ++i) {
    const float a = bits_float(bits(rng));
    ASSERT_EQ(mx_scale_exponent(a, kE4M3Max), oracle::scale_exponent(a, kE4M3Max)) << a;
    ASSERT_EQ(mx_scale_exponent(a, kE2M1Max), oracle::scale_exponent(a, kE2M1Max)) << a;
  }
}

// ---- BF16 --------------------------------------------------------------------------------------

// Independent RNE model: pick the nearer of the two BF16 neighbours in double, even on a tie.
uint16_t bf16_oracle(float x) {
  const uint32_t u = float_bits(x);
  const uint16_t lo = static_cast<uint16_t>(u >> 16), hi = static_cast<uint16_t>(lo + 1);
  const double vx = x, vlo = bf16_to_float(lo);
  // The upper neighbour may be Inf (0x7F80): its distance is taken as that of the next binade.
  const double vhi = (hi & 0x7FFF) == 0x7F80 ? std::ldexp(std::copysign(1.0, vx), 128)
                                             : static_cast<double>(bf16_to_float(hi));
  const double dlo = std::fabs(vx - vlo), dhi = std::fabs(vhi - vx);
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(BF16, TiesToEvenAndNeighbours) {
  std::mt19937 rng(4);
  std::uniform_int_distribution<uint32_t> bits(0, 0xFFFFFFFFu);
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    if ((u & 0x7F800000u) == 0x7F800000u) continue;  // Inf/NaN: separate test
    for (uint32_t low : {0x8000u, 0x7FFFu, 0x8001u, 0x0000u, 0xFFFFu}) {
      const float x = bits_float((u & 0xFFFF0000u) | low);
      ASSERT_EQ(float_to_bf16(x), bf16_oracle(x)) << std::hex << float_bits(x);
    }
    const float x = bits_float(u);
    ASSERT_EQ(float_to_bf16(x), bf16_oracle(x)) << std::hex << u;
  }
  EXPECT_EQ(float_to_bf16(bits_float(0x3F808000u)), 0x3F80);  // tie, even below
  EXPECT_EQ(float_to_bf16(bits_float(0x3F818000u)), 0x3F82);  // tie, even above
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(bits_float(0x7F7F8000u)), 0x7F80);  // tie at the top rounds to Inf
}

TEST(BF16, InfNaN) {
  EXPECT_EQ(float_to_bf16(INFINITY), 0x7F80);
  EXPECT_EQ(float_to_bf16(-INFINITY), 0xFF80);
  EXPECT_TRUE(std::isnan(round_bf16(NAN)));
  EXPECT_TRUE(std::isnan(round_bf16(bits_float(0x7F800001u))));  // a NaN whose payload is low
  for (uint32_t b = 0; b < 65536; ++b) {  // every BF16 value converts back to itself
    const float v = bf16_to_float(static_cast<uint16_t>(b));
    if (std::isnan(v)) continue;
    ASSERT_EQ(float_to_bf16(v), b);
  }
}

// ---- SiTU-GLU ----------------------------------------------------------------------------------

TEST(Situ, AgreesWithDoubleFormula) {
  double worst = 0;
  for (double beta : {4.0, 1.0, 7.5})
    for (double lb : {25.0, 10.0, 3.0})
      for (double g = -60; g <= 60; g += 0.173)
        for (double u = -120; u <= 120; u += 0.91) {
          const float gf = static_cast<float>(g), uf = static_cast<float>(u);
          const double ref = oracle::situ_double(gf, uf, beta, lb);
          const float got = situ_glu(gf, uf, static_cast<float>(beta), static_cast<float>(lb));
          if (ref == 0) {
            ASSERT_EQ(got, 0.0f);
            continue;
          }
          worst = std::max(worst, std::fabs(got - ref) / std::fabs(ref));
        }
  // A few fp32 ulps: tanhf/expf are within ~2 ulp and the formula has 7 roundings.
  EXPECT_LT(worst, 2e-6) << "worst relative error " << worst;
  // No clamp and no +1: large inputs saturate at beta * linear_beta, sign of u.
  EXPECT_NEAR(situ_glu(80.0f, 1000.0f, 4.0f, 25.0f), 100.0f, 1e-4f);
  EXPECT_NEAR(situ_glu(80.0f, -1000.0f, 4.0f, 25.0f), -100.0f, 1e-4f);
  EXPECT_TRUE(same_float(situ_glu(0.0f, 5.0f, 4.0f, 25.0f), 0.0f));
}

}  // namespace
