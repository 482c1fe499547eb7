// test_weight_layout.cpp: w1/w3 -> w13 -> w1/w3 is bit-exact, w13's row order is the documented
// 8-row interleave (checked against a restatement of the layout, and against w13_row), and bad
// shapes are errors.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "mxmoe/weight_layout.h"

namespace mxmoe {
namespace {

struct Mat {
  std::vector<uint8_t> packed, scales;
  Mxfp4View view(int rows, int k) const {
    Mxfp4View v;
    v.packed = packed.data();
    v.scales = scales.data();
    v.rows = rows;
    v.k = k;
    return v;
  }
};

// Every byte distinct-ish and tagged by matrix, so a misplaced row cannot go unnoticed.
Mat make(int rows, int k, uint32_t tag) {
  Mat m;
  m.packed.resize(size_t(rows) * k / 2);
  m.scales.resize(size_t(rows) * k / 32);
  uint32_t x = tag * 2654435761u + 12345;
  for (auto& b : m.packed) b = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  for (auto& b : m.scales) b = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  return m;
}

TEST(WeightLayout, FuseUnfuseBitExact) {
  for (int I : {8, 16, 24, 96}) {
    for (int K : {32, 64, 3584 / 16}) {
      SCOPED_TRACE("I=" + std::to_string(I) + " K=" + std::to_string(K));
      const Mat w1 = make(I, K, 1), w3 = make(I, K, 3);
      std::vector<uint8_t> p13(size_t(2) * I * K / 2, 0xAA), s13(size_t(2) * I * K / 32, 0xAA);
      fuse_w13(w1.view(I, K), w3.view(I, K), p13.data(), s13.data());
      const size_t pb = K / 2, sb = K / 32;
      // The layout restated from weight_layout.h's comment: groups of 8 gate rows, then 8 up rows.
      for (int r = 0; r < 2 * I; ++r) {
        const int g = r / 16, within = r % 16;
        const Mat& src = within < 8 ? w1 : w3;
        const int srow = 8 * g + within % 8;
        ASSERT_EQ(std::memcmp(&p13[r * pb], &src.packed[srow * pb], pb), 0) << "packed row " << r;
        ASSERT_EQ(std::memcmp(&s13[r * sb], &src.scales[srow * sb], sb), 0) << "scale row " << r;
      }
      // Elementwise against w13_row(): every nibble of gate/up row i sits in row w13_row(i, .).
      for (int i = 0; i < I; ++i) {
        for (int k = 0; k < K; ++k) {
          for (int up = 0; up < 2; ++up) {
            const Mat& src = up ? w3 : w1;
            const size_t r = static_cast<size_t>(w13_row(i, up != 0));
            const uint8_t a = (src.packed[i * pb + k / 2] >> (4 * (k % 2))) & 15;
            const uint8_t b = (p13[r * pb + k / 2] >> (4 * (k % 2))) & 15;
            ASSERT_EQ(a, b) << "i=" << i << " k=" << k << " up=" << up;
            ASSERT_EQ(src.scales[i * sb + k / 32], s13[r * sb + k / 32]);
          }
        }
      }
      Mxfp4View f;
      f.packed = p13.data();
      f.scales = s13.data();
      f.rows = 2 * I;
      f.k = K;
      Mat b1 = make(I, K, 9), b3 = make(I, K, 10);  // garbage that must be overwritten
      unfuse_w13(f, b1.packed.data(), b1.scales.data(), b3.packed.data(), b3.scales.data());
      EXPECT_EQ(b1.packed, w1.packed);
      EXPECT_EQ(b1.scales, w1.scales);
      EXPECT_EQ(b3.packed, w3.packed);
      EXPECT_EQ(b3.scales, w3.scales);
    }
  }
}

TEST(WeightLayout, W13RowIsABijection) {
  const int I = 3072;
  std::vector<int> hits(2 * I, 0);
  for (int i = 0; i < I; ++i) {
    ++hits[w13_row(i, false)];
    ++hits[w13_row(i, true)];
    EXPECT_EQ(w13_row(i, true) - w13_row(i, false), 8);  // gate and up 8 rows apart
  }
  for (int r = 0; r < 2 * I; ++r) ASSERT_EQ(hits[r], 1) << r;
}

TEST(WeightLayout, BadShapes) {
  const Mat a = make(16, 64, 1), b = make(16, 64, 2), c = make(12, 64, 3), d = make(16, 32, 4);
  std::vector<uint8_t> p(4096), s(4096);
  EXPECT_THROW(fuse_w13(a.view(16, 64), d.view(16, 32), p.data(), s.data()), Error);  // K differs
  EXPECT_THROW(fuse_w13(a.view(16, 64), b.view(8, 64), p.data(), s.data()), Error);   // I differs
  EXPECT_THROW(fuse_w13(c.view(12, 64), c.view(12, 64), p.data(), s.data()), Error);  // I % 8
  EXPECT_THROW(fuse_w13(a.view(16, 48), b.view(16, 48), p.data(), s.data()), Error);  // K % 32
  Mxfp4View f = a.view(8, 64);  // 8 rows: not a whole 16-row gate/up group
  EXPECT_THROW(unfuse_w13(f, p.data(), s.data(), p.data(), s.data()), Error);
  Mxfp4View null_view;
  null_view.rows = 16;
  null_view.k = 64;
  EXPECT_THROW(fuse_w13(null_view, b.view(16, 64), p.data(), s.data()), Error);
}

}  // namespace
}  // namespace mxmoe
