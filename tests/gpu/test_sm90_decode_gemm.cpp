// tests/gpu/test_sm90_decode_gemm.cpp: the SM90 decode grouped GEMM (src/cuda/sm90/decode_gemm*)
// against the CPU computation of sm90_gemm_check.h (the same checks as the tiled kernel's tests):
// awkward row counts (0, 1, odd, experts with no rows, more than one token tile), every split
// count (1, 2, 4, 8 and the heuristic; splits larger than the K steps leave empty slices),
// run-to-run bit identity, CUDA-graph replay, Kimi-K3 sizes, the tile list taken from the top-k
// ids before the wait (DecodeSpec: bit-identical to the plain kernels); and the tiled kernel's
// 16-token path, kept reachable with kGemmTiled. The split heuristic is checked on the host.
//
// Timings (DISABLED_, not a correctness test):
//   test_sm90_decode_gemm --gtest_also_run_disabled_tests --gtest_filter='*DecodeBench*'
// EP16 (56 experts, I 3072, 1 per token) and TP8xEP4 (224 experts, I 384, 4 per token), latent
// 3584; each timed launch follows a 256 MB L2 flush; median of 15 CUDA-event timings; GB/s of the
// weights of the experts hit, against the SM copy rate (3917 GB/s, bench/RESULTS.md).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "cta_timeline_stats.h"
#include "sm90/decode_gemm.h"
#include "sm90/grouped_gemm.h"
#include "sm90_gemm_check.h"

