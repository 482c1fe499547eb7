// tests/gpu/test_direct_stores.cpp: run_moe's rule for GEMM2's direct stores of single-pair
// tokens (src/cuda/runtime/direct_stores.h), on the CPU: the expected share against a simulation
// of the routing it models, and the decisions at Kimi-K3's layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "runtime/direct_stores.h"

namespace mxmoe::runtime {
namespace {

// Share of tokens with exactly one of their k distinct uniform picks (of total) in [0, local).
double simulated_single_share(int local, int total, int k, int tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> perm(total);
  int single = 0;
  for (int t = 0; t < tokens; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    int owned = 0;
    for (int j = 0; j < k; ++j) {  // partial Fisher-Yates: k distinct experts
      std::uniform_int_distribution<int> d(j, total - 1);
      std::swap(perm[j], perm[d(rng)]);
      owned += perm[j] < local;
    }
    single += owned == 1;
  }
  return static_cast<double>(single) / tokens;
}

TEST(DirectStores, ExpectedShareMatchesSimulatedRouting) {
  struct Case {
    int local, total, k;
  };
  for (const Case c : {Case{56, 896, 16}, Case{224, 896, 16}, Case{112, 896, 16}, Case{28, 896, 16},
                       Case{8, 64, 6}, Case{1, 8, 2}}) {
    const double want = simulated_single_share(c.local, c.total, c.k, 40000, 7);
    const double got = expected_single_pair_share(c.local, c.total, c.k);
    EXPECT_NEAR(got, want, 0.02) << c.local << " of " << c.total << ", k " << c.k;
  }
}

TEST(DirectStores, DecisionsAtKimiLayouts) {
  EXPECT_TRUE(use_direct_gemm2_stores(56, 896, 16));    // EP16: 38%
  EXPECT_TRUE(use_direct_gemm2_stores(112, 896, 16));   // EP8: 27%
  EXPECT_FALSE(use_direct_gemm2_stores(224, 896, 16));  // TP8 x EP4: 5%
  EXPECT_FALSE(use_direct_gemm2_stores(896, 896, 16));  // the whole layer: every token owns 16
  EXPECT_TRUE(use_direct_gemm2_stores(896, 896, 1));    // top-1 on one rank: every token single
  EXPECT_FALSE(use_direct_gemm2_stores(0, 896, 16));
  EXPECT_FALSE(use_direct_gemm2_stores(56, 0, 16));
  EXPECT_FALSE(use_direct_gemm2_stores(56, 896, 0));
  EXPECT_NEAR(expected_single_pair_share(56, 896, 16), 0.383, 0.001);
}

}  // namespace
}  // namespace mxmoe::runtime
