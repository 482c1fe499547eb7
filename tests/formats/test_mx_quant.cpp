// test_mx_quant.cpp: MXFP4 / MXFP8 row quantize / dequantize (mx_quant.h) against the independent
// double quantizer of oracle.h, bit for bit, plus round trips, the no-clip property and bad input.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>
#include <vector>

#include "mxmoe/mx_quant.h"
#include "oracle.h"

namespace {

using namespace mxmoe;

// Random rows at one magnitude, with in-block dynamic range (some elements 2^-20 of the rest),
// zeros of both signs, and exact ties of the element grid.
std::vector<float> random_row(std::mt19937& rng, int K, float magnitude) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 15);
  std::vector<float> x(K);
  for (int k = 0; k < K; ++k) {
    float v = n(rng) * magnitude;
    switch (pick(rng)) {
      case 0:
        v = 0.0f;
        break;
      case 1:
        v = -0.0f;
        break;
      case 2:
        v *= 1.0f / 1048576.0f;
        break;
      default:
        break;
    }
    x[k] = v;
  }
  return x;
}

const float kMagnitudes[] = {1e-44f, 1e-40f, 3e-38f, 1e-30f, 1e-6f, 1e-3f, 0.37f,
                             1.0f,   17.0f,  1e3f,   1e20f,  1e30f, 1e37f, 3e37f};

TEST(Mxfp8Row, MatchesDoubleQuantizerBitForBit) {
  std::mt19937 rng(10);
  const int K = 256;
  std::vector<uint8_t> codes(K), scales(K / 32);
  int64_t checked = 0;
  for (float mag : kMagnitudes)
    for (int rep = 0; rep < 200; ++rep) {
      const auto x = random_row(rng, K, mag);
      quantize_mxfp8_row(x.data(), K, codes.data(), scales.data());
      for (int b = 0; b < K / 32; ++b) {
        uint8_t sb;
        int oc[32];
        oracle::quantize_block(&x[b * 32], 448.0, oracle::e4m3_encode, &sb, oc);
        ASSERT_EQ(scales[b], sb) << "magnitude " << mag << " block " << b;
        for (int i = 0; i < 32; ++i)
          ASSERT_EQ(codes[b * 32 + i], oc[i])
              << "x = " << x[b * 32 + i] << " scale byte " << int(sb);
        checked += 32;
      }
    }
  EXPECT_GT(checked, 100000);
}

TEST(Mxfp4Row, MatchesDoubleQuantizerBitForBit) {
  std::mt19937 rng(11);
  const int K = 256;
  std::vector<uint8_t> packed(K / 2), scales(K / 32);
  for (float mag : kMagnitudes)
    for (int rep = 0; rep < 200; ++rep) {
      const auto x = random_row(rng, K, mag);
      quantize_mxfp4_row(x.data(), K, packed.data(), scales.data());
      for (int b = 0; b < K / 32; ++b) {
        uint8_t sb;
        int oc[32];
        oracle::quantize_block(&x[b * 32], 6.0, oracle::e2m1_encode, &sb, oc);
        ASSERT_EQ(scales[b], sb) << "magnitude " << mag << " block " << b;
        for (int i = 0; i < 32; ++i) {
          const int k = b * 32 + i;
          const int got = (k & 1) ? packed[k / 2] >> 4 : packed[k / 2] & 15;
          ASSERT_EQ(got, oc[i]) << "x = " << x[k] << " scale byte " << int(sb);
        }
      }
    }
}