namespace mxmoe::sm90 {
namespace {

using namespace check;

const std::vector<int> kAwkwardRows = {0, 1, 3, 17, 0, 118, 2, 0, 33, 1};

TEST(Sm90DecodeSplit, HostHeuristic) {
  // 132 SMs, 5 / 5 / 4 / 3 CTAs per SM for split 1 / 2 / 4 / 8 (any plausible occupancy).
  const int slots[4] = {132 * 5, 132 * 5, 132 * 4, 132 * 3};
  // EP16 T=1, GEMM1: 96 tiles x 56 steps: split so the 96 tiles fill the device.
  EXPECT_GT(decode_split_k(96, 56, 1, 56, slots), 1);
  // EP16 T=1, GEMM2: 56 tiles x 48 steps.
  EXPECT_GT(decode_split_k(56, 48, 1, 56, slots), 1);
  // EP16 T=64: thousands of tiles, no split.
  EXPECT_EQ(decode_split_k(96, 56, 64, 56, slots), 1);
  EXPECT_EQ(decode_split_k(56, 48, 64, 56, slots), 1);
  // Never more CTAs per tile than K steps.
  EXPECT_LE(decode_split_k(56, 1, 1, 1, slots), 1);
  EXPECT_LE(decode_split_k(56, 3, 1, 1, slots), 2);
  for (int rows : {1, 2, 4, 16, 64, 256, 900}) {
    const int s = decode_split_k(12, 56, rows, 224, slots);
    EXPECT_TRUE(s == 1 || s == 2 || s == 4 || s == 8) << s;
  }
}

TEST(Sm90DecodeSpec, SmallRuleHost) {
  // The default rule's boundary (decode_gemm.h, kDecodeSpecSmall: bench/NOTES.md D round 22):
  // the cases the H200 A/Bs saw gain (GEMM2 streams <= ~5.5 MB) in, those that lost or were
  // neutral out. Kimi-K3's routed experts are H = 3584 wide.
  // EP16: 56 local experts of I 3072 (5.25 MiB each), rows hint = T.
  EXPECT_TRUE(decode_spec_small(56, 1, 3584, 3072));
  EXPECT_FALSE(decode_spec_small(56, 2, 3584, 3072));
  EXPECT_FALSE(decode_spec_small(56, 4, 3584, 3072));
  EXPECT_FALSE(decode_spec_small(56, 64, 3584, 3072));
  // TP8 x EP4: 224 local experts of I 384 (0.66 MiB each), rows hint = 4 T.
  EXPECT_TRUE(decode_spec_small(224, 4, 3584, 384));
  EXPECT_TRUE(decode_spec_small(224, 8, 3584, 384));
  EXPECT_FALSE(decode_spec_small(224, 16, 3584, 384));
  // The experts reached are capped by the local experts; no rows still count one expert.
  EXPECT_TRUE(decode_spec_small(2, 1000, 3584, 384));
  EXPECT_TRUE(decode_spec_small(56, 0, 3584, 3072));
}

TEST(Sm90DecodeSpec, OwnWindowHost) {
  // The rule's own-inputs window (decode_gemm.h, kDecodeOwnMinRows: bench/NOTES.md D round 39)
  // at Kimi-K3's top-16: {rows hint, ids, inside}.
  struct Case {
    int rows, pairs;
    bool in;
  };
  const Case cases[] = {
      // TP8 x EP4 (4 local rows per token): T = 3..8 in; T = 1, 2 and 16 out.
      {4, 16, false},
      {8, 32, false},
      {12, 48, true},
      {16, 64, true},
      {32, 128, true},
      {64, 256, false},
      // EP16 (1 local row per token): T = 8 in; T = 1..7 and 16 out.
      {1, 16, false},
      {7, 112, false},
      {8, 128, true},
      {16, 256, false},
      // The full layer (16 local rows per token): never (T = 1: 16 ids; T = 3: 48 rows).
      {16, 16, false},
      {32, 32, false},
      {48, 48, false}};
  for (const Case& c : cases)
    EXPECT_EQ(decode_spec_own(c.rows, c.pairs), c.in) << c.rows << " rows, " << c.pairs << " ids";
}

TEST(Sm90DecodeSpec, TakesIdsHost) {
  // The glue's question before it sets up the GPU router's ready flag (run.cpp): the rule's
  // verdict without own inputs, at the rows hint run_moe passes (T x 16 x E / Et). The flag
  // exists only where this is true, so at EP16 T = 8 / 64 and TP8 x EP4 T = 8 / 64 both arms of
  // a MXMOE_ROUTED_SPEC A/B launch the same kernels.
  const int saved = decode_spec();
  decode_set_spec(kDecodeSpecSmall);
  EXPECT_TRUE(decode_spec_takes_ids(56, 1, 3584, 3072));     // EP16 T = 1
  EXPECT_FALSE(decode_spec_takes_ids(56, 2, 3584, 3072));    // EP16 T = 2
  EXPECT_FALSE(decode_spec_takes_ids(56, 8, 3584, 3072));    // EP16 T = 8: the own window's rows
  EXPECT_FALSE(decode_spec_takes_ids(56, 64, 3584, 3072));   // EP16 T = 64
  EXPECT_TRUE(decode_spec_takes_ids(224, 4, 3584, 384));     // TP8 x EP4 T = 1
  EXPECT_TRUE(decode_spec_takes_ids(224, 8, 3584, 384));     // TP8 x EP4 T = 2
  EXPECT_FALSE(decode_spec_takes_ids(224, 32, 3584, 384));   // TP8 x EP4 T = 8
  EXPECT_FALSE(decode_spec_takes_ids(224, 256, 3584, 384));  // TP8 x EP4 T = 64
  // A forced mode answers for itself: Tiles in it, ids taken everywhere; off, nowhere.
  decode_set_spec(kDecodeSpecAll);
  EXPECT_TRUE(decode_spec_takes_ids(56, 64, 3584, 3072));
  decode_set_spec(kDecodeSpecOff);
  EXPECT_FALSE(decode_spec_takes_ids(56, 1, 3584, 3072));
  decode_set_spec(saved);
}

TEST(Sm90DecodeSpec, OwnUsableHost) {
  // The caller offers GEMM1 its own rows only where the bulk copies can read them (run.cpp sets
  // GroupedProblem::gemm1_own_offered from this): 16-byte aligned rows of K or more elements,
  // a stride of whole 16-byte chunks, a top-k. (Host only: the pointers are never read.)
  alignas(16) static const __nv_bfloat16 rows[64] = {};
  Gemm1OwnInputs o;
  EXPECT_FALSE(gemm1_own_usable(o, 32)) << "no rows";
  o.x = rows;
  o.x_stride = 32;
  o.top_k = 16;
  EXPECT_TRUE(gemm1_own_usable(o, 32));
  EXPECT_TRUE(gemm1_own_usable(o, 24)) << "a wider stride than K";
  EXPECT_FALSE(gemm1_own_usable(o, 40)) << "stride below K";
  o.x = rows + 1;
  EXPECT_FALSE(gemm1_own_usable(o, 32)) << "rows 2 bytes off 16";
  o.x = rows;
  o.x_stride = 36;
  EXPECT_FALSE(gemm1_own_usable(o, 32)) << "stride not a multiple of 8 elements";
  o.x_stride = 32;
  o.top_k = 0;
  EXPECT_FALSE(gemm1_own_usable(o, 32)) << "no top-k";
}

TEST(Sm90DecodeBalance, RuleHost) {
  // The rule balances the long-K GEMMs only (decode_gemm.h, kDecodeBalanceLongK: TP8xEP4's
  // 6-step GEMM2 lost under it): Kimi-K3's GEMM1 (K 3584) and EP16's GEMM2 (K 3072) in,
  // TP8xEP4's GEMM2 (K 384) out; 8 steps (K 512) is the last one out.
  for (int K : {3584, 3072, 576}) EXPECT_TRUE(decode_balance_applies(kDecodeBalanceLongK, K)) << K;
  for (int K : {384, 512}) EXPECT_FALSE(decode_balance_applies(kDecodeBalanceLongK, K)) << K;
  EXPECT_TRUE(decode_balance_applies(kDecodeBalanceAlways, 384));
  EXPECT_FALSE(decode_balance_applies(kDecodeBalanceOff, 3584));
  EXPECT_EQ(kDecodeBalanceDefault, kDecodeBalanceLongK);
}

TEST(Sm90DecodeBalance, StrideHost) {
  // decode_tile_stride over tile counts and grids: never past the grid, the same rounds as the
  // unbalanced walk, every tile walked, and the working clusters' tile counts at most one apart.
  for (int nclu : {1, 7, 330, 528, 660}) {
    for (int total = 1; total <= 3000; ++total) {
      const int s = decode_tile_stride(total, nclu, 1);
      ASSERT_GE(s, 1);
      ASSERT_LE(s, nclu) << total << " tiles on " << nclu;
      const int rounds = (total + nclu - 1) / nclu, balanced = (total + s - 1) / s;
      ASSERT_EQ(balanced, rounds) << total << " tiles on " << nclu;
      // Cluster c < s walks tiles c, c + s, ...: ceil((total - c) / s) of them.
      const int most = (total + s - 1) / s, least = (total - (s - 1) + s - 1) / s;
      ASSERT_LE(most - least, 1) << total << " tiles on " << nclu;
      ASSERT_EQ(decode_tile_stride(total, nclu, 0), nclu);
    }
  }
}

TEST(Sm90DecodeGemm, RejectsBadArguments) {
  MXMOE_REQUIRE_SM90();
  TinyLaunches tiny;
  CUDA_OK(tiny.init());
  Gemm1Params p = tiny.p1;
  p.g.kernel = kGemmDecode;
  EXPECT_EQ(launch_gemm1(p, num_sms(), 0), cudaSuccess);
  auto bad1 = [&](auto edit) {
    Gemm1Params q = p;
    edit(q);
    return launch_gemm1(q, num_sms(), 0);
  };
  EXPECT_EQ(bad1([](Gemm1Params& q) { q.g.tile_n = 32; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad1([](Gemm1Params& q) { q.g.split_k = 3; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad1([](Gemm1Params& q) { q.g.split_k = 16; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad1([](Gemm1Params& q) { q.g.kernel = 7; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad1([](Gemm1Params& q) { q.K = 96; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad1([](Gemm1Params& q) { q.x = nullptr; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad1([](Gemm1Params& q) { q.g.max_rows = 0; }), cudaSuccess);  // nothing to do
  EXPECT_EQ(bad1([](Gemm1Params& q) { q.g.max_rows = kDecodeMaxRows + 1; }),
            cudaErrorInvalidValue);  // beyond the kernel's 16-bit rows (never launched)
  // Bulk copies need a 16-byte aligned scale array; the tiled kernel (kGemmAuto) does not.
  EXPECT_EQ(bad1([](Gemm1Params& q) { q.w_scales += 4; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad1([](Gemm1Params& q) {
              q.w_scales += 4;
              q.g.kernel = kGemmAuto;
            }),
            cudaSuccess);
  Gemm2Params p2 = tiny.p2;
  p2.g = p.g;
  EXPECT_EQ(launch_gemm2(p2, num_sms(), 0), cudaSuccess);
  Gemm2Params q2 = p2;
  q2.g.split_k = 5;
  EXPECT_EQ(launch_gemm2(q2, num_sms(), 0), cudaErrorInvalidValue);
  q2 = p2;
  q2.g.num_experts = kDecodeMaxExperts + 1;  // offsets only read on the device: never launched
  EXPECT_EQ(launch_gemm2(q2, num_sms(), 0), cudaErrorInvalidValue);
  CUDA_OK(cudaDeviceSynchronize());
}

// Parameters: (split_k (0 = the heuristic's choice), mainloop: kDecodeBulkRing or
// kDecodeRegStream, DecodeSpec mode). Under a mode (decode_gemm.h, a bit set: the tile list from
// the top-k ids; the first weights before pdl::wait() or after it; GEMM1's early trigger; the
// small-GEMM2 rule) a case's run 0 launches with the mode off and its other runs, graph replays
// included, with it: every run must equal run 0 bit for bit, besides the CPU check
// (sm90_gemm_check.h, SpecCase: the ids hold the case's rows plus ids no local expert owns,
// shuffled). Mode 0 (AllSplits) switches nothing: every run under the process's default (the
// rule; these problems carry no ids, so at most GEMM1's early trigger).
class Sm90DecodeSplitK : public ::testing::TestWithParam<std::tuple<int, int, int>> {
 protected:
  void SetUp() override { decode_set_mainloop(std::get<1>(GetParam())); }
  void TearDown() override { decode_set_mainloop(0); }
  static int split() { return std::get<0>(GetParam()); }
  // A case for the decode kernel at this test's split: the given rows per expert, 16-token tiles.
  template <class Case>
  static Case decode_case(std::vector<int> rows) {
    Case c;
    c.rows = std::move(rows);
    c.tile_n = 16;
    c.kernel = kGemmDecode;
    c.split_k = split();
    c.spec = std::get<2>(GetParam());
    return c;
  }
};

TEST_P(Sm90DecodeSplitK, Gemm1Bf16) {
  MXMOE_REQUIRE_SM90();
  Gemm1Case c = decode_case<Gemm1Case>(kAwkwardRows);
  c.per_expert_beta = true;
  c.K = 512;  // 8 steps: every split has work; split 8 gives one step per CTA
  run_gemm1_case(c);
}
TEST_P(Sm90DecodeSplitK, Gemm1Mxfp8) {
  MXMOE_REQUIRE_SM90();
  Gemm1Case c = decode_case<Gemm1Case>(kAwkwardRows);
  c.mxfp8_out = true;
  c.seed = 3;
  run_gemm1_case(c);  // K 256: 4 steps, split 8 leaves empty slices
}
TEST_P(Sm90DecodeSplitK, Gemm2) {
  MXMOE_REQUIRE_SM90();
  Gemm2Case c = decode_case<Gemm2Case>(kAwkwardRows);
  run_gemm2_case(c);
}
TEST_P(Sm90DecodeSplitK, SmallScales) {
  // Every scale byte <= 128 (2^1): small_scales holds, and with decode_set_small the launches
  // take the kernels compiled without the big-scale test (kSmall); scale bytes drawn from
  // 96..128 reach both ends of the fast path's multiplier, and the four bytes of a scale word
  // mostly differ, so a multiplier taken from the wrong byte or half shows (as a factor of 2^k).
  // Both settings, against the CPU.
  MXMOE_REQUIRE_SM90();
  const bool saved = decode_small();
  for (bool small : {false, true}) {
    decode_set_small(small);
    // (GEMM1's MXFP8 epilogue runs in the same kernel, after the same expansion.) K = 1216 is
    // 19 steps: at split 1 four full 4-step chunks and a 3-step tail, so the chunks after the
    // first two (loaded from inside the mainloop) and a partial last chunk are reached.
    Gemm1Case c1 = decode_case<Gemm1Case>(kAwkwardRows);
    c1.K = 1216;
    c1.s_lo = 96;
    c1.s_hi = 128;
    c1.seed = 41;
    run_gemm1_case(c1);
    Gemm2Case c2 = decode_case<Gemm2Case>(kAwkwardRows);
    c2.I = 1216;  // GEMM2's K: 19 steps, as GEMM1's
    c2.s_lo = 96;
    c2.s_hi = 128;
    c2.seed = 43;
    run_gemm2_case(c2);
  }
  decode_set_small(saved);
}
TEST_P(Sm90DecodeSplitK, OddStepsWideScales) {
  // K = 192 is 3 steps (uneven slices); scale bytes up to 150 take expand_fragment's second
  // multiply.
  MXMOE_REQUIRE_SM90();
  Gemm2Case c = decode_case<Gemm2Case>({5, 16, 0, 33, 1});
  c.H = 192;
  c.I = 192;
  c.s_lo = 100;
  c.s_hi = 150;
  run_gemm2_case(c);
  Gemm1Case c1 = decode_case<Gemm1Case>({5, 16, 0, 33, 1});
  c1.I = 96;
  c1.K = 192;
  c1.s_lo = 100;
  c1.s_hi = 135;
  run_gemm1_case(c1);
}
TEST_P(Sm90DecodeSplitK, ManyExperts) {
  // 300 experts, most of them without rows and an 80-expert gap: the tile walker looks 32
  // experts ahead per ballot, so this takes several ballots per tile; one expert with two token
  // tiles, and the last expert has rows.
  MXMOE_REQUIRE_SM90();
  std::vector<int> rows(300, 0);
  for (int e = 0; e < 300; ++e)
    if (e % 29 == 3 || e % 41 == 0) rows[e] = 1 + e % 3;
  for (int e = 100; e < 180; ++e) rows[e] = 0;
  rows[180] = 17;
  rows[299] = 2;
  Gemm1Case c = decode_case<Gemm1Case>(rows);
  c.I = 64;
  c.K = 192;
  c.mxfp8_out = true;
  run_gemm1_case(c);
  Gemm2Case c2 = decode_case<Gemm2Case>(rows);
  c2.H = 128;
  c2.I = 128;
  run_gemm2_case(c2);
}
TEST_P(Sm90DecodeSplitK, GraphReplay) {
  // One token, as at decode: three replays of one captured graph equal the eager run.
  MXMOE_REQUIRE_SM90();
  Gemm1Case c;
  c.rows = {0, 0, 1, 0, 0, 0};
  c.I = 256;
  c.K = 1024;
  c.kernel = kGemmDecode;
  c.split_k = split();
  c.graph = true;
  c.mxfp8_out = true;
  c.spec = std::get<2>(GetParam());
  run_gemm1_case(c);
  Gemm2Case c2;
  c2.rows = {0, 1, 0, 2, 0, 1};
  c2.H = 512;
  c2.I = 512;
  c2.kernel = kGemmDecode;
  c2.split_k = split();
  c2.graph = true;
  c2.spec = c.spec;
  run_gemm2_case(c2);
}
// Puts the forced mainloop back to the rule at scope exit, also after a failed ASSERT.
struct RestoreMainloop {
  ~RestoreMainloop() { decode_set_mainloop(0); }
};
// EP16's GEMM1 at Kimi-K3's widths (M 6144, K 3584: 96 tiles per expert) on the decode kernel:
// `experts` one-row experts at the given split, three graph replays after the eager run.
Gemm1Case ep16_gemm1_case(int experts, int split, uint64_t seed) {
  Gemm1Case c;
  c.rows.assign(experts, 1);
  c.I = 3072;
  c.K = 3584;
  c.tile_n = 16;
  c.kernel = kGemmDecode;
  c.split_k = split;
  c.graph = true;
  c.seed = seed;
  return c;
}

TEST(Sm90DecodeSplitKRealWidth, Gemm1ManyTilesPerCluster) {
  // EP16's GEMM1 at Kimi-K3's widths (M 6144, K 3584: 96 tiles per expert): 12 one-row experts
  // give 1152 tiles, more than one round of clusters at splits 2 and 4, so each cluster loops
  // over tiles and its split-K reduction slots are reused. `mxmoe bench` with GEMM1 forced to
  // split 4 saw one graph replay differ from the direct run at this shape (bench/NOTES.md D round
  // 40); here 16 runs (15 graph replays) must match the first bit for bit and the reference.
  MXMOE_REQUIRE_SM90();
  RestoreMainloop restore;
  for (int mainloop : {kDecodeBulkRing, kDecodeRegStream}) {
    for (int split : {2, 4}) {
      decode_set_mainloop(mainloop);
      Gemm1Case c = ep16_gemm1_case(12, split, 40 + split);
      c.runs = 16;
      run_gemm1_case(c);
    }
  }
}

TEST(Sm90DecodeBalance, SameBitsPastOneRound) {
  // The bulk ring's balanced tile stride (decode_set_balance) moves tiles between clusters, never
  // changes one: at EP16's widths (GEMM1 96 tiles per expert, GEMM2 56) one-row experts whose
  // tiles pass a round of clusters (H100 / H200: 660 split-1 slots) by a little (7 experts,
  // 672 GEMM1 tiles: 336 clusters x 2 instead of 660 + 12), by a round and more (20: 1920 in 3
  // rounds) and GEMM2's 14 (784). Runs 1.. (graph replays) with balance must equal run 0
  // without, bit for bit, and the reference.
  MXMOE_REQUIRE_SM90();
  RestoreMainloop restore;
  decode_set_mainloop(kDecodeBulkRing);
  for (int split : {1, 2}) {
    for (int experts : {7, 20}) {
      Gemm1Case c = ep16_gemm1_case(experts, split, 60 + experts + split);
      c.balance = true;
      run_gemm1_case(c);
    }
    Gemm2Case c2;
    c2.rows.assign(14, 1);
    c2.H = 3584;
    c2.I = 3072;
    c2.tile_n = 16;
    c2.kernel = kGemmDecode;
    c2.split_k = split;
    c2.graph = true;
    c2.balance = true;
    c2.seed = 80 + split;
    run_gemm2_case(c2);
  }
}

INSTANTIATE_TEST_SUITE_P(AllSplits, Sm90DecodeSplitK,
                         ::testing::Combine(::testing::Values(0, 1, 2, 4, 8),
                                            ::testing::Values(kDecodeBulkRing, kDecodeRegStream),
                                            ::testing::Values(kDecodeSpecOff)));
// Split 8 has no speculating kernel (it takes the plain one).
INSTANTIATE_TEST_SUITE_P(
    Spec, Sm90DecodeSplitK,
    ::testing::Combine(::testing::Values(0, 1, 2, 4),
                       ::testing::Values(kDecodeBulkRing, kDecodeRegStream),
                       ::testing::Values(kDecodeSpecTiles, kDecodeSpecTiles | kDecodeSpecPreload,
                                         kDecodeSpecEarlyGemm2,
                                         kDecodeSpecTiles | kDecodeSpecEarlyGemm2OneTile,
                                         kDecodeSpecAll, kDecodeSpecSmall)));

TEST(Sm90DecodeGemm, KimiSizes) {
  MXMOE_REQUIRE_SM90();
  for (bool mx : {false, true}) {
    Gemm1Case c;  // EP16-like
    c.rows = {1, 0, 5, 17};
    c.I = 3072;
    c.K = 3584;
    c.mxfp8_out = mx;
    c.tile_n = 16;
    c.kernel = kGemmDecode;
    c.sample = 4;
    c.seed = 21 + mx;
    c.spec = mx ? kDecodeSpecAll : kDecodeSpecOff;  // runs 1.. with the ids, as run_moe's
    run_gemm1_case(c);
  }
  Gemm1Case c;  // TP8 x EP4 slice
  c.rows = {0, 1, 3, 17, 0, 1, 9, 1, 0, 4, 0, 2};
  c.I = 384;
  c.K = 3584;
  c.mxfp8_out = true;
  c.per_expert_beta = true;
  c.tile_n = 16;
  c.kernel = kGemmDecode;
  c.sample = 4;
  run_gemm1_case(c);
  Gemm2Case c2;
  c2.rows = {1, 0, 5, 17};
  c2.H = 3584;
  c2.I = 3072;
  c2.tile_n = 16;
  c2.kernel = kGemmDecode;
  c2.sample = 4;
  c2.spec = kDecodeSpecAll;
  run_gemm2_case(c2);
  Gemm2Case c3;
  c3.rows = {0, 1, 3, 17, 0, 1, 9, 1, 0, 4, 0, 2};
  c3.H = 3584;
  c3.I = 384;
  c3.tile_n = 16;
  c3.kernel = kGemmDecode;
  c3.sample = 4;
  c3.graph = true;
  run_gemm2_case(c3);
}

TEST(Sm90DecodeGemm, AutoAtDecodeSizes) {
  // kGemmAuto with at most kDecodeMaxMeanRows rows per expert: the decode kernel by default.
  MXMOE_REQUIRE_SM90();
  Gemm1Case c;
  c.rows = {0, 1, 0, 2, 1, 0, 0, 5};
  c.I = 192;
  c.K = 640;
  c.mxfp8_out = true;
  c.per_expert_beta = true;
  c.graph = true;
  run_gemm1_case(c);
  Gemm2Case c2;
  c2.rows = {0, 1, 0, 2, 1, 0, 0, 5};
  c2.H = 320;
  c2.I = 384;
  c2.graph = true;
  run_gemm2_case(c2);
}

TEST(Sm90DecodeGemm, TiledKernelStillServes16TokenTiles) {
  // kGemmTiled keeps grouped_gemm_kernel.cuh's 16-token path tested once kGemmAuto picks the
  // decode kernel for it.
  MXMOE_REQUIRE_SM90();
  Gemm1Case c;
  c.rows = kAwkwardRows;
  c.tile_n = 16;
  c.kernel = kGemmTiled;
  c.mxfp8_out = true;
  run_gemm1_case(c);
  Gemm2Case c2;
  c2.rows = kAwkwardRows;
  c2.tile_n = 16;
  c2.kernel = kGemmTiled;
  run_gemm2_case(c2);
}

// ---------------------------------------------------------------------------------------------
// Timings.

constexpr double kCopyGBs = 3917.0;  // SM copy rate on the H200 (bench/RESULTS.md)

// The timing benches' GEMM1 -> GEMM2 chain at Kimi-K3's width (H 3584): E experts of I, the
// pair rows `off` of T tokens, random weight bytes (xorshift, no compressible bytes; w2 reuses
// w13's first bytes, bench_chain_host) with scales 2^-9 .. 2^-1, random activations from rng.
ChainHost bench_kimi_host(int E, int I, int T, const std::vector<int32_t>& off,
                          std::mt19937_64& rng) {
  const int H = 3584, pairs = off[E];
  std::vector<uint8_t> hq(E * prepacked_packed_bytes(2 * I, H));
  std::vector<uint8_t> hs(E * prepacked_scale_bytes(2 * I, H));
  uint64_t x = 0x9E3779B97F4A7C15ull * (T + 1);  // xorshift: ~1 GB of bytes per layout
  for (size_t i = 0; i + 8 <= hq.size(); i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    memcpy(&hq[i], &x, 8);
  }
  for (auto& v : hs) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = static_cast<uint8_t>(118 + (x >> 40) % 9);  // scales 2^-9 .. 2^-1
  }
  ChainHost host = bench_chain_host(E, I, H, T, off, std::move(hq), std::move(hs));
  std::vector<uint16_t> act(static_cast<size_t>(std::max(T, pairs)) * H);
  for (auto& v : act) v = random_bf16(rng, 0.05f);
  host.x.assign(act.begin(), act.begin() + static_cast<size_t>(T) * H);
  host.h.assign(act.begin(), act.begin() + static_cast<size_t>(pairs) * I);
  return host;
}

void bench(const char* layout, int E, int I, int topk, int T) {
  const int H = 3584;
  std::mt19937_64 rng(T * 131 + E);
  const std::vector<int> rows = uniform_rows(rng, E, topk, T);
  const std::vector<int32_t> off = offsets_of(rows);
  int hit = 0;
  for (int e = 0; e < E; ++e) hit += rows[e] > 0;

  const size_t w13q = prepacked_packed_bytes(2 * I, H), w13s = prepacked_scale_bytes(2 * I, H);
  const size_t w2q = prepacked_packed_bytes(H, I), w2s = prepacked_scale_bytes(H, I);
  ChainProblem prob;
  CUDA_OK(prob.init(bench_kimi_host(E, I, T, off, rng)));
  const size_t flush_bytes = 256u << 20;
  DevBuf<uint8_t> flush(flush_bytes);
  const int sms = num_sms();

  // Scale bytes 118..126 (bench_kimi_host): small_scales holds, as run_moe passes it for such
  // weights, so the bench times the kernels a real layer runs (the kSmall ones unless
  // MXMOE_DECODE_SMALL=0).
  Gemm1Params p1 = prob.gemm1(16);
  Gemm2Params p2 = prob.gemm2(16);
  p1.small_scales = p2.small_scales = true;
  const double b1 = static_cast<double>(hit) * (w13q + w13s);
  const double b2 = static_cast<double>(hit) * (w2q + w2s);
  const double floor_us = (b1 + b2) / kCopyGBs * 1e-3;

  struct Variant {
    const char* name;
    int kernel, split, mainloop;
  };
  constexpr int kB = kDecodeBulkRing, kR = kDecodeRegStream;
  const Variant variants[] = {{"tiled16", kGemmTiled, 0, 0},   {"dec", kGemmDecode, 0, 0},
                              {"reg", kGemmDecode, 0, kR},     {"reg-s1", kGemmDecode, 1, kR},
                              {"reg-s2", kGemmDecode, 2, kR},  {"reg-s4", kGemmDecode, 4, kR},
                              {"bulk", kGemmDecode, 0, kB},    {"bulk-s1", kGemmDecode, 1, kB},
                              {"bulk-s2", kGemmDecode, 2, kB}, {"bulk-s4", kGemmDecode, 4, kB},
                              {"reg-s8", kGemmDecode, 8, kR},  {"bulk-s8", kGemmDecode, 8, kB}};
  for (const Variant& v : variants) {
    decode_set_mainloop(v.mainloop);
    Gemm1Params q1 = p1;
    Gemm2Params q2 = p2;
    q1.g.kernel = q2.g.kernel = v.kernel;
    q1.g.split_k = q2.g.split_k = v.split;
    Gemm1Params q1m = q1;
    q1m.mxfp8_out = true;
    ASSERT_EQ(launch_gemm1(q1, sms, 0), cudaSuccess) << v.name;
    ASSERT_EQ(launch_gemm2(q2, sms, 0), cudaSuccess) << v.name;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << v.name;
    const float t1 = median_us([&] { return launch_gemm1(q1, sms, 0); }, flush.get(), flush_bytes);
    const float t1m =
        median_us([&] { return launch_gemm1(q1m, sms, 0); }, flush.get(), flush_bytes);
    const float t2 = median_us([&] { return launch_gemm2(q2, sms, 0); }, flush.get(), flush_bytes);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    printf(
        "DECODE_BENCH %-8s T=%4d hit=%3d %-8s | gemm1 %7.1f us %5.0f GB/s | +mx %7.1f us | "
        "gemm2 %7.1f us %5.0f GB/s | sum %7.1f us %5.0f GB/s (%4.1f%% of %.0f) floor %5.1f us "
        "x%.2f\n",
        layout, T, hit, v.name, t1, b1 / t1 * 1e-3, t1m, t2, b2 / t2 * 1e-3, t1 + t2,
        (b1 + b2) / (t1 + t2) * 1e-3, 100.0 * (b1 + b2) / (t1 + t2) * 1e-3 / kCopyGBs, kCopyGBs,
        floor_us, (t1 + t2) / floor_us);
  }
  decode_set_mainloop(0);
}

TEST(Sm90DecodeBench, DISABLED_KimiShapes) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "SKIPPED: no CUDA device";
  for (int T : {1, 4, 8, 16, 64, 256, 512}) bench("EP16", 56, 3072, 1, T);
  for (int T : {1, 8, 16, 64, 224}) bench("TP8xEP4", 224, 384, 4, T);
}

// The per-CTA timeline of the GEMM1 -> GEMM2 decode chain on the bulk ring (bench/NOTES.md D
// round 21: why GEMM1's early trigger of GEMM2 costs ~4 us at EP16 T=2 and gains at T=1).
// Diagnostic builds only (cmake -DMXMOE_DECODE_TIMELINE=ON, sm90/decode_timeline.cuh); skips
// loudly elsewhere. EP16 (56 experts, I 3072, one pick per token) and TP8xEP4 (224, 384, four)
// shapes, T = 1 / 2 / 4, modes 0 and 4 (MXMOE_DECODE_SPEC: the trigger alone, which needs no
// ids): the chain's median time over 15 runs, then the stamps of one more run after an L2
// flush, in us from GEMM1's first entry: entry, wait done, first stage landed, last mainloop
// done, exit (min / median / max over the CTAs).
void print_timeline(const char* tag, const std::vector<uint64_t>& tl) {
  using decode::kTimelineCtas;
  using decode::kTlFields;
  auto at = [&](int g, int c, int f) {
    return tl[(static_cast<size_t>(g) * kTimelineCtas + c) * kTlFields + f];
  };
  uint64_t t0 = ~0ull;
  for (int c = 0; c < kTimelineCtas; ++c)
    if (at(0, c, decode::kTlStart) != 0) t0 = std::min(t0, at(0, c, decode::kTlStart));
  if (t0 == ~0ull) {
    ADD_FAILURE() << tag << ": no GEMM1 CTA stamped";
    return;
  }
  std::vector<uint64_t> all;
  uint64_t g1_last_exit = 0;
  std::vector<int> g1_sms;
  for (int g = 0; g < 2; ++g) {
    // Data and math are absent (0) for a CTA with no tile; span_of leaves them out.
    const test::KernelSpan sp = test::span_of({"", &tl, g * kTimelineCtas, kTimelineCtas}, t0);
    std::vector<int> sms;
    int before_g1_exit = 0, on_g1_sm = 0;
    for (int c = 0; c < kTimelineCtas; ++c) {
      if (at(g, c, decode::kTlStart) == 0) continue;
      for (const auto e : test::kTimelineEvents)
        if (at(g, c, e) != 0) all.push_back(at(g, c, e));
      const int sm = static_cast<int>(at(g, c, decode::kTlSm));
      sms.push_back(sm);
      if (g == 0) g1_last_exit = std::max(g1_last_exit, at(0, c, decode::kTlExit));
      if (g == 1) {
        before_g1_exit += at(1, c, decode::kTlStart) < g1_last_exit ? 1 : 0;
        on_g1_sm += std::count(g1_sms.begin(), g1_sms.end(), sm) > 0 ? 1 : 0;
      }
    }
    if (g == 0) g1_sms = sms;
    std::sort(sms.begin(), sms.end());
    const int distinct = static_cast<int>(std::unique(sms.begin(), sms.end()) - sms.begin());
    auto span = [&](int e) {
      char b[64];
      if (sp.v[e][1] < 0) return std::string("-");
      std::snprintf(b, sizeof(b), "%6.2f/%6.2f/%6.2f", sp.v[e][0], sp.v[e][1], sp.v[e][2]);
      return std::string(b);
    };
    std::printf(
        "TIMELINE %s GEMM%d ctas %4d sms %3d | entry %s | waited %s | data %s | math %s "
        "| exit %s",
        tag, g + 1, sp.ctas, distinct, span(0).c_str(), span(1).c_str(), span(2).c_str(),
        span(3).c_str(), span(4).c_str());
    if (g == 1)
      std::printf(" | entered before GEMM1's last exit %d, on a GEMM1 SM %d", before_g1_exit,
                  on_g1_sm);
    std::printf("\n");
  }
  // The timer's step, as seen: the smallest nonzero gap between any two stamps.
  std::sort(all.begin(), all.end());
  uint64_t step = ~0ull;
  for (size_t i = 1; i < all.size(); ++i)
    if (all[i] > all[i - 1]) step = std::min(step, all[i] - all[i - 1]);
  std::printf(
      "TIMELINE %s smallest stamp gap %llu ns (min/p50/max in us from GEMM1's first "
      "entry)\n",
      tag, static_cast<unsigned long long>(step));
}

TEST(Sm90DecodeBench, DISABLED_ChainTimeline) {
  MXMOE_REQUIRE_SM90();
  std::vector<uint64_t> tl;
  if (decode_timeline_read(&tl) == cudaErrorNotSupported)
    GTEST_SKIP() << "not a MXMOE_DECODE_TIMELINE build (test NOT run)";
  const int saved_spec = decode_spec();
  cudaStream_t st = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const size_t flush_bytes = 256u << 20;
  DevBuf<uint8_t> flush(flush_bytes);
  ASSERT_TRUE(flush.ok());
  const int sms = num_sms();
  struct Layout {
    const char* name;
    int E, I, topk;
  };
  for (const Layout& l : {Layout{"EP16", 56, 3072, 1}, Layout{"TP8xEP4", 224, 384, 4}}) {
    for (int T : {1, 2, 4}) {
      const int E = l.E, I = l.I;
      std::mt19937_64 rng(T * 131 + E);
      const std::vector<int32_t> off = offsets_of(uniform_rows(rng, E, l.topk, T));
      ChainProblem prob;
      CUDA_OK(prob.init(bench_kimi_host(E, I, T, off, rng)));
      const Gemm1Params p1 = prob.gemm1(16);
      const Gemm2Params p2 = prob.gemm2(16);
      auto chain = [&](cudaStream_t s) {
        const cudaError_t e = launch_gemm1(p1, sms, s);
        return e != cudaSuccess ? e : launch_gemm2(p2, sms, s);
      };
      for (int mode : {0, kDecodeSpecEarlyGemm2}) {
        decode_set_spec(mode);
        const float med = test::median_event_us(chain, st, flush.get(), flush_bytes, 3, 15);
        ASSERT_GT(med, 0.0f);
        CUDA_OK(cudaMemsetAsync(flush.get(), 1, flush_bytes, st));
        CUDA_OK(decode_timeline_reset(st));
        CUDA_OK(chain(st));
        CUDA_OK(cudaStreamSynchronize(st));
        CUDA_OK(decode_timeline_read(&tl));
        char tag[64];
        std::snprintf(tag, sizeof(tag), "%s T=%d mode %d (chain median %.1f us)", l.name, T, mode,
                      med);
        print_timeline(tag, tl);
      }
    }
  }
  decode_set_spec(saved_spec);
  CUDA_OK(cudaStreamDestroy(st));
}

}  // namespace
}  // namespace mxmoe::sm90
