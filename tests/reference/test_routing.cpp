// test_routing.cpp: route_kimi against a brute-force full sort, and router_logits against fp64.
//
// The brute force computes the same fp32 selection keys (formats.h situ_sigmoid + bias, whose
// sigmoid is checked against double here) and sorts all experts with std::sort by (key desc, id
// asc): an independent selection algorithm and tie rule on the same keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "fixture.h"
#include "mxmoe/reference.h"

namespace {

using namespace mxmoe;

void brute_force(const float* logits, const float* bias, int E, int k, bool renorm, float sf,
                 std::vector<int>* ids, std::vector<double>* w) {
  std::vector<float> key(E);
  for (int e = 0; e < E; ++e) key[e] = situ_sigmoid(logits[e]) + (bias ? bias[e] : 0.0f);
  std::vector<int> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    if (key[a] != key[b]) return key[a] > key[b];
    return a < b;
  });
  ids->assign(order.begin(), order.begin() + k);
  double sum = 0;
  for (int j = 0; j < k; ++j) sum += 1.0 / (1.0 + std::exp(-static_cast<double>(logits[order[j]])));
  w->clear();
  for (int j = 0; j < k; ++j) {
    const double s = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[order[j]])));
    w->push_back(renorm ? s / sum * sf : s * sf);
  }
}

TEST(Routing, SigmoidIsAccurate) {
  for (double z = -80; z <= 80; z += 0.01) {
    const float zf = static_cast<float>(z);
    const double ref = 1.0 / (1.0 + std::exp(-static_cast<double>(zf)));
    ASSERT_NEAR(situ_sigmoid(zf), ref, ref * 1e-6) << z;
  }
}

TEST(Routing, MatchesBruteForceIncludingTies) {
  std::mt19937 rng(1);
  for (int E : {8, 16, 64, 896})
    for (int k : {1, 2, 4, 16})
      for (int variant = 0; variant < 4; ++variant) {
        if (k > E) continue;
        const int T = 20;
        // variant 0: continuous logits; 1: logits on a coarse grid (many exact ties), no bias;
        // 2: coarse logits and coarse bias; 3: all equal (every key ties: ids 0..k-1).
        std::normal_distribution<float> n(0.0f, 2.0f);
        std::uniform_int_distribution<int> grid(-3, 3);
        std::vector<float> logits(static_cast<size_t>(T) * E), bias(E);
        for (auto& l : logits) l = variant == 0 ? n(rng) : variant == 3 ? 0.5f : 0.25f * grid(rng);
        for (auto& b : bias)
          b = variant == 2 ? 0.125f * grid(rng) : variant == 0 ? 0.1f * n(rng) : 0.0f;
        const bool renorm = variant != 1;
        const float sf = variant == 2 ? 2.5f : 1.0f;
        RoutingConfig rc{E, k, renorm, sf};
        std::vector<int32_t> ids(static_cast<size_t>(T) * k);
        std::vector<float> w(ids.size());
        route_kimi(logits.data(), variant == 1 ? nullptr : bias.data(), T, rc, ids.data(),
                   w.data());
        for (int t = 0; t < T; ++t) {
          std::vector<int> bi;
          std::vector<double> bw;
          brute_force(&logits[t * E], variant == 1 ? nullptr : bias.data(), E, k, renorm, sf, &bi,
                      &bw);
          double wsum = 0;
          for (int j = 0; j < k; ++j) {
            ASSERT_EQ(ids[t * k + j], bi[j]) << "E " << E << " k " << k << " variant " << variant;
            EXPECT_NEAR(w[t * k + j], bw[j], 1e-6 * bw[j] + 1e-12);
            wsum += w[t * k + j];
          }
          if (renorm) {
            EXPECT_NEAR(wsum, sf, 1e-5 * sf);
          }
          if (variant == 3) {
            for (int j = 0; j < k; ++j) EXPECT_EQ(ids[t * k + j], j);
          }
        }
      }
}

TEST(Routing, BiasSelectsButDoesNotWeigh) {
  // Expert 3 has the lowest logit but a large bias: chosen, with its own (small) sigmoid weight.
  const float logits[4] = {2.0f, 1.0f, 0.5f, -3.0f}, bias[4] = {0, 0, 0, 5.0f};
  int32_t ids[2];
  float w[2];
  route_kimi(logits, bias, 1, RoutingConfig{4, 2, true, 1.0f}, ids, w);
  EXPECT_EQ(ids[0], 3);
  EXPECT_EQ(ids[1], 0);
  const double s3 = 1 / (1 + std::exp(3.0)), s0 = 1 / (1 + std::exp(-2.0));
  EXPECT_NEAR(w[0], s3 / (s3 + s0), 1e-6);
  EXPECT_NEAR(w[1], s0 / (s3 + s0), 1e-6);
}

TEST(Routing, BadInputThrows) {
  float logits[4] = {0, 1, 2, 3};
  int32_t ids[8];
  float w[8];
  EXPECT_THROW(route_kimi(logits, nullptr, 1, RoutingConfig{4, 5, true, 1.0f}, ids, w), Error);
  EXPECT_THROW(route_kimi(logits, nullptr, 1, RoutingConfig{4, 0, true, 1.0f}, ids, w), Error);
  logits[2] = NAN;
  EXPECT_THROW(route_kimi(logits, nullptr, 1, RoutingConfig{4, 2, true, 1.0f}, ids, w), Error);
}

TEST(Routing, RouterLogitsAgainstFp64) {
  auto tl = fixture::make_layer({256, 64, 64, 16, 4, 1}, 5, true);
  const int T = 6, D = 256, E = 16;
  std::mt19937 rng(6);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<uint16_t> x(static_cast<size_t>(T) * D);
  for (auto& v : x) v = float_to_bf16(n(rng));
  std::vector<float> logits(static_cast<size_t>(T) * E);
  router_logits(tl->layer, x.data(), T, logits.data());
  const auto Wg = fixture::dequant(tl->layer.router);
  const auto xd = fixture::dequant(Bf16View{x.data(), T, D});
  for (int t = 0; t < T; ++t) {
    const std::vector<double> xt(xd.begin() + t * D, xd.begin() + (t + 1) * D);
    const auto l = fixture::matvec(Wg, E, D, xt);
    for (int e = 0; e < E; ++e)
      ASSERT_EQ(logits[t * E + e], static_cast<float>(l[e])) << t << "," << e;
  }
  MoeLayer no_router = tl->layer;
  no_router.router = Bf16View{};
  EXPECT_THROW(router_logits(no_router, x.data(), T, logits.data()), Error);
}

}  // namespace
