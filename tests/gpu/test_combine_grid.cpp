// tests/gpu/test_combine_grid.cpp: the combine's launch shape (src/cuda/smxx/combine_grid.h), on
// the CPU: every (token, 128-column chunk) of the output is visited by exactly one warp, within
// the CTA cap, and decode sizes keep one chunk per slice.
#include <gtest/gtest.h>

#include <vector>

#include "smxx/combine_grid.h"

namespace mxmoe::smxx {
namespace {

// The kernel's loops (combine.cu): CTA (x, y), warp w: tokens x * warps + w + i * groups * warps,
// chunks y * chunks + c for c < chunks while the chunk starts inside the row.
void check_coverage(int T, int H) {
  const CombineGrid g = combine_grid(T, H);
  ASSERT_GE(g.groups, 1);
  ASSERT_GE(g.slices, 1);
  ASSERT_GE(g.chunks, 1);
  EXPECT_LE(static_cast<int64_t>(g.groups) * g.slices, kCombineMaxCtas) << "T " << T;
  const int row_chunks = (H + kCombineChunk - 1) / kCombineChunk;
  EXPECT_GE(g.slices * g.chunks, row_chunks);
  EXPECT_LT((g.slices - 1) * g.chunks, row_chunks) << "a slice with no column";
  std::vector<int> seen(static_cast<size_t>(T) * row_chunks, 0);
  for (int x = 0; x < g.groups; ++x)
    for (int y = 0; y < g.slices; ++y)
      for (int w = 0; w < kCombineWarps; ++w)
        for (int t = x * kCombineWarps + w; t < T; t += g.groups * kCombineWarps)
          for (int c = 0; c < g.chunks && (y * g.chunks + c) * kCombineChunk < H; ++c)
            ++seen[static_cast<size_t>(t) * row_chunks + y * g.chunks + c];
  int bad = 0;
  for (size_t i = 0; i < seen.size(); ++i) bad += seen[i] != 1;
  EXPECT_EQ(bad, 0) << "T " << T << " H " << H;
}

TEST(CombineGrid, EveryTokenAndChunkOnce) {
  for (int H : {3584, 7168, 96, 130, 128 * 28 + 4})
    for (int T : {1, 2, 7, 8, 9, 63, 64, 255, 584, 585, 600, 1024, 2047, 4096, 5000, 16384, 40000})
      check_coverage(T, H);
}

TEST(CombineGrid, DecodeSpreadsPrefillTakesWholeRows) {
  // Decode: one chunk per slice (a step's reads over H / 128 CTAs), as before the row slices.
  for (int T : {1, 8, 64, 584}) {
    const CombineGrid g = combine_grid(T, 3584);
    EXPECT_EQ(g.chunks, 1) << T;
    EXPECT_EQ(g.slices, 28) << T;
  }
  // EP16 / TP8xEP4 prefill: the cap's 2048 CTAs, every token's slots tested once per slice.
  const CombineGrid a = combine_grid(16384, 3584);
  EXPECT_EQ(a.slices, 1);
  EXPECT_EQ(a.chunks, 28);
  EXPECT_EQ(a.groups, 2048);
  const CombineGrid b = combine_grid(4096, 3584);
  EXPECT_EQ(b.slices, 4);
  EXPECT_EQ(b.chunks, 7);
  EXPECT_EQ(b.groups, 512);
}

}  // namespace
}  // namespace mxmoe::smxx
