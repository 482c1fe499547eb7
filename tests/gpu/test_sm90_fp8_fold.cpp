// tests/gpu/test_sm90_fp8_fold.cpp (label cpu): the exact MXFP4 -> E4M3 weight fold
// (src/cuda/sm90/fp8_fold.h) against the MXFP4 values it must reproduce, no GPU needed.
//
// Checks: the per-magnitude windows (from formats.h's codecs) and their common part [-8, 6];
// unfold == e2m1 * 2^s for every element (random rows, the window edges, E4M3 subnormals, the
// extreme scale bytes 0 and 254); rows just inside / just outside the window; the fallback
// (split rows get extra folds, the tile's other rows stay exact, several folds); bad input
// throws; the multi-expert set's prefix.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "mxmoe/common.h"
#include "mxmoe/formats.h"
#include "sm90/fp8_fold.h"

namespace mxmoe::sm90 {
namespace {

struct Mx4 {
  int rows = 0, k = 0;
  std::vector<uint8_t> packed, scales;
  Mx4(int r, int kk)
      : rows(r),
        k(kk),
        packed(static_cast<size_t>(r) * kk / 2),
        scales(static_cast<size_t>(r) * kk / 32) {}
  void set(int r, int c, uint8_t code) {
    uint8_t& b = packed[static_cast<size_t>(r) * k / 2 + c / 2];
    b = (c & 1) ? static_cast<uint8_t>((b & 0x0F) | (code << 4))
                : static_cast<uint8_t>((b & 0xF0) | code);
  }
  uint8_t& scale(int r, int blk) { return scales[static_cast<size_t>(r) * k / 32 + blk]; }
  double value(int r, int c) const {
    return std::ldexp(
        static_cast<double>(e2m1_to_float(e2m1_get(&packed[static_cast<size_t>(r) * k / 2], c))),
        scales[static_cast<size_t>(r) * k / 32 + c / 32] - 127);
  }
};

Mx4 random_mx4(uint64_t seed, int rows, int k, int s_lo, int s_hi) {
  Mx4 m(rows, k);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255), sc(s_lo, s_hi);
  for (auto& b : m.packed) b = static_cast<uint8_t>(byte(rng));
  for (auto& s : m.scales) s = static_cast<uint8_t>(sc(rng));
  return m;
}

// Every element of m must come back exactly; returns the number of subnormal E4M3 codes seen.
int64_t expect_exact(const Mx4& src, const Fp8FoldedMatrix& f) {
  int64_t bad = 0, subnormal = 0;
  for (int r = 0; r < src.rows; ++r) {
    for (int c = 0; c < src.k; ++c) {
      const double want = src.value(r, c), got = fp8_folded_value(f, r, c);
      if (want != got && ++bad <= 5)
        ADD_FAILURE() << "row " << r << " k " << c << ": folded " << got << ", mxfp4 " << want;
      const uint8_t code = f.w[fold_offset(r, c, src.k)];
      if ((code & 0x78) == 0 && (code & 7) != 0) ++subnormal;
    }
  }
  EXPECT_EQ(bad, 0);
  return subnormal;
}

TEST(Fp8Fold, WindowsFromTheCodecs) {
  // magnitude codes 1..7 = 0.5, 1, 1.5, 2, 3, 4, 6
  const int lo[8] = {0, -8, -9, -8, -10, -9, -11, -10};
  const int hi[8] = {0, 9, 8, 8, 7, 7, 6, 6};
  int all_lo = -100, all_hi = 100;
  for (int m = 1; m < 8; ++m) {
    int l, h;
    e2m1_fold_window(m, &l, &h);
    EXPECT_EQ(l, lo[m]) << "magnitude code " << m;
    EXPECT_EQ(h, hi[m]) << "magnitude code " << m;
    all_lo = std::max(all_lo, l);
    all_hi = std::min(all_hi, h);
  }
  EXPECT_EQ(all_lo, -8);  // KIMI_K3.md: e2m1 * 2^d exact in E4M3 for -8 <= d <= 6
  EXPECT_EQ(all_hi, 6);
  EXPECT_THROW(e2m1_fold_window(0, &all_lo, &all_hi), Error);
}

TEST(Fp8Fold, RandomQatLikeRowsFoldExactlyWithOneFold) {
  const Mx4 m = random_mx4(1, 128, 512, 115, 129);  // spread 14: the edge of the window
  Fp8FoldedMatrix f;
  fold_mxfp4_to_e4m3(m.packed.data(), m.scales.data(), m.rows, m.k, &f);
  EXPECT_EQ(f.rows_split, 0);
  EXPECT_EQ(f.max_folds, 1);
  EXPECT_TRUE(f.extra_w.empty());
  const int64_t sub = expect_exact(m, f);
  EXPECT_GT(sub, 0) << "spread 14 with magnitude 0.5 at the low end must produce subnormal E4M3";
}

TEST(Fp8Fold, WindowEdgesAndSubnormals) {
  Mx4 m(64, 128);  // 4 blocks per row
  for (int r = 0; r < 64; ++r)
    for (int b = 0; b < 4; ++b) m.scale(r, b) = 120;
  // row 0: spread exactly 14 with 0.5 in the low block and 6 in the high one: one fold,
  // 0.5 * 2^-8 = 2^-9 is E4M3's smallest subnormal.
  m.scale(0, 0) = 100;
  m.set(0, 0, 1);  // 0.5 * 2^-27
  m.scale(0, 3) = 114;
  m.set(0, 96, 7);  // 6 * 2^-13
  // row 1: spread 15 with the same magnitudes: outside the window -> two folds
  m.scale(1, 0) = 100;
  m.set(1, 0, 1 | 8);  // -0.5
  m.scale(1, 3) = 115;
  m.set(1, 96, 7);
  // row 2: spread 15 but only magnitude 1.0 (window [-9, 8], 18 wide): still one fold
  m.scale(2, 0) = 100;
  m.set(2, 0, 2);
  m.scale(2, 3) = 115;
  m.set(2, 96, 2);
  // row 3: spread 40 in blocks that are all zero: no constraint, one fold
  m.scale(3, 1) = 160;
  m.scale(3, 2) = 10;
  m.set(3, 0, 5);
  // row 4: the extreme scale bytes 0 and 254 in separate rows' reach: two folds
  m.scale(4, 0) = 0;
  m.set(4, 3, 3);
  m.scale(4, 2) = 254;
  m.set(4, 70, 6);
  // row 5: 1.5 * 2^-8 (= 3 * 2^-9) is a subnormal code with two mantissa bits
  m.scale(5, 0) = 106;
  m.set(5, 5, 3);
  m.scale(5, 1) = 120;
  m.set(5, 40, 7);
  Fp8FoldedMatrix f;
  fold_mxfp4_to_e4m3(m.packed.data(), m.scales.data(), m.rows, m.k, &f);
  EXPECT_EQ(f.rows_split, 2) << "rows 1 and 4 only";
  EXPECT_EQ(f.max_folds, 2);
  ASSERT_EQ(f.tile_extra.size(), 1u);
  EXPECT_EQ(f.tile_extra[0], 1);
  EXPECT_EQ(f.extra_w.size(), 64u * 128u);
  expect_exact(m, f);
  // row 0: R = -19 puts 0.5 * 2^-27 on the subnormal 2^-9 and 6 * 2^-13 on 384
  EXPECT_EQ(f.row_exp[0], -19);
  EXPECT_EQ(f.w[fold_offset(0, 0, 128)], 0x01);
  EXPECT_EQ(f.w[fold_offset(5, 5, 128)] & 0x7F, 0x03) << "3 * 2^-9";
  // rows that needed one fold keep R in the extra fold and have zero codes there
  EXPECT_EQ(f.extra_exp[0], f.row_exp[0]);
  for (int c = 0; c < 128; ++c) EXPECT_EQ(f.extra_w[fold_offset(0, c, 128)], 0);
}

TEST(Fp8Fold, ManyFoldsAndUnaffectedNeighbours) {
  Mx4 m = random_mx4(7, 192, 256, 118, 126);
  // tile 1, row 70: four clusters of scales 40 binades apart -> 4 folds
  for (int b = 0; b < 8; ++b) m.scale(70, b) = static_cast<uint8_t>(20 + 40 * (b % 4));
  // tile 2, row 130: alternating 2 clusters
  for (int b = 0; b < 8; ++b) m.scale(130, b) = static_cast<uint8_t>(b % 2 ? 200 : 150);
  Fp8FoldedMatrix f;
  fold_mxfp4_to_e4m3(m.packed.data(), m.scales.data(), m.rows, m.k, &f);
  EXPECT_EQ(f.rows_split, 2);
  EXPECT_EQ(f.max_folds, 4);
  EXPECT_EQ(f.tile_extra, (std::vector<int32_t>{0, 3, 1}));
  EXPECT_EQ(f.extra_w.size(), 4u * 64 * 256);
  EXPECT_EQ(f.extra_exp.size(), 4u * 64);
  expect_exact(m, f);

  Fp8FoldedSet set;
  append_folded(f, &set);
  append_folded(f, &set);
  EXPECT_EQ(set.experts, 2);
  EXPECT_EQ(set.extra_begin, (std::vector<int32_t>{0, 0, 3, 4, 4, 7, 8}));
  EXPECT_EQ(set.w.size(), 2u * 192 * 256);
  EXPECT_EQ(set.rows_split, 4);
  Fp8FoldedMatrix other;
  const Mx4 small = random_mx4(3, 64, 256, 120, 121);
  fold_mxfp4_to_e4m3(small.packed.data(), small.scales.data(), 64, 256, &other);
  EXPECT_THROW(append_folded(other, &set), Error);
}

TEST(Fp8Fold, BadInputThrows) {
  Mx4 m = random_mx4(2, 64, 128, 120, 125);
  Fp8FoldedMatrix f;
  EXPECT_THROW(fold_mxfp4_to_e4m3(m.packed.data(), m.scales.data(), 32, 128, &f), Error);
  EXPECT_THROW(fold_mxfp4_to_e4m3(m.packed.data(), m.scales.data(), 64, 64, &f), Error);
  m.scale(5, 2) = 255;
  EXPECT_THROW(fold_mxfp4_to_e4m3(m.packed.data(), m.scales.data(), 64, 128, &f), Error);
}

TEST(Fp8Fold, TileOrderIsTheSwizzledSharedMemoryOrder) {
  // Within a tile, the 16-byte chunk c of row r sits at chunk c ^ (r % 8): a permutation.
  std::vector<int> seen(kFoldTileBytes * 2, 0);
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 256; ++c) ++seen[fold_offset(r, c, 256)];
  for (int v : seen) EXPECT_EQ(v, 1);
  EXPECT_EQ(fold_offset(1, 0, 256), 128u + 16u);
  EXPECT_EQ(fold_offset(0, 128, 256), static_cast<size_t>(kFoldTileBytes));
  EXPECT_EQ(fold_offset(64, 0, 256), 2u * kFoldTileBytes);
}

}  // namespace
}  // namespace mxmoe::sm90