// Exact grid ties (x / scale a midpoint of the element grid) round to even in the row quantizers
// too: put the block's maximum at 448 * 2^s (or 6 * 2^s) so the scale is 2^s, then midpoints.
TEST(MxRows, TiesInsideBlocksRoundToEven) {
  for (int s : {-130, -20, 0, 5, 100}) {
    std::vector<float> x(32);
    x[0] = std::ldexp(448.0f, s);
    for (int i = 1; i < 32; ++i) {
      const int c = 8 + 3 * i;  // neighbours c, c+1
      const double mid = (oracle::e4m3_value(c) + oracle::e4m3_value(c + 1)) / 2;
      x[i] = static_cast<float>(std::ldexp(i % 2 ? mid : -mid, s));
    }
    std::vector<uint8_t> codes(32), scales(1);
    quantize_mxfp8_row(x.data(), 32, codes.data(), scales.data());
    if (s < -127) continue;  // x[0] underflowed; the scale clamps (covered by the oracle test)
    EXPECT_EQ(scales[0], s + 127);
    for (int i = 1; i < 32; ++i) {
      const int c = 8 + 3 * i, even = (c & 1) ? c + 1 : c;
      EXPECT_EQ(codes[i], (i % 2 ? 0 : 0x80) | even) << "s " << s << " i " << i;
    }
  }
  std::vector<float> x(32, 0.0f);
  x[0] = 6.0f;
  x[1] = 0.25f;
  x[2] = 0.75f;
  x[3] = 1.25f;
  x[4] = -1.75f;
  x[5] = 2.5f;
  x[6] = 3.5f;
  x[7] = -5.0f;
  std::vector<uint8_t> packed(16), scales(1);
  quantize_mxfp4_row(x.data(), 32, packed.data(), scales.data());
  EXPECT_EQ(scales[0], 127);
  const int expect[8] = {7, 0, 2, 2, 8 | 4, 4, 6, 8 | 6};
  for (int k = 0; k < 8; ++k) EXPECT_EQ(e2m1_get(packed.data(), k), expect[k]) << k;
}

// Every representable (code, scale) row survives dequantize -> quantize -> dequantize exactly,
// and with a max-magnitude code in each block the codes and scales come back identical.
TEST(MxRows, RoundTripsOfRepresentableValuesAreExact) {
  std::mt19937 rng(12);
  const int K = 128;
  std::uniform_int_distribution<int> code8(0, 255), code4(0, 15), sc8(0, 240), sc4(0, 249),
      pos(0, 31);
  for (int rep = 0; rep < 2000; ++rep) {
    // MXFP8
    std::vector<uint8_t> c(K), s(K / 32), c2(K), s2(K / 32);
    for (auto& v : c) do
        v = static_cast<uint8_t>(code8(rng));
      while (e4m3_is_nan(v));
    for (auto& v : s) v = static_cast<uint8_t>(sc8(rng));
    if (rep % 2)
      for (int b = 0; b < K / 32; ++b) c[b * 32 + pos(rng)] = rep % 4 == 1 ? 0x7E : 0xFE;
    std::vector<float> x(K), y(K);
    dequantize_mxfp8_row(c.data(), s.data(), K, x.data());
    quantize_mxfp8_row(x.data(), K, c2.data(), s2.data());
    dequantize_mxfp8_row(c2.data(), s2.data(), K, y.data());
    for (int k = 0; k < K; ++k) ASSERT_EQ(float_bits(x[k]), float_bits(y[k])) << k;
    if (rep % 2) {
      EXPECT_EQ(c, c2);
      EXPECT_EQ(s, s2);
    }
    std::vector<float> f(K);
    fake_quantize_mxfp8_row(x.data(), K, f.data());
    for (int k = 0; k < K; ++k) ASSERT_EQ(float_bits(x[k]), float_bits(f[k])) << k;
    // MXFP4
    std::vector<uint8_t> p(K / 2), p2(K / 2), t(K / 32), t2(K / 32);
    for (auto& v : p)
      v = e2m1_pack(static_cast<uint8_t>(code4(rng)), static_cast<uint8_t>(code4(rng)));
    for (auto& v : t) v = static_cast<uint8_t>(sc4(rng));
    if (rep % 2)
      for (int b = 0; b < K / 32; ++b) {
        const int k = b * 32 + pos(rng);
        const uint8_t six = rep % 4 == 1 ? 7 : 15;
        p[k / 2] = (k & 1) ? e2m1_pack(p[k / 2] & 15, six) : e2m1_pack(six, p[k / 2] >> 4);
      }
    dequantize_mxfp4_row(p.data(), t.data(), K, x.data());
    quantize_mxfp4_row(x.data(), K, p2.data(), t2.data());
    dequantize_mxfp4_row(p2.data(), t2.data(), K, y.data());
    for (int k = 0; k < K; ++k) ASSERT_EQ(float_bits(x[k]), float_bits(y[k])) << k;
    if (rep % 2) {
      EXPECT_EQ(p, p2);
      EXPECT_EQ(t, t2);
    }
  }
}

