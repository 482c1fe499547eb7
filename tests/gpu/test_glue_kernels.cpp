// tests/gpu/test_glue_kernels.cpp: each smxx glue kernel against the CPU reference on the same
// inputs: quantize vs mx_quant.h (bit for bit), route vs route_kimi, group vs a plain stable sort,
// combine vs a plain slot-ordered fp32 sum; the router's NaN and -inf rules. The fused decode
// prologue's tests are in test_glue_prologue.cpp, the glue benches in bench_glue_chain.cpp (the
// same binary).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "glue_test_util.h"
#include "gpu_test_util.h"
#include "mxmoe/formats.h"
#include "mxmoe/mx_quant.h"
#include "mxmoe/reference.h"
#include "smxx/glue.h"

namespace mxmoe::test {
namespace {

void run_quantize_case(bool f32_input, bool mxfp8) {
  const int T = 37, H = 3584;
  const int64_t stride = H + 96;  // non-contiguous rows (chunked prefill views)
  std::vector<float> x = varied_rows(T, H, 11 + f32_input * 2 + mxfp8);
  if (!f32_input)
    for (auto& v : x) v = round_bf16(v);
  const StridedRows rows = strided_rows(x, T, H, stride);
  DevBuf<float> dxf;
  DevBuf<uint16_t> dxb, dq(static_cast<size_t>(T) * H);
  CUDA_OK(f32_input ? dxf.upload(rows.f32) : dxb.upload(rows.bf16));
  CUDA_OK(cudaMemset(dq.get(), 0xFF, dq.size() * 2));
  const void* src = f32_input ? static_cast<const void*>(dxf.get()) : dxb.get();
  CUDA_OK(smxx::launch_quantize_input(src, f32_input, stride, T, H, mxfp8,
                                      reinterpret_cast<__nv_bfloat16*>(dq.get()), nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint16_t> got;
  CUDA_OK(dq.download(&got));
  std::vector<float> ref(H);
  int mismatches = 0;
  for (int t = 0; t < T; ++t) {
    const float* row = x.data() + static_cast<size_t>(t) * H;
    if (mxfp8)
      fake_quantize_mxfp8_row(row, H, ref.data());
    else
      for (int h = 0; h < H; ++h) ref[h] = round_bf16(row[h]);
    for (int h = 0; h < H; ++h) {
      const uint16_t want = float_to_bf16(ref[h]);
      const uint16_t g = got[static_cast<size_t>(t) * H + h];
      if (g != want && ++mismatches <= 5)
        ADD_FAILURE() << "row " << t << " col " << h << ": got 0x" << std::hex << g << " want 0x"
                      << want << std::dec << " (x = " << row[h] << ")";
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(GpuQuantize, Bf16RowsToMxfp8MatchMxQuantBitForBit) {
  MXMOE_REQUIRE_SM90();
  run_quantize_case(false, true);
}
TEST(GpuQuantize, Fp32RowsToMxfp8MatchMxQuantBitForBit) {
  MXMOE_REQUIRE_SM90();
  run_quantize_case(true, true);
}
TEST(GpuQuantize, Bf16RowsCopyExactly) {
  MXMOE_REQUIRE_SM90();
  run_quantize_case(false, false);
}
TEST(GpuQuantize, Fp32RowsRoundToBf16) {
  MXMOE_REQUIRE_SM90();
  run_quantize_case(true, false);
}

// logit_shift moves every logit (e.g. -120: every sigmoid underflows to 0 and the bias alone
// picks the experts; the weights must then be 0, as route_kimi gives, never NaN).
void run_route_case(int T, int E, int k, bool renorm, float scaling, bool ties, uint64_t seed,
                    float logit_shift = 0.0f) {
  const int64_t stride = E + 8;
  Rng r(seed);
  std::vector<float> logits(static_cast<size_t>(T) * stride, NAN),
      dense(static_cast<size_t>(T) * E);
  std::vector<float> bias(E);
  for (auto& b : bias) b = ties ? 0.0f : 0.1f * r.normal();
  for (int t = 0; t < T; ++t)
    for (int e = 0; e < E; ++e) {
      // ties: every score equal within a token, so the order must come from the ids alone.
      const float v = logit_shift + (ties ? 0.25f * (t % 3) : 2.0f * r.normal());
      logits[t * stride + e] = v;
      dense[static_cast<size_t>(t) * E + e] = v;
    }
  RoutingConfig rc;
  rc.num_experts = E;
  rc.top_k = k;
  rc.renormalize = renorm;
  rc.scaling_factor = scaling;
  std::vector<int32_t> want_ids(static_cast<size_t>(T) * k);
  std::vector<float> want_w(static_cast<size_t>(T) * k);
  route_kimi(dense.data(), bias.data(), T, rc, want_ids.data(), want_w.data());

  DevBuf<float> dl, db, dw(static_cast<size_t>(T) * k);
  DevBuf<int32_t> di(static_cast<size_t>(T) * k);
  CUDA_OK(dl.upload(logits));
  CUDA_OK(db.upload(bias));
  CUDA_OK(smxx::launch_route_kimi(dl.get(), stride, db.get(), T, E, k, renorm, scaling, di.get(),
                                  dw.get(), nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<int32_t> ids;
  std::vector<float> w;
  CUDA_OK(di.download(&ids));
  CUDA_OK(dw.download(&w));
  int bad = 0;
  double max_rel = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] != want_ids[i] && ++bad <= 5)
      ADD_FAILURE() << "token " << i / k << " slot " << i % k << ": id " << ids[i] << " want "
                    << want_ids[i];
    if (want_w[i] == 0.0f) {
      if (w[i] != 0.0f && ++bad <= 5)
        ADD_FAILURE() << "token " << i / k << " slot " << i % k << ": weight " << w[i] << " want 0";
      continue;
    }
    max_rel = std::max(max_rel, std::fabs(double(w[i]) - want_w[i]) / std::fabs(want_w[i]));
  }
  EXPECT_EQ(bad, 0);
  // expf on host and device may differ by an ulp or two; the weights are a few fp32 ops away.
  EXPECT_LE(max_rel, 1e-6) << "routing weights differ from route_kimi";
  std::printf(
      "[route] T=%d E=%d k=%d renorm=%d scale=%g ties=%d: ids equal, max rel weight "
      "diff %.3g\n",
      T, E, k, renorm, scaling, ties, max_rel);
}

TEST(GpuRoute, KimiTop16Of896MatchesRouteKimi) {
  MXMOE_REQUIRE_SM90();
  run_route_case(131, 896, 16, true, 1.0f, false, 5);
}
TEST(GpuRoute, NoRenormalizeWithScaling) {
  MXMOE_REQUIRE_SM90();
  run_route_case(17, 896, 16, false, 2.5f, false, 6);
}
TEST(GpuRoute, TiesGoToTheLowerId) {
  MXMOE_REQUIRE_SM90();
  run_route_case(9, 896, 16, true, 1.0f, true, 7);
}
TEST(GpuRoute, UnderflowedSigmoidsGiveZeroWeightsNotNaN) {
  MXMOE_REQUIRE_SM90();
  run_route_case(5, 896, 16, true, 1.0f, false, 9, -120.0f);
}
TEST(GpuRoute, SharedMemoryKeysBeyond1024Experts) {
  MXMOE_REQUIRE_SM90();
  run_route_case(7, 2048, 16, true, 1.0f, false, 12);
  run_route_case(3, 1500, 40, true, 1.0f, true, 13);  // ties, k > 32
}
namespace {
// One token batch of the bit-for-bit cases below, and a router's ids and weights for it.
struct RouteBitCase {
  int T, E, k;
  std::vector<float> logits, bias;
};
struct RouteOut {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

std::vector<RouteBitCase> route_bit_cases() {
  struct C {
    int T, E, k;
    bool ties, nan, minus_inf;
    float shift;
    bool clustered = false;
  };
  const C cases[] = {
      {131, 896, 16, false, false, false, 0.0f},     {9, 896, 16, true, false, false, 0.0f},
      {5, 896, 16, false, false, false, -120.0f},    {8, 896, 16, false, true, false, 0.0f},
      {6, 40, 16, false, false, true, 0.0f},         {33, 40, 40, false, false, false, 0.0f},
      {17, 1024, 64, false, true, false, 0.0f},      {3, 33, 33, true, false, false, 0.0f},
      {4, 1, 1, false, false, false, 0.0f},          {11, 896, 16, false, false, false, 0.0f, true},
      {7, 896, 32, false, false, false, 0.0f, true}, {5, 896, 32, false, false, false, 0.0f},
      {6, 20, 16, false, false, false, 0.0f}};
  std::vector<RouteBitCase> out;
  for (const C& c : cases) {
    Rng r(c.T * 7 + c.E);
    RouteBitCase b{c.T, c.E, c.k, std::vector<float>(static_cast<size_t>(c.T) * c.E),
                   std::vector<float>(c.E)};
    for (auto& v : b.bias) v = c.ties || c.clustered ? 0.0f : 0.1f * r.normal();
    if (c.minus_inf)
      for (int e = 0; e < c.E; ++e)
        if (e % 7 != 3) b.bias[e] = -INFINITY;
    for (size_t i = 0; i < b.logits.size(); ++i) {
      const int lane = static_cast<int>(i % c.E) % 32;
      b.logits[i] = c.clustered && lane < 16
                        ? 3.0f + 0.01f * lane
                        : c.shift + (c.ties ? 0.25f * ((i / c.E) % 3) : 2.0f * r.normal());
    }
    if (c.nan) {
      b.logits[static_cast<size_t>(1) * c.E + c.E / 2] = NAN;
      for (int e = 0; e < c.E; ++e) b.logits[static_cast<size_t>(3) * c.E + e] = NAN;
    }
    out.push_back(std::move(b));
  }
  return out;
}

// launch_route_kimi on case c (renormalized, scaling 1) with the given router choice
// (reg_experts, wide_tokens; by default the shipped one); ids and weights back on the host.
RouteOut route_on_device(const RouteBitCase& c, int reg_experts = smxx::kRouteRegExperts,
                         int wide_tokens = smxx::kRouteWideTokens) {
  DevBuf<float> dl, db, dw(static_cast<size_t>(c.T) * c.k);
  DevBuf<int32_t> di(static_cast<size_t>(c.T) * c.k);
  RouteOut o;
  EXPECT_EQ(cudaSuccess, dl.upload(c.logits));
  EXPECT_EQ(cudaSuccess, db.upload(c.bias));
  EXPECT_EQ(cudaSuccess,
            smxx::launch_route_kimi(dl.get(), c.E, db.get(), c.T, c.E, c.k, true, 1.0f, di.get(),
                                    dw.get(), nullptr, reg_experts, wide_tokens));
  EXPECT_EQ(cudaSuccess, cudaDeviceSynchronize());
  EXPECT_EQ(cudaSuccess, di.download(&o.ids));
  EXPECT_EQ(cudaSuccess, dw.download(&o.weights));
  return o;
}

void expect_same_bits(const RouteOut& a, const RouteOut& b) {
  EXPECT_EQ(a.ids, b.ids);
  ASSERT_EQ(a.weights.size(), b.weights.size());
  EXPECT_EQ(0, std::memcmp(a.weights.data(), b.weights.data(), a.weights.size() * 4))
      << "weights differ";
}
}  // namespace

// The register-key router (route_warp.cuh, E <= kRouteRegMax) against the shared-memory one,
// bit for bit (ids and weights, NaN tokens included), over the cases above; the shared-memory
// one is checked against route_kimi by the tests above. The register version picks by its
// threshold select (k <= 32) and falls back to the rounds when more than kRouteSelectMax keys
// pass the threshold (the k-th best of the 32 lanes' bests): `clustered` makes that happen (no
// bias; experts e held by lanes 0..15, e % 32 < 16, get logit 3 + 0.01 (e % 32), the rest lower,
// so the threshold is lane 0's key and all ~15 x 28 keys of lanes 1..15 pass), and k > 32
// always takes the rounds. One warp per token on both sides (wide_tokens 0).
TEST(GpuRoute, RegisterKeysMatchSharedMemoryKeysBitForBit) {
  MXMOE_REQUIRE_SM90();
  for (const RouteBitCase& c : route_bit_cases()) {
    SCOPED_TRACE(::testing::Message() << "T=" << c.T << " E=" << c.E << " k=" << c.k);
    expect_same_bits(route_on_device(c, smxx::kRouteRegMax, 0), route_on_device(c, 0, 0));
  }
}

// The wide CTAs (route.cu: kRouteWideWarps warps compute one token's keys, warp 0 picks)
// against one warp per token with register keys, bit for bit, every case routed wide at every T
// (131 tokens included), NaN tokens, -inf biases, E < 32 and k > 32 (the rounds) among them.
TEST(GpuRoute, WideMatchesOneWarpBitForBit) {
  MXMOE_REQUIRE_SM90();
  for (const RouteBitCase& c : route_bit_cases()) {
    SCOPED_TRACE(::testing::Message() << "T=" << c.T << " E=" << c.E << " k=" << c.k);
    expect_same_bits(route_on_device(c, smxx::kRouteRegMax, 1 << 30),
                     route_on_device(c, smxx::kRouteRegMax, 0));
  }
}

TEST(GpuRoute, SmallExpertCountAndWideTopK) {
  MXMOE_REQUIRE_SM90();
  run_route_case(33, 40, 40, true, 1.0f, false, 8);
}

// A plain CPU stable sort of the pairs by local expert: the grouping's specification.
// out_token[p]: the token of row p when it owns no other pair, else -1; has_out[e]: 1 when any
// of expert e's rows has one.
struct Grouping {
  std::vector<int32_t> offsets, x_row, pair_pos, out_token, has_out;
  std::vector<float> row_weight;
};
Grouping cpu_group(const std::vector<int32_t>& ids, const std::vector<float>& w, int k, int start,
                   int count) {
  Grouping g;
  g.offsets.assign(count + 1, 0);
  g.pair_pos.assign(ids.size(), -1);
  for (int e = 0; e < count; ++e) {
    g.offsets[e] = static_cast<int32_t>(g.x_row.size());
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] == start + e) {
        g.pair_pos[i] = static_cast<int32_t>(g.x_row.size());
        g.x_row.push_back(static_cast<int32_t>(i / k));
        g.row_weight.push_back(w[i]);
      }
  }
  g.offsets[count] = static_cast<int32_t>(g.x_row.size());
  for (size_t p = 0; p < g.x_row.size(); ++p) {
    const int t = g.x_row[p];
    int owned = 0;
    for (int j = 0; j < k; ++j) owned += g.pair_pos[static_cast<size_t>(t) * k + j] >= 0;
    g.out_token.push_back(owned == 1 ? t : -1);
  }
  g.has_out.assign(count, 0);
  for (int e = 0; e < count; ++e)
    for (int p = g.offsets[e]; p < g.offsets[e + 1]; ++p) g.has_out[e] |= g.out_token[p] >= 0;
  return g;
}

void run_group_case(const std::vector<int32_t>& ids, int T, int k, int start, int count,
                    const char* name) {
  std::vector<float> w(ids.size());
  Rng r(99);
  for (auto& v : w) v = static_cast<float>(r.uniform());
  const Grouping want = cpu_group(ids, w, k, start, count);
  const int P = T * k;
  DevBuf<int32_t> di;
  DevBuf<float> dw;
  CUDA_OK(di.upload(ids));
  CUDA_OK(dw.upload(w));
  GroupBuffers b(P, count);
  CUDA_OK(cudaMemset(b.off.get(), 0xFF, (count + 1) * 4));
  CUDA_OK(cudaMemset(b.pos.get(), 0x7F, P * 4));
  CUDA_OK(cudaMemset(b.has.get(), 0x7F, count * 4));  // the grouping must clear it
  smxx::GroupArgs a = b.args(di.get(), dw.get(), T, k, start, count, true, false);
  const char* failed = nullptr;
  CUDA_OK(smxx::launch_group(a, nullptr, &failed));
  CUDA_OK(cudaDeviceSynchronize());
  const size_t rows = want.x_row.size();
  std::vector<int32_t> off, pos, xrow, otok, has;
  std::vector<float> gw;
  CUDA_OK(b.off.download(&off));
  CUDA_OK(b.pos.download(&pos));
  CUDA_OK(b.xrow.download(&xrow, rows));
  CUDA_OK(b.otok.download(&otok, rows));
  CUDA_OK(b.has.download(&has));
  CUDA_OK(b.roww.download(&gw, rows));
  EXPECT_EQ(off, want.offsets) << name;
  EXPECT_EQ(pos, want.pair_pos) << name;
  EXPECT_EQ(xrow, want.x_row) << name;
  EXPECT_EQ(otok, want.out_token) << name;
  EXPECT_EQ(has, want.has_out) << name;
  EXPECT_EQ(0, std::memcmp(gw.data(), want.row_weight.data(), rows * 4)) << name;
  // Without out_token (the kernels' variant that skips the single-pair test): the same order.
  CUDA_OK(cudaMemset(b.off.get(), 0xFF, (count + 1) * 4));
  CUDA_OK(cudaMemset(b.pos.get(), 0x7F, P * 4));
  CUDA_OK(cudaMemset(b.xrow.get(), 0x7F, P * 4));
  a = b.args(di.get(), dw.get(), T, k, start, count, false, false);
  CUDA_OK(smxx::launch_group(a, nullptr, &failed));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(b.off.download(&off));
  CUDA_OK(b.pos.download(&pos));
  CUDA_OK(b.xrow.download(&xrow, rows));
  EXPECT_EQ(off, want.offsets) << name << " without out_token";
  EXPECT_EQ(pos, want.pair_pos) << name << " without out_token";
  EXPECT_EQ(xrow, want.x_row) << name << " without out_token";
  int empty = 0, single = 0;
  for (int e = 0; e < count; ++e) empty += want.offsets[e] == want.offsets[e + 1];
  for (int32_t t : want.out_token) single += t >= 0;
  std::printf(
      "[group] %s: T=%d k=%d range [%d, %d): %zu owned pairs (%d of single-pair tokens), "
      "%d empty experts\n",
      name, T, k, start, start + count, rows, single, empty);
}

TEST(GpuGroup, EpSliceWithMinusOneAndOtherRankIds) {
  MXMOE_REQUIRE_SM90();
  const int T = 1000, k = 16, start = 112, count = 56;
  Rng r(3);
  std::vector<int32_t> ids(static_cast<size_t>(T) * k);
  for (auto& id : ids) {
    const int c = r.below(10);
    id = c == 0 ? -1 : c < 5 ? start + r.below(count) : r.below(896);
  }
  run_group_case(ids, T, k, start, count, "ep56");
}
// k that does not divide 32 (tokens straddle the scatter's 32-pair windows and chunk ends) and
// k > 32: the single-pair test reads the token's ids instead of the window's ballot.
TEST(GpuGroup, SinglePairTokensForAnyTopK) {
  MXMOE_REQUIRE_SM90();
  for (int k : {1, 3, 6, 32, 40, 64}) {
    const int T = 2000, start = 8, count = 20;
    Rng r(7 + k);
    std::vector<int32_t> ids(static_cast<size_t>(T) * k);
    for (auto& id : ids) {
      const int c = r.below(4 * k);  // about one owned pair per token
      id = c < 2 ? start + r.below(count) : c == 2 ? -1 : r.below(896);
    }
    const std::string name = "k" + std::to_string(k);
    run_group_case(ids, T, k, start, count, name.c_str());
  }
}
// Prefill sizes (256 chunks of 1024 pairs at EP16 T=16384) and every walker count of the rank
// kernel: 8 walkers up to 1536 local experts, then 4, 2 and 1 (2048, 4096, 8192 experts).
TEST(GpuGroup, ManyChunksAndEveryWalkerCount) {
  MXMOE_REQUIRE_SM90();
  {
    const int T = 16384, k = 16, start = 48, count = 24;
    Rng r(11);
    std::vector<int32_t> ids(static_cast<size_t>(T) * k);
    for (auto& id : ids) id = r.below(50) == 0 ? -1 : r.below(384);
    run_group_case(ids, T, k, start, count, "ep16-T16384");
  }
  for (int count : {2048, 4096, 8192}) {
    const int T = 1500, k = 6;  // k does not divide 32: some tokens straddle warps and chunks
    Rng r(count);
    std::vector<int32_t> ids(static_cast<size_t>(T) * k);
    for (auto& id : ids) id = r.below(20) == 0 ? -1 : r.below(count + count / 4);
    const std::string name = "experts" + std::to_string(count);
    run_group_case(ids, T, k, 0, count, name.c_str());
  }
}
TEST(GpuGroup, EveryTokenOnOneExpert) {
  MXMOE_REQUIRE_SM90();
  const int T = 5000, k = 4, start = 0, count = 224;
  std::vector<int32_t> ids(static_cast<size_t>(T) * k, -1);
  for (int t = 0; t < T; ++t) ids[static_cast<size_t>(t) * k + (t % k)] = 117;
  run_group_case(ids, T, k, start, count, "one-expert");
}
TEST(GpuGroup, FullLayerSingleTokenAndDuplicates) {
  MXMOE_REQUIRE_SM90();
  std::vector<int32_t> ids = {5, 895, 5, -1, 0, 17, 17, 300};  // duplicate ids stay two pairs
  run_group_case(ids, 1, 8, 0, 896, "full-1");
  std::vector<int32_t> none(3 * 16, -1);
  run_group_case(none, 3, 16, 0, 896, "all-minus-one");
}

// skip_single: tokens that own exactly one pair must be left untouched (GEMM2 wrote them);
// every other token gets the slot-ordered sum (zeros when it owns nothing). T = 29: one token per
// warp. T = 2400, k = 16: 4 or 5 tokens in each warp's token loop (584 warps per column slice at
// H = 3584); T = 1200, k = 40: slots past 32, 2 or 3 tokens per warp. A token that is neither
// owns each slot with probability own_pct / 100.
void run_combine_case(bool skip_single, int T = 29, int k = 16, int own_pct = 75) {
  const int H = 3584;
  const int64_t out_stride = H + 16;
  Rng r(21);
  std::vector<int32_t> pos(static_cast<size_t>(T) * k);
  int rows = 0;
  for (int t = 0; t < T; ++t)  // every 3rd token owns one pair, every 7th none
    for (int j = 0; j < k; ++j) {
      const bool own = t % 7 == 0 ? false : t % 3 == 0 ? j == t % k : r.below(100) < own_pct;
      pos[static_cast<size_t>(t) * k + j] = own ? rows++ : -1;
    }
  std::vector<float> y(static_cast<size_t>(rows) * H);
  for (auto& v : y) v = r.normal() * std::ldexp(1.0f, r.below(30) - 15);
  DevBuf<float> dy, dout(static_cast<size_t>(T) * out_stride);
  DevBuf<int32_t> dpos;
  CUDA_OK(dy.upload(y));
  CUDA_OK(dpos.upload(pos));
  CUDA_OK(cudaMemset(dout.get(), 0xFF, dout.size() * 4));
  CUDA_OK(smxx::launch_combine(dy.get(), H, dpos.get(), T, k, dout.get(), out_stride, skip_single,
                               nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> got;
  CUDA_OK(dout.download(&got));
  int bad = 0, skipped = 0, singles = 0, ruled = 0;
  for (int t = 0; t < T; ++t) {
    int owned = 0;
    for (int j = 0; j < k; ++j) owned += pos[static_cast<size_t>(t) * k + j] >= 0;
    singles += owned == 1;
    ruled += t % 3 == 0 && t % 7 != 0;
    const bool skip = skip_single && owned == 1;
    skipped += skip;
    for (int h = 0; h < H; ++h) {
      float acc = 0.0f;
      for (int j = 0; j < k; ++j) {
        const int p = pos[static_cast<size_t>(t) * k + j];
        if (p >= 0) acc += y[static_cast<size_t>(p) * H + h];
      }
      const float g = got[t * out_stride + h];
      uint32_t gb;
      std::memcpy(&gb, &g, 4);
      const bool ok = skip ? gb == 0xFFFFFFFFu : std::memcmp(&g, &acc, 4) == 0;
      if (!ok && ++bad <= 5)
        ADD_FAILURE() << "t " << t << " h " << h << ": " << g << " want "
                      << (skip ? "untouched" : std::to_string(acc));
    }
  }
  EXPECT_EQ(bad, 0);
  // At least the tokens t % 3 == 0, t % 7 != 0 own exactly one pair (T = 29: 3, 6, 9, 12, 15,
  // 18, 24, 27: the others own ~3/4 of their slots).
  EXPECT_GE(singles, ruled);
  if (T == 29) {
    EXPECT_EQ(singles, 8);
  }
  EXPECT_EQ(skipped, skip_single ? singles : 0) << "T " << T << " k " << k;
  // The gap between rows must be untouched (poison 0xFFFFFFFF is a NaN pattern).
  uint32_t gap;
  std::memcpy(&gap, &got[H], 4);
  EXPECT_EQ(gap, 0xFFFFFFFFu);
}
TEST(GpuCombine, SlotOrderedSumSkipsMissingPairs) {
  MXMOE_REQUIRE_SM90();
  run_combine_case(false);
  run_combine_case(false, 2400, 16, 25);
  run_combine_case(false, 1200, 40, 25);
}
TEST(GpuCombine, SkipsSinglePairTokensWhenAsked) {
  MXMOE_REQUIRE_SM90();
  run_combine_case(true);
  run_combine_case(true, 2400, 16, 25);
  run_combine_case(true, 1200, 40, 25);
}

// A NaN or Inf anywhere in an MX block makes the block's scale byte 255: the GPU quantizer
// writes the canonical BF16 NaN (0x7FFF) for its 32 elements; other blocks are untouched.
TEST(GpuQuantize, NanOrInfBlockGivesCanonicalNanBlock) {
  MXMOE_REQUIRE_SM90();
  const int T = 3, H = 256;
  std::vector<float> x = varied_rows(T, H, 5);
  x[0 * H + 32 + 7] = NAN;          // row 0, block 1
  x[1 * H + 96 + 0] = INFINITY;     // row 1, block 3
  x[2 * H + 224 + 31] = -INFINITY;  // row 2, block 7
  DevBuf<float> dx;
  DevBuf<uint16_t> dq(static_cast<size_t>(T) * H);
  CUDA_OK(dx.upload(x));
  CUDA_OK(smxx::launch_quantize_input(dx.get(), true, H, T, H, true,
                                      reinterpret_cast<__nv_bfloat16*>(dq.get()), nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint16_t> got;
  CUDA_OK(dq.download(&got));
  std::vector<float> clean = x, ref(H);
  int bad = 0;
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < H / 32; ++b) {
      const bool poisoned = (t == 0 && b == 1) || (t == 1 && b == 3) || (t == 2 && b == 7);
      float* blk = clean.data() + static_cast<size_t>(t) * H + b * 32;
      if (poisoned)
        for (int i = 0; i < 32; ++i) blk[i] = 0.0f;
      fake_quantize_mxfp8_row(blk, 32, ref.data());
      for (int i = 0; i < 32; ++i) {
        const uint16_t want = poisoned ? 0x7FFF : float_to_bf16(ref[i]);
        const uint16_t g = got[static_cast<size_t>(t) * H + b * 32 + i];
        if (g != want && ++bad <= 5)
          ADD_FAILURE() << "row " << t << " block " << b << " elem " << i << ": 0x" << std::hex << g
                        << " want 0x" << want;
      }
    }
  EXPECT_EQ(bad, 0);
}

// A -inf correction bias masks an expert: it ranks below every finite key but is still picked
// (lower id first) when fewer than k experts remain, exactly as route_kimi does.
TEST(GpuRoute, MinusInfBiasMasksExpertsLikeRouteKimi) {
  MXMOE_REQUIRE_SM90();
  const int T = 6, E = 40, k = 16;
  Rng r(17);
  std::vector<float> logits(static_cast<size_t>(T) * E), bias(E, -INFINITY);
  for (auto& v : logits) v = 2.0f * r.normal();
  for (int e : {3, 9, 22, 30, 39}) bias[e] = 0.1f * r.normal();  // only 5 unmasked < k
  RoutingConfig rc;
  rc.num_experts = E;
  rc.top_k = k;
  std::vector<int32_t> want_ids(static_cast<size_t>(T) * k);
  std::vector<float> want_w(static_cast<size_t>(T) * k);
  route_kimi(logits.data(), bias.data(), T, rc, want_ids.data(), want_w.data());
  const RouteOut got = route_on_device({T, E, k, logits, bias});
  const std::vector<int32_t>& ids = got.ids;
  const std::vector<float>& w = got.weights;
  EXPECT_EQ(ids, want_ids);
  for (size_t i = 0; i < w.size(); ++i)
    EXPECT_NEAR(w[i], want_w[i], 1e-6 * std::fabs(want_w[i]) + 1e-30) << "slot " << i;
}

// NaN logits (the CPU reference throws): that token's k weights are NaN, its ids k distinct valid
// experts (the NaN expert last), and every other token is routed exactly as route_kimi does.
TEST(GpuRoute, NanLogitGivesNanWeightsForThatTokenOnly) {
  MXMOE_REQUIRE_SM90();
  for (int E : {896, 1500}) {  // register keys, shared-memory keys
    SCOPED_TRACE(E);
    const int T = 8, k = 16;
    Rng r(23);
    std::vector<float> logits(static_cast<size_t>(T) * E), bias(E);
    for (auto& v : logits) v = 2.0f * r.normal();
    for (auto& b : bias) b = 0.1f * r.normal();
    std::vector<float> clean = logits;
    logits[static_cast<size_t>(2) * E + 100] = NAN;  // token 2: one NaN logit
    for (int e = 0; e < E; ++e) logits[static_cast<size_t>(5) * E + e] = NAN;  // token 5: all NaN
    RoutingConfig rc;
    rc.num_experts = E;
    rc.top_k = k;
    std::vector<int32_t> want_ids(static_cast<size_t>(T) * k);
    std::vector<float> want_w(static_cast<size_t>(T) * k);
    route_kimi(clean.data(), bias.data(), T, rc, want_ids.data(), want_w.data());
    const RouteOut got = route_on_device({T, E, k, logits, bias});
    const std::vector<int32_t>& ids = got.ids;
    const std::vector<float>& w = got.weights;
    for (int t = 0; t < T; ++t) {
      std::vector<int32_t> tid(ids.begin() + t * k, ids.begin() + (t + 1) * k);
      if (t == 2 || t == 5) {
        for (int j = 0; j < k; ++j) {
          EXPECT_TRUE(std::isnan(w[t * k + j])) << "token " << t << " slot " << j;
          EXPECT_GE(tid[j], 0);
          EXPECT_LT(tid[j], E);
          if (t == 2) {
            EXPECT_NE(tid[j], 100) << "the NaN expert ranks last";
          }
          if (t == 5) {
            EXPECT_EQ(tid[j], j) << "all NaN: lowest ids in order";
          }
        }
        std::sort(tid.begin(), tid.end());
        EXPECT_TRUE(std::adjacent_find(tid.begin(), tid.end()) == tid.end()) << "distinct ids";
      } else {
        for (int j = 0; j < k; ++j) {
          EXPECT_EQ(ids[t * k + j], want_ids[t * k + j]) << "token " << t;
          EXPECT_NEAR(w[t * k + j], want_w[t * k + j], 1e-6 * std::fabs(want_w[t * k + j]));
        }
      }
    }
  }
}

}  // namespace
}  // namespace mxmoe::test
