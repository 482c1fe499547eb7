// The router's warp routine (src/cuda/smxx/route_warp.cuh) run on the CPU by tests/gpu/block_sim.h
// (label cpu): its three ways to pick (register keys with the threshold select, register keys
// with the k argmax rounds, shared-memory keys), and the wide CTA's routine (route_cta.cuh: the
// keys from kRouteWideWarps warps, then the select), against route_kimi, the CPU reference, and
// against each other bit for bit (NaN tokens included). This checks the routine's algorithm
// where no GPU is at hand; the GPU tests (test_gpu_glue_kernels: GpuRoute.*, GpuPrologue.*)
// check the compiled kernels on the device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "block_sim.h"  // first: the intrinsics the device header calls
#include "mxmoe/reference.h"
#include "smxx/route_cta.cuh"
#include "smxx/route_warp.cuh"

namespace {

using namespace mxmoe;

struct Case {
  int T, E, k;
  bool renormalize = true;
  float scaling = 1.0f;
  enum Logits { kNormal, kTies, kUnderflow, kClustered, kPairs } logits = kNormal;
  bool bias = true, minus_inf = false, nan = false;
  float logit_scale = 2.0f, bias_scale = 0.1f;  // kNormal: logit ~ N(0, scale), bias likewise
};

struct Inputs {
  std::vector<float> logits, bias;
};

Inputs make_inputs(const Case& c, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Inputs in;
  in.logits.resize(static_cast<size_t>(c.T) * c.E);
  in.bias.resize(c.E);
  for (auto& b : in.bias)
    b = c.logits == Case::kTies || c.logits == Case::kClustered ? 0.0f : c.bias_scale * normal(gen);
  if (c.minus_inf)
    for (int e = 0; e < c.E; ++e)
      if (e % 7 != 3) in.bias[e] = -INFINITY;
  for (int t = 0; t < c.T; ++t)
    for (int e = 0; e < c.E; ++e) {
      float v = c.logit_scale * normal(gen);
      if (c.logits == Case::kTies) v = 0.25f * (t % 3);
      if (c.logits == Case::kUnderflow) v -= 120.0f;
      // Lanes 0..15 (e % 32 < 16) hold keys that all pass the select's threshold: its fallback.
      if (c.logits == Case::kClustered && e % 32 < 16) v = 3.0f + 0.01f * (e % 32);
      in.logits[static_cast<size_t>(t) * c.E + e] = v;
    }
  if (c.logits == Case::kPairs)  // experts 2m and 2m + 1 (neighbour lanes) tie: same key
    for (int e = 1; e < c.E; e += 2) {
      in.bias[e] = in.bias[e - 1];
      for (int t = 0; t < c.T; ++t)
        in.logits[static_cast<size_t>(t) * c.E + e] =
            in.logits[static_cast<size_t>(t) * c.E + e - 1];
    }
  if (c.nan && c.T > 3) {
    in.logits[static_cast<size_t>(1) * c.E + c.E / 2] = NAN;
    for (int e = 0; e < c.E; ++e) in.logits[static_cast<size_t>(3) * c.E + e] = NAN;
  }
  return in;
}

enum class Way { kSelect, kRounds, kShared, kWide };
constexpr int kWays = 4;

// The select's scratch must be 8-byte aligned (rank words): the first such word of a vector
// sized with spare words past what it must hold (+2).
uint32_t* aligned8(std::vector<uint32_t>& scratch) {
  return scratch.data() + (reinterpret_cast<uintptr_t>(scratch.data()) % 8 ? 1 : 0);
}

// Every token of the case through one simulated warp (the wide way: one simulated CTA of
// kRouteWideWarps warps), one way.
void route_sim(const Case& c, const Inputs& in, Way way, std::vector<int32_t>* ids,
               std::vector<float>* weights) {
  ids->assign(static_cast<size_t>(c.T) * c.k, -7);
  weights->assign(static_cast<size_t>(c.T) * c.k, -7.0f);
  std::vector<uint32_t> scratch(std::max(c.E, smxx::kRouteSelectWords) + 2);
  uint32_t* aligned = aligned8(scratch);
  const float* bias = c.bias ? in.bias.data() : nullptr;
  if (way == Way::kWide) {
    std::vector<uint32_t> keys(smxx::kRouteRegMax, 0xdeadbeefu);  // every word is written
    block_sim::run_block(smxx::kRouteWideWarps * 32, [&] {
      for (int t = 0; t < c.T; ++t) {
        smxx::route_token_cta(in.logits.data() + static_cast<size_t>(t) * c.E, bias, c.E, c.k,
                              c.renormalize, c.scaling, keys.data(), aligned, t, ids->data(),
                              weights->data());
        __syncthreads();  // warp 0 has read the keys before the next token's are stored
      }
    });
    return;
  }
  block_sim::run_warp([&] {
    for (int t = 0; t < c.T; ++t) {
      const float* row = in.logits.data() + static_cast<size_t>(t) * c.E;
      int32_t* ti = ids->data() + static_cast<size_t>(t) * c.k;
      float* tw = weights->data() + static_cast<size_t>(t) * c.k;
      switch (way) {
        case Way::kSelect:
          smxx::route_token_warp(row, bias, c.E, c.k, c.renormalize, c.scaling, aligned, ti, tw);
          break;
        case Way::kRounds:
          smxx::route_token_warp_regs(row, bias, c.E, c.k, c.renormalize, c.scaling, ti, tw,
                                      nullptr);
          break;
        case Way::kShared:
          smxx::route_token_warp(row, bias, c.E, c.k, c.renormalize, c.scaling, aligned, ti, tw, 0);
          break;
        case Way::kWide:  // routed by the CTA above
          break;
      }
      __syncwarp();
    }
  });
}

void check_case(const Case& c, unsigned seed) {
  SCOPED_TRACE(::testing::Message()
               << "T=" << c.T << " E=" << c.E << " k=" << c.k << " logits=" << c.logits
               << " scales " << c.logit_scale << " / " << c.bias_scale << " seed=" << seed);
  const Inputs in = make_inputs(c, seed);
  std::vector<int32_t> ids[kWays];
  std::vector<float> w[kWays];
  route_sim(c, in, Way::kSelect, &ids[0], &w[0]);
  route_sim(c, in, Way::kRounds, &ids[1], &w[1]);
  route_sim(c, in, Way::kShared, &ids[2], &w[2]);
  route_sim(c, in, Way::kWide, &ids[3], &w[3]);
  for (int v = 1; v < kWays; ++v) {
    EXPECT_EQ(ids[0], ids[v]) << "way " << v << " picks other experts than the select";
    EXPECT_EQ(0, std::memcmp(w[0].data(), w[v].data(), w[0].size() * 4))
        << "way " << v << " weights differ from the select's";
  }
  if (c.nan) return;  // route_kimi rejects NaN logits; the NaN contract is checked on the GPU
  RoutingConfig rc;
  rc.num_experts = c.E;
  rc.top_k = c.k;
  rc.renormalize = c.renormalize;
  rc.scaling_factor = c.scaling;
  std::vector<int32_t> want_ids(ids[0].size());
  std::vector<float> want_w(w[0].size());
  route_kimi(in.logits.data(), c.bias ? in.bias.data() : nullptr, c.T, rc, want_ids.data(),
             want_w.data());
  EXPECT_EQ(ids[0], want_ids);
  // Same fp32 operations in the same order on the same host: equal bit for bit.
  EXPECT_EQ(0, std::memcmp(w[0].data(), want_w.data(), want_w.size() * 4))
      << "weights differ from route_kimi";
}

TEST(RouteWarpSim, KimiTop16Of896) { check_case({6, 896, 16}, 1); }
TEST(RouteWarpSim, NoBiasNoRenormalizeScaled) {
  Case c{4, 896, 16};
  c.bias = false;
  c.renormalize = false;
  c.scaling = 2.5f;
  check_case(c, 2);
}
TEST(RouteWarpSim, TiesGoToTheLowerId) {
  Case c{3, 896, 16};
  c.logits = Case::kTies;
  check_case(c, 3);
}
TEST(RouteWarpSim, UnderflowedSigmoidsLetTheBiasPick) {
  Case c{3, 896, 16};
  c.logits = Case::kUnderflow;
  check_case(c, 4);
}
TEST(RouteWarpSim, ClusteredKeysTakeTheFallback) {
  Case c{3, 896, 16};
  c.logits = Case::kClustered;
  check_case(c, 5);
  c.k = 32;
  check_case(c, 6);
}
TEST(RouteWarpSim, MinusInfBiasMasksExperts) {
  Case c{3, 40, 16};
  c.minus_inf = true;
  check_case(c, 7);
}
TEST(RouteWarpSim, SmallExpertCountsAndWideTopK) {
  check_case({2, 1, 1}, 8);
  check_case({3, 20, 16}, 9);
  check_case({2, 40, 40}, 10);
  check_case({2, 1024, 32}, 11);
  check_case({2, 1024, 33}, 12);
  check_case({2, 896, 64}, 13);
}
// Logits from nearly flat to saturated, biases from none to dominant, k from 1 to 32: the
// select's candidate count moves from k to its fallback bound (k = 24: slots past 16 picked by the
// select itself, at most 32 candidates on some tokens, where k = 32 nearly always has more).
TEST(RouteWarpSim, VariedScalesBiasesAndTopK) {
  unsigned seed = 40;
  for (float ls : {0.01f, 2.0f, 12.0f})
    for (float bs : {0.0f, 0.1f, 2.0f})
      for (int k : {1, 8, 24, 32}) {
        Case c{2, 896, k};
        c.logit_scale = ls;
        c.bias_scale = bs;
        check_case(c, seed++);
      }
}
TEST(RouteWarpSim, NanTokensAgreeAcrossTheFourWays) {
  Case c{5, 896, 16};
  c.nan = true;
  check_case(c, 14);
}

// route_select_warp (the register gather) alone on one simulated warp, each lane's 32 keys from
// keys_of(lane, key); *picks (if given): each lane's my_id. Returns whether it picked (false:
// the caller would run the rounds).
template <class KeysOf>
bool run_select(int k, KeysOf keys_of, std::vector<int32_t>* picks) {
  std::vector<uint32_t> scratch(smxx::kRouteSelectWords + 2);
  uint32_t* aligned = aligned8(scratch);
  if (picks) picks->assign(32, -7);
  bool picked = false;
  block_sim::run_warp([&] {
    const int lane = threadIdx.x % 32;
    uint32_t key[32] = {};
    keys_of(lane, key);
    int32_t my_id = -1;
    const bool ok =
        smxx::route_select_warp<false>(key, smxx::route_max_key(key), k, aligned, &my_id, nullptr);
    if (picks) (*picks)[lane] = my_id;
    if (lane == 0) picked = ok;
  });
  return picked;
}

// The select itself: it must pick (not fall back) on real-looking logits, where its speed
// matters, and fall back on the clustered ones, where its candidate list would overflow.
bool select_picks(const Case& c, unsigned seed) {
  const Inputs in = make_inputs(c, seed);
  return run_select(
      c.k,
      [&](int, uint32_t(&key)[32]) {
        smxx::route_lane_keys(in.logits.data(), in.bias.data(), c.E, key);
      },
      nullptr);
}

TEST(RouteWarpSim, SelectPicksRealLogitsAndDefersClusteredOnes) {
  for (unsigned seed = 20; seed < 24; ++seed) EXPECT_TRUE(select_picks({1, 896, 16}, seed));
  Case c{1, 896, 16};
  c.logits = Case::kClustered;
  EXPECT_FALSE(select_picks(c, 30));
}

// Every key tied with a neighbour lane's: the threshold takes both of a tied pair, the select
// still picks (not the fallback), and the lower id of each pair ranks first, as in route_kimi.
TEST(RouteWarpSim, SelectPicksThroughTiedPairs) {
  Case c{4, 896, 16};
  c.logits = Case::kPairs;
  check_case(c, 15);
  c.T = 1;
  for (unsigned seed = 50; seed < 54; ++seed) EXPECT_TRUE(select_picks(c, seed));
}

// The candidate list in scan order (lane, then i) puts lane 31's second key last: with 33
// candidates it is the 33rd, ranked by the second pass only, and it is the best key, slot 0.
TEST(RouteWarpSim, SelectRanksTheThirtyThirdCandidate) {
  std::vector<int32_t> picks;
  const bool picked = run_select(
      32,
      [](int lane, uint32_t(&key)[32]) {
        key[0] = 1000u + static_cast<uint32_t>(lane);  // the 32 lane bests; tau is the least
        if (lane == 31) key[1] = 5000u;                // expert 63: the best of all
      },
      &picks);
  ASSERT_TRUE(picked);
  std::vector<int32_t> want{63};
  for (int e = 31; e >= 1; --e) want.push_back(e);
  EXPECT_EQ(picks, want);
}

}  // namespace