// The scale rule's promise: |x / scale| <= max_code for every element, so nothing saturates, and
// the fake-quantized value is within half an element step of x.
TEST(MxRows, NoElementEverClips) {
  std::mt19937 rng(13);
  const int K = 512;
  std::vector<uint8_t> c(K), s(K / 32), p(K / 2), t(K / 32);
  std::vector<float> f(K);
  for (float mag : kMagnitudes)
    for (int rep = 0; rep < 100; ++rep) {
      const auto x = random_row(rng, K, mag);
      quantize_mxfp8_row(x.data(), K, c.data(), s.data());
      quantize_mxfp4_row(x.data(), K, p.data(), t.data());
      fake_quantize_mxfp8_row(x.data(), K, f.data());
      for (int k = 0; k < K; ++k) {
        const double s8 = std::ldexp(1.0, s[k / 32] - 127), s4 = std::ldexp(1.0, t[k / 32] - 127);
        ASSERT_LE(std::fabs(x[k] / s8), 448.0) << x[k];
        ASSERT_LE(std::fabs(x[k] / s4), 6.0) << x[k];
        // Error bound: half a step of the binade (1/16 relative for E4M3 normals) or half the
        // subnormal step 2^-10 * scale.
        ASSERT_LE(std::fabs(f[k] - static_cast<double>(x[k])),
                  std::fmax(std::fabs(static_cast<double>(x[k])) / 16, std::ldexp(s8, -10)))
            << x[k];
      }
    }
}

TEST(MxRows, BadInputThrows) {
  std::vector<float> x(64, 1.0f), out(64);
  std::vector<uint8_t> c(64), s(2), p(32);
  for (int K : {31, 33, 1, -32}) {
    EXPECT_THROW(quantize_mxfp8_row(x.data(), K, c.data(), s.data()), Error) << K;
    EXPECT_THROW(quantize_mxfp4_row(x.data(), K, p.data(), s.data()), Error) << K;
    EXPECT_THROW(dequantize_mxfp8_row(c.data(), s.data(), K, out.data()), Error) << K;
    EXPECT_THROW(dequantize_mxfp4_row(p.data(), s.data(), K, out.data()), Error) << K;
    EXPECT_THROW(fake_quantize_mxfp8_row(x.data(), K, out.data()), Error) << K;
  }
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    x[40] = bad;
    EXPECT_THROW(quantize_mxfp8_row(x.data(), 64, c.data(), s.data()), Error);
    EXPECT_THROW(quantize_mxfp4_row(x.data(), 64, p.data(), s.data()), Error);
    EXPECT_THROW(fake_quantize_mxfp8_row(x.data(), 64, out.data()), Error);
  }
  try {
    quantize_mxfp8_row(x.data(), 64, c.data(), s.data());
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("element 40"), std::string::npos) << e.what();
  }
  // NaN scale byte and NaN E4M3 codes.
  std::fill(c.begin(), c.end(), 0x38);
  s = {127, 255};
  EXPECT_THROW(dequantize_mxfp8_row(c.data(), s.data(), 64, out.data()), Error);
  EXPECT_THROW(dequantize_mxfp4_row(p.data(), s.data(), 64, out.data()), Error);
  s = {127, 127};
  EXPECT_NO_THROW(dequantize_mxfp8_row(c.data(), s.data(), 64, out.data()));
  for (uint8_t nan : {0x7F, 0xFF}) {
    c[5] = nan;
    EXPECT_THROW(dequantize_mxfp8_row(c.data(), s.data(), 64, out.data()), Error);
  }
  // A code * scale past FLT_MAX would silently be Inf.
  std::fill(p.begin(), p.end(), e2m1_pack(7, 7));
  s = {254, 127};
  EXPECT_THROW(dequantize_mxfp4_row(p.data(), s.data(), 64, out.data()), Error);
  std::fill(p.begin(), p.end(), e2m1_pack(1, 1));  // 0.5 * 2^127 fits
  EXPECT_NO_THROW(dequantize_mxfp4_row(p.data(), s.data(), 64, out.data()));
  EXPECT_EQ(out[0], std::ldexp(1.0f, 126));
}

}  // namespace
