// tests/gpu/test_glue_kernels.cpp: each smxx glue kernel against the CPU reference on the same
// inputs: quantize vs mx_quant.h (bit for bit), route vs route_kimi, group vs a plain stable sort,
// combine vs a plain slot-ordered fp32 sum; the fused decode prologue vs those kernels (every
// output bit for bit); the router's NaN and -inf rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "mxmoe/formats.h"
#include "mxmoe/mx_quant.h"
#include "mxmoe/reference.h"
#include "smxx/glue.h"

namespace mxmoe::test {
namespace {

// Input rows with varied block magnitudes: zeros, tiny (E4M3 subnormals after scaling), huge.
std::vector<float> varied_rows(int T, int H, uint64_t seed) {
  Rng r(seed);
  std::vector<float> x(static_cast<size_t>(T) * H);
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < H / 32; ++b) {
      const int kind = r.below(8);
      const float scale = kind == 0 ? 0.0f : kind == 1 ? 1e-30f : kind == 2 ? 3e4f
                                                                             : std::ldexp(1.0f, r.below(20) - 10);
      for (int i = 0; i < 32; ++i) {
        float v = r.normal() * scale;
        if (kind == 3 && i == 5) v = 0.0f;  // a zero inside a block
        if (kind == 4 && i == 7) v = v * 1e-6f;  // far below the block's amax: E4M3 subnormal / 0
        x[static_cast<size_t>(t) * H + b * 32 + i] = v;
      }
    }
  return x;
}

void run_quantize_case(bool f32_input, bool mxfp8) {
  const int T = 37, H = 3584;
  const int64_t stride = H + 96;  // non-contiguous rows (chunked prefill views)
  std::vector<float> x = varied_rows(T, H, 11 + f32_input * 2 + mxfp8);
  if (!f32_input)
    for (auto& v : x) v = round_bf16(v);
  // Strided host image with poison in the gaps.
  std::vector<float> xf(static_cast<size_t>(T) * stride, NAN);
  std::vector<uint16_t> xb(static_cast<size_t>(T) * stride, 0x7FC0);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      xf[t * stride + h] = x[static_cast<size_t>(t) * H + h];
      xb[t * stride + h] = float_to_bf16(x[static_cast<size_t>(t) * H + h]);
    }
  DevBuf<float> dxf;
  DevBuf<uint16_t> dxb, dq(static_cast<size_t>(T) * H);
  if (f32_input) dxf.upload(xf); else dxb.upload(xb);
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
    if (mxfp8) fake_quantize_mxfp8_row(row, H, ref.data());
    else for (int h = 0; h < H; ++h) ref[h] = round_bf16(row[h]);
    for (int h = 0; h < H; ++h) {
      const uint16_t want = float_to_bf16(ref[h]);
      const uint16_t g = got[static_cast<size_t>(t) * H + h];
      if (g != want && ++mismatches <= 5)
        ADD_FAILURE() << "row " << t << " col " << h << ": got 0x" << std::hex << g
                      << " want 0x" << want << std::dec << " (x = " << row[h] << ")";
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
  std::vector<float> logits(static_cast<size_t>(T) * stride, NAN), dense(static_cast<size_t>(T) * E);
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
  dl.upload(logits);
  db.upload(bias);
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
        ADD_FAILURE() << "token " << i / k << " slot " << i % k << ": weight " << w[i]
                      << " want 0";
      continue;
    }
    max_rel = std::max(max_rel, std::fabs(double(w[i]) - want_w[i]) / std::fabs(want_w[i]));
  }
  EXPECT_EQ(bad, 0);
  // expf on host and device may differ by an ulp or two; the weights are a few fp32 ops away.
  EXPECT_LE(max_rel, 1e-6) << "routing weights differ from route_kimi";
  std::printf("[route] T=%d E=%d k=%d renorm=%d scale=%g ties=%d: ids equal, max rel weight "
              "diff %.3g\n", T, E, k, renorm, scaling, ties, max_rel);
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
// The register-key router (route_warp.cuh, E <= kRouteRegMax) against the shared-memory one,
// bit for bit (ids and weights, NaN tokens included), over the cases above; the shared-memory
// one is checked against route_kimi by the tests above. The register version picks by its
// threshold select (k <= 32) and falls back to the rounds when more than kRouteSelectMax keys
// pass the threshold (the k-th best of the 32 lanes' bests): `clustered` makes that happen (no
// bias; experts e held by lanes 0..15, e % 32 < 16, get logit 3 + 0.01 (e % 32), the rest lower,
// so the threshold is lane 0's key and all ~15 x 28 keys of lanes 1..15 pass), and k > 32
// always takes the rounds.
TEST(GpuRoute, RegisterKeysMatchSharedMemoryKeysBitForBit) {
  MXMOE_REQUIRE_SM90();
  struct C { int T, E, k; bool ties, nan, minus_inf; float shift; bool clustered = false; };
  const C cases[] = {
      {131, 896, 16, false, false, false, 0.0f},  {9, 896, 16, true, false, false, 0.0f},
      {5, 896, 16, false, false, false, -120.0f}, {8, 896, 16, false, true, false, 0.0f},
      {6, 40, 16, false, false, true, 0.0f},      {33, 40, 40, false, false, false, 0.0f},
      {17, 1024, 64, false, true, false, 0.0f},   {3, 33, 33, true, false, false, 0.0f},
      {4, 1, 1, false, false, false, 0.0f},       {11, 896, 16, false, false, false, 0.0f, true},
      {7, 896, 32, false, false, false, 0.0f, true}, {5, 896, 32, false, false, false, 0.0f},
      {6, 20, 16, false, false, false, 0.0f}};
  for (const C& c : cases) {
    SCOPED_TRACE(::testing::Message() << "T=" << c.T << " E=" << c.E << " k=" << c.k);
    Rng r(c.T * 7 + c.E);
    std::vector<float> logits(static_cast<size_t>(c.T) * c.E), bias(c.E);
    for (auto& b : bias) b = c.ties || c.clustered ? 0.0f : 0.1f * r.normal();
    if (c.minus_inf)
      for (int e = 0; e < c.E; ++e) if (e % 7 != 3) bias[e] = -INFINITY;
    for (size_t i = 0; i < logits.size(); ++i) {
      const int lane = static_cast<int>(i % c.E) % 32;
      logits[i] = c.clustered && lane < 16
                      ? 3.0f + 0.01f * lane
                      : c.shift + (c.ties ? 0.25f * ((i / c.E) % 3) : 2.0f * r.normal());
    }
    if (c.nan) {
      logits[static_cast<size_t>(1) * c.E + c.E / 2] = NAN;
      for (int e = 0; e < c.E; ++e) logits[static_cast<size_t>(3) * c.E + e] = NAN;
    }
    DevBuf<float> dl, db, w0(static_cast<size_t>(c.T) * c.k), w1(static_cast<size_t>(c.T) * c.k);
    DevBuf<int32_t> i0(static_cast<size_t>(c.T) * c.k), i1(static_cast<size_t>(c.T) * c.k);
    dl.upload(logits);
    db.upload(bias);
    CUDA_OK(smxx::launch_route_kimi(dl.get(), c.E, db.get(), c.T, c.E, c.k, true, 1.0f, i0.get(),
                                    w0.get(), nullptr, 0));
    CUDA_OK(smxx::launch_route_kimi(dl.get(), c.E, db.get(), c.T, c.E, c.k, true, 1.0f, i1.get(),
                                    w1.get(), nullptr, smxx::kRouteRegMax));
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<int32_t> ids1, ids0;
    std::vector<float> a, b;
    CUDA_OK(i1.download(&ids1));
    CUDA_OK(i0.download(&ids0));
    CUDA_OK(w1.download(&a));
    CUDA_OK(w0.download(&b));
    EXPECT_EQ(ids1, ids0);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "weights differ";
  }
}

TEST(GpuRoute, SmallExpertCountAndWideTopK) {
  MXMOE_REQUIRE_SM90();
  run_route_case(33, 40, 40, true, 1.0f, false, 8);
}

// The grouping's device outputs and scratch for P pairs and El local experts, and the
// GroupArgs that point at them (ids / weights are the caller's; single_out: out_token and
// expert_has_out; situ: the SiTU fill with beta 4.0 / linear_beta 25.0 unless per-expert
// arrays are given, and h_ready).
struct GroupBuffers {
  DevBuf<int32_t> scratch, off, xrow, pos, otok, has, ready;
  DevBuf<float> roww, beta, lbeta;
  GroupBuffers(int P, int El)
      : scratch(smxx::group_scratch_ints(P, El)), off(El + 1), xrow(P), pos(P), otok(P), has(El),
        ready(El), roww(P), beta(El), lbeta(El) {}
  smxx::GroupArgs args(const int32_t* ids, const float* w, int T, int k, int start, int El,
                       bool single_out, bool situ, const float* per_beta = nullptr,
                       const float* per_linear_beta = nullptr) const {
    smxx::GroupArgs a;
    a.ids = ids;
    a.weights = w;
    a.T = T;
    a.k = k;
    a.expert_start = start;
    a.expert_count = El;
    a.scratch = scratch.get();
    a.expert_offsets = off.get();
    a.x_row = xrow.get();
    a.row_weight = roww.get();
    a.pair_pos = pos.get();
    if (single_out) {
      a.out_token = otok.get();
      a.expert_has_out = has.get();
    }
    if (situ) a.situ = situ_fill(per_beta, per_linear_beta);
    return a;
  }
  // beta 4.0 / linear_beta 25.0 unless per-expert arrays are given, into beta / lbeta / ready.
  smxx::SituFill situ_fill(const float* per_beta = nullptr,
                           const float* per_linear_beta = nullptr) const {
    smxx::SituFill f;
    f.per_expert_beta = per_beta;
    f.beta = 4.0f;
    f.per_expert_linear_beta = per_linear_beta;
    f.linear_beta = 25.0f;
    f.beta_out = beta.get();
    f.linear_beta_out = lbeta.get();
    f.h_ready = ready.get();
    return f;
  }
};

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
  di.upload(ids);
  dw.upload(w);
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
  std::printf("[group] %s: T=%d k=%d range [%d, %d): %zu owned pairs (%d of single-pair tokens), "
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
  dy.upload(y);
  dpos.upload(pos);
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
  x[0 * H + 32 + 7] = NAN;        // row 0, block 1
  x[1 * H + 96 + 0] = INFINITY;   // row 1, block 3
  x[2 * H + 224 + 31] = -INFINITY;  // row 2, block 7
  DevBuf<float> dx;
  DevBuf<uint16_t> dq(static_cast<size_t>(T) * H);
  dx.upload(x);
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
      if (poisoned) for (int i = 0; i < 32; ++i) blk[i] = 0.0f;
      fake_quantize_mxfp8_row(blk, 32, ref.data());
      for (int i = 0; i < 32; ++i) {
        const uint16_t want = poisoned ? 0x7FFF : float_to_bf16(ref[i]);
        const uint16_t g = got[static_cast<size_t>(t) * H + b * 32 + i];
        if (g != want && ++bad <= 5)
          ADD_FAILURE() << "row " << t << " block " << b << " elem " << i << ": 0x" << std::hex
                        << g << " want 0x" << want;
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
  DevBuf<float> dl, db, dw(static_cast<size_t>(T) * k);
  DevBuf<int32_t> di(static_cast<size_t>(T) * k);
  dl.upload(logits);
  db.upload(bias);
  CUDA_OK(smxx::launch_route_kimi(dl.get(), E, db.get(), T, E, k, true, 1.0f, di.get(), dw.get(),
                                  nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<int32_t> ids;
  std::vector<float> w;
  CUDA_OK(di.download(&ids));
  CUDA_OK(dw.download(&w));
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
  DevBuf<float> dl, db, dw(static_cast<size_t>(T) * k);
  DevBuf<int32_t> di(static_cast<size_t>(T) * k);
  dl.upload(logits);
  db.upload(bias);
  CUDA_OK(smxx::launch_route_kimi(dl.get(), E, db.get(), T, E, k, true, 1.0f, di.get(), dw.get(),
                                  nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<int32_t> ids;
  std::vector<float> w;
  CUDA_OK(di.download(&ids));
  CUDA_OK(dw.download(&w));
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

// ---- the fused decode prologue against the separate kernels, every output bit for bit ----
struct PrologueCase {
  const char* name;
  int T, k, E_total, start, count;
  bool gpu_routing, f32_input, mxfp8, per_expert_beta;
  int64_t x_pad;  // hidden_stride - H
};

template <typename T>
void expect_same_bits(const std::vector<T>& a, const std::vector<T>& b, const char* what,
                      const char* name) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0 && ++bad <= 3)
      ADD_FAILURE() << name << " " << what << "[" << i << "] differs";
  EXPECT_EQ(bad, 0u) << name << " " << what;
}
// Both buffers, whole, then expect_same_bits.
template <typename T>
void expect_same_download(const DevBuf<T>& a, const DevBuf<T>& b, const char* what,
                          const char* name) {
  std::vector<T> ha, hb;
  CUDA_OK(a.download(&ha));
  CUDA_OK(b.download(&hb));
  expect_same_bits(ha, hb, what, name);
}

void run_prologue_case(const PrologueCase& c) {
  const int H = 3584, T = c.T, k = c.k, P = T * k, El = c.count;
  const int64_t stride = H + c.x_pad;
  Rng r(c.T * 131 + c.k);
  std::vector<float> x = varied_rows(T, H, c.T + 7);
  std::vector<float> xf(static_cast<size_t>(T) * stride, NAN);
  std::vector<uint16_t> xb(static_cast<size_t>(T) * stride, 0x7FC0);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      xf[t * stride + h] = x[static_cast<size_t>(t) * H + h];
      xb[t * stride + h] = float_to_bf16(x[static_cast<size_t>(t) * H + h]);
    }
  std::vector<float> logits(static_cast<size_t>(T) * c.E_total), bias(c.E_total);
  for (auto& v : logits) v = 2.0f * r.normal();
  for (auto& b : bias) b = 0.1f * r.normal();
  std::vector<int32_t> ids(P);
  std::vector<float> w(P);
  for (int i = 0; i < P; ++i) {
    const int u = r.below(10);
    ids[i] = u == 0 ? -1 : u < 6 ? c.start + r.below(El) : r.below(c.E_total);
    w[i] = static_cast<float>(r.uniform());
  }
  std::vector<float> pb(c.E_total), plb(c.E_total);
  for (int e = 0; e < c.E_total; ++e) {
    pb[e] = 1.0f + 0.01f * e;
    plb[e] = 20.0f + 0.02f * e;
  }
  DevBuf<float> dxf, dlog, dbias, dw, dpb, dplb;
  DevBuf<uint16_t> dxb;
  DevBuf<int32_t> dids;
  if (c.f32_input) dxf.upload(xf); else dxb.upload(xb);
  dlog.upload(logits);
  dbias.upload(bias);
  dids.upload(ids);
  dw.upload(w);
  dpb.upload(pb);
  dplb.upload(plb);
  const void* src = c.f32_input ? static_cast<const void*>(dxf.get()) : dxb.get();

  struct Out {
    Out(int T, int H, int P, int El) : xq(static_cast<size_t>(T) * H), rid(P), rw(P), grp(P, El) {}
    DevBuf<uint16_t> xq;
    DevBuf<int32_t> rid;
    DevBuf<float> rw;
    GroupBuffers grp;
  } sep(T, H, P, El), fused(T, H, P, El);
  for (Out* o : {&sep, &fused}) {
    // Same poison in both, so untouched tails compare equal too.
    CUDA_OK(cudaMemset(o->xq.get(), 0xAB, o->xq.size() * 2));
    CUDA_OK(cudaMemset(o->rid.get(), 0xAB, P * 4));
    CUDA_OK(cudaMemset(o->rw.get(), 0xAB, P * 4));
    GroupBuffers& g = o->grp;
    CUDA_OK(cudaMemset(g.off.get(), 0xAB, (El + 1) * 4));
    CUDA_OK(cudaMemset(g.xrow.get(), 0xAB, P * 4));
    CUDA_OK(cudaMemset(g.pos.get(), 0xAB, P * 4));
    CUDA_OK(cudaMemset(g.otok.get(), 0xAB, P * 4));
    CUDA_OK(cudaMemset(g.has.get(), 0xAB, El * 4));
    CUDA_OK(cudaMemset(g.roww.get(), 0xAB, P * 4));
    CUDA_OK(cudaMemset(g.beta.get(), 0xAB, El * 4));
    CUDA_OK(cudaMemset(g.lbeta.get(), 0xAB, El * 4));
    CUDA_OK(cudaMemset(g.ready.get(), 0xAB, El * 4));
  }
  const float* pbp = c.per_expert_beta ? dpb.get() : nullptr;
  const float* plbp = c.per_expert_beta ? dplb.get() : nullptr;
  // Separate kernels.
  CUDA_OK(smxx::launch_quantize_input(src, c.f32_input, stride, T, H, c.mxfp8,
                                      reinterpret_cast<__nv_bfloat16*>(sep.xq.get()), nullptr));
  if (c.gpu_routing)
    CUDA_OK(smxx::launch_route_kimi(dlog.get(), c.E_total, dbias.get(), T, c.E_total, k, true,
                                    1.0f, sep.rid.get(), sep.rw.get(), nullptr));
  // The SiTU parameters through the grouping's scan, as run_moe.
  const smxx::GroupArgs g = sep.grp.args(c.gpu_routing ? sep.rid.get() : dids.get(),
                                         c.gpu_routing ? sep.rw.get() : dw.get(), T, k, c.start,
                                         El, true, true, pbp, plbp);
  const char* failed = nullptr;
  CUDA_OK(smxx::launch_group(g, nullptr, &failed));
  // Fused.
  const smxx::PrologueShape shape = smxx::prologue_plan(T, k, c.E_total, El, c.gpu_routing);
  ASSERT_TRUE(shape.ok) << c.name;
  smxx::PrologueArgs a;
  a.x = src;
  a.x_is_f32 = c.f32_input;
  a.x_stride = stride;
  a.H = H;
  a.mxfp8 = c.mxfp8;
  a.xq = fused.xq.get();
  if (shape.route_first)
    CUDA_OK(smxx::launch_route_kimi(dlog.get(), c.E_total, dbias.get(), T, c.E_total, k, true,
                                    1.0f, fused.rid.get(), fused.rw.get(), nullptr));
  if (shape.route_first) {
    a.ids = fused.rid.get();
    a.weights = fused.rw.get();
  } else if (c.gpu_routing) {
    a.logits = dlog.get();
    a.logits_stride = c.E_total;
    a.bias = dbias.get();
    a.num_experts_total = c.E_total;
    a.renormalize = true;
    a.scaling = 1.0f;
    a.route_ids = fused.rid.get();
    a.route_weights = fused.rw.get();
  } else {
    a.ids = dids.get();
    a.weights = dw.get();
  }
  a.T = T;
  a.k = k;
  a.expert_start = c.start;
  a.expert_count = El;
  a.expert_offsets = fused.grp.off.get();
  a.x_row = fused.grp.xrow.get();
  a.row_weight = fused.grp.roww.get();
  a.pair_pos = fused.grp.pos.get();
  a.out_token = fused.grp.otok.get();
  a.expert_has_out = fused.grp.has.get();
  a.situ = fused.grp.situ_fill(pbp, plbp);
  CUDA_OK(smxx::launch_prologue(a, shape, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  expect_same_download(fused.xq, sep.xq, "xq", c.name);
  expect_same_download(fused.rid, sep.rid, "routed ids", c.name);
  expect_same_download(fused.rw, sep.rw, "routed weights", c.name);
  std::vector<int32_t> off, foff;
  CUDA_OK(sep.grp.off.download(&off));
  CUDA_OK(fused.grp.off.download(&foff));
  expect_same_bits(foff, off, "expert_offsets", c.name);
  expect_same_download(fused.grp.xrow, sep.grp.xrow, "x_row", c.name);
  expect_same_download(fused.grp.roww, sep.grp.roww, "row_weight", c.name);
  expect_same_download(fused.grp.pos, sep.grp.pos, "pair_pos", c.name);
  expect_same_download(fused.grp.otok, sep.grp.otok, "out_token", c.name);
  expect_same_download(fused.grp.has, sep.grp.has, "expert_has_out", c.name);
  expect_same_download(fused.grp.beta, sep.grp.beta, "beta", c.name);
  expect_same_download(fused.grp.lbeta, sep.grp.lbeta, "linear_beta", c.name);
  // The GEMMs' per-expert counters, zeroed by both.
  std::vector<int32_t> fready, sready;
  CUDA_OK(fused.grp.ready.download(&fready));
  CUDA_OK(sep.grp.ready.download(&sready));
  expect_same_bits(fready, std::vector<int32_t>(El, 0), "h_ready (prologue)", c.name);
  expect_same_bits(sready, std::vector<int32_t>(El, 0), "h_ready (group scan)", c.name);
  std::printf("[prologue] %s: T=%d k=%d E=%d local [%d, %d) %s routing: %d owned pairs, "
              "chunks %d, route warps %d%s, %d quantize CTAs, %zu B smem: identical\n", c.name,
              T, k, c.E_total, c.start, c.start + El, c.gpu_routing ? "GPU" : "caller", off[El],
              shape.chunks, shape.route_warps, shape.route_first ? " (routed first)" : "",
              shape.quant_ctas, shape.smem_bytes);
}

TEST(GpuPrologue, MatchesSeparateKernelsBitForBit) {
  MXMOE_REQUIRE_SM90();
  const PrologueCase cases[] = {
      {"ep16-t1-gpu-route-w4a8", 1, 16, 896, 112, 56, true, false, true, false, 0},
      {"ep16-t8-caller-w4a16", 8, 1, 896, 0, 56, false, false, false, false, 64},
      {"full-t64-gpu-route-f32", 64, 16, 896, 0, 896, true, true, true, true, 96},
      {"tp8ep4-t256-caller-4096pairs", 256, 16, 896, 224, 224, false, false, true, false, 0},
      {"ep16-t4096-k1-caller", 4096, 1, 896, 56, 56, false, true, false, true, 8},
      {"wide-k40-gpu-route", 37, 40, 40, 0, 40, true, false, true, false, 0},
      {"t3-unaligned-stride", 3, 16, 896, 112, 56, true, false, true, false, 3},
      {"ep16-t16-gpu-route-16-warps", 16, 16, 896, 448, 56, true, true, true, false, 0},
      {"e2048-t2-smem-route", 2, 16, 2048, 64, 64, true, false, true, false, 0},
  };
  for (const auto& c : cases) run_prologue_case(c);
}

TEST(GpuPrologue, PlanFallsBackOutsideItsBounds) {
  // Host-only: sizes alone decide (graph-capturable).
  EXPECT_TRUE(smxx::prologue_plan(256, 16, 896, 224, true).ok);
  EXPECT_FALSE(smxx::prologue_plan(257, 16, 896, 224, true).ok);  // 4112 pairs
  EXPECT_FALSE(smxx::prologue_plan(1, 16, 896, 7000, false).ok);  // counters exceed 48 KB
  EXPECT_TRUE(smxx::prologue_plan(1, 16, 6144, 56, true).ok);     // 2 routing warps fit
  EXPECT_EQ(smxx::prologue_plan(1, 16, 6144, 56, true).route_warps, 1);
  EXPECT_EQ(smxx::prologue_plan(8, 16, 896, 56, true).route_warps, 8);  // one token per warp
  EXPECT_FALSE(smxx::prologue_plan(8, 16, 896, 56, true).route_first);
  // Routing warps: 16 with register keys, else as many as 48 KB of keys allow (13 for 896).
  const int w896 = smxx::kRouteRegExperts >= 896 ? 16 : 13;
  EXPECT_EQ(smxx::prologue_plan(w896, 16, 896, 56, true).route_warps, w896);
  EXPECT_TRUE(smxx::prologue_plan(w896 + 1, 16, 896, 56, true).route_first);
  EXPECT_TRUE(smxx::prologue_plan(64, 16, 896, 56, true).route_first);
  EXPECT_EQ(smxx::prologue_plan(2, 16, 2048, 56, true).route_warps, 2);  // shared-memory keys: 6 warps
  EXPECT_TRUE(smxx::prologue_plan(7, 16, 2048, 56, true).route_first);
  EXPECT_EQ(smxx::prologue_plan(64, 16, 896, 56, true).route_warps, 0);
  // Quantize CTAs: one per token up to 32 (each takes most of an SM; GEMM1's early CTAs need the
  // rest: bench/NOTES.md G round 13), unless MXMOE_PROLOGUE_QUANT_CTAS sets the cap for an A/B.
  if (std::getenv("MXMOE_PROLOGUE_QUANT_CTAS") == nullptr) {
    EXPECT_EQ(smxx::prologue_plan(8, 16, 896, 56, false).quant_ctas, 8);
    EXPECT_EQ(smxx::prologue_plan(32, 16, 896, 56, false).quant_ctas, 32);
    EXPECT_EQ(smxx::prologue_plan(128, 16, 896, 224, false).quant_ctas, 32);
  }
  // The routing warps' scratch fits the CTA's shared memory, however few the counters: the
  // register keys' select scratch (route_scratch_words) per warp, or E keys per warp.
  for (int El : {1, 56}) {
    const smxx::PrologueShape reg = smxx::prologue_plan(16, 16, 896, El, true);
    EXPECT_GE(reg.smem_bytes, 16u * smxx::route_scratch_words(896) * 4) << El;
    const smxx::PrologueShape shm = smxx::prologue_plan(2, 16, 2048, El, true);
    EXPECT_GE(shm.smem_bytes, 2u * 2048 * 4) << El;
  }
  EXPECT_EQ(smxx::route_scratch_words(896), smxx::kRouteSelectWords);
  EXPECT_EQ(smxx::route_scratch_words(1501), 1502);  // even: 8-byte aligned per warp
}

// ---- timing of the glue chain alone (no GEMMs), fused prologue vs separate kernels ----
// DISABLED_ by default; run with --gtest_also_run_disabled_tests --gtest_filter='*GlueBench*'.
// The chain of run_moe without the two GEMMs, captured in a CUDA graph (PDL edges included),
// each replay after a 256 MB L2 flush, median of 30 replays. Shapes as `mxmoe bench`: k = 16
// of 896 experts, local EP16 = 56 (I 3072) or TP8xEP4 = 224; BF16 input, w4a8 quantization.
// What both glue benches time with: the flush buffer and a non-blocking stream.
struct GlueBenchRig {
  static constexpr size_t kFlushBytes = 256u << 20;
  DevBuf<uint8_t> flush{kFlushBytes};
  cudaStream_t s = nullptr;
  GlueBenchRig() { cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); }
  ~GlueBenchRig() { cudaStreamDestroy(s); }
  GlueBenchRig(const GlueBenchRig&) = delete;
  GlueBenchRig& operator=(const GlueBenchRig&) = delete;
  bool ok() const { return s != nullptr && flush.get() != nullptr; }
  // One CUDA graph of enqueue's launches, median of 30 replays after an L2 flush of kFlushBytes
  // (flushed) or with none (warm).
  float time_us(const std::function<cudaError_t(cudaStream_t)>& enqueue,
                bool flushed = true) const {
    return median_graph_us(enqueue, s, flush.get(), flushed ? kFlushBytes : 0, 5, 30);
  }
};

TEST(GpuGlueBench, DISABLED_FusedVsSeparateChain) {
  MXMOE_REQUIRE_SM90();
  const int H = 3584, k = 16, Et = 896;
  const GlueBenchRig rig;
  ASSERT_TRUE(rig.ok());
  const cudaStream_t s = rig.s;
  for (int El : {56, 224})
    for (int T : {1, 8, 64})
      for (bool gpu_route : {false, true}) {
        const int P = T * k;
        Rng r(T + El);
        std::vector<uint16_t> xb(static_cast<size_t>(T) * H);
        for (auto& v : xb) v = float_to_bf16(r.normal());
        std::vector<float> logits(static_cast<size_t>(T) * Et), w(P);
        for (auto& v : logits) v = 2.0f * r.normal();
        std::vector<int32_t> ids(P);
        for (int i = 0; i < P; ++i) {
          ids[i] = r.below(Et);
          w[i] = static_cast<float>(r.uniform());
        }
        DevBuf<uint16_t> dx, xq(static_cast<size_t>(T) * H);
        DevBuf<float> dlog, dw, rw(P), y(static_cast<size_t>(P) * H),
            out(static_cast<size_t>(T) * H);
        DevBuf<int32_t> dids, rid(P);
        GroupBuffers grp(P, El);
        dx.upload(xb);
        dlog.upload(logits);
        dids.upload(ids);
        dw.upload(w);
        CUDA_OK(cudaMemset(y.get(), 0, y.size() * 4));
        const int32_t* use_ids = gpu_route ? rid.get() : dids.get();
        const float* use_w = gpu_route ? rw.get() : dw.get();
        auto separate = [&](cudaStream_t st) {
          cudaError_t e = smxx::launch_quantize_input(
              dx.get(), false, H, T, H, true, reinterpret_cast<__nv_bfloat16*>(xq.get()), st);
          if (e == cudaSuccess && gpu_route)
            e = smxx::launch_route_kimi(dlog.get(), Et, nullptr, T, Et, k, true, 1.0f, rid.get(),
                                        rw.get(), st);
          smxx::GroupArgs g = grp.args(use_ids, use_w, T, k, 0, El, false, true);
          g.situ.h_ready = nullptr;  // the fused chain below does not zero the counters either
          const char* failed = nullptr;
          if (e == cudaSuccess) e = smxx::launch_group(g, st, &failed);
          if (e == cudaSuccess)
            e = smxx::launch_combine(y.get(), H, grp.pos.get(), T, k, out.get(), H, false, st);
          return e;
        };
        const smxx::PrologueShape shape = smxx::prologue_plan(T, k, Et, El, gpu_route);
        ASSERT_TRUE(shape.ok);
        auto fused = [&](cudaStream_t st) {
          smxx::PrologueArgs a;
          a.x = dx.get();
          a.x_stride = H;
          a.H = H;
          a.mxfp8 = true;
          a.xq = xq.get();
          cudaError_t e = cudaSuccess;
          if (shape.route_first)
            e = smxx::launch_route_kimi(dlog.get(), Et, nullptr, T, Et, k, true, 1.0f, rid.get(),
                                        rw.get(), st);
          if (gpu_route && !shape.route_first) {
            a.logits = dlog.get();
            a.logits_stride = Et;
            a.num_experts_total = Et;
            a.route_ids = rid.get();
            a.route_weights = rw.get();
          } else {
            a.ids = use_ids;
            a.weights = use_w;
          }
          a.T = T;
          a.k = k;
          a.expert_count = El;
          a.expert_offsets = grp.off.get();
          a.x_row = grp.xrow.get();
          a.row_weight = grp.roww.get();
          a.pair_pos = grp.pos.get();
          a.situ = grp.situ_fill();
          a.situ.h_ready = nullptr;  // as the separate chain above
          if (e == cudaSuccess) e = smxx::launch_prologue(a, shape, st);
          if (e == cudaSuccess)
            e = smxx::launch_combine(y.get(), H, grp.pos.get(), T, k, out.get(), H, false, st);
          return e;
        };
        const float ts = rig.time_us(separate);
        const float tf = rig.time_us(fused);
        ASSERT_TRUE(ts > 0 && tf > 0);
        CUDA_OK(cudaStreamSynchronize(s));
        CUDA_OK(cudaGetLastError());
        std::printf("GLUEBENCH local=%3d T=%3d router=%-4s | separate %6.2f us | fused %6.2f us | "
                    "saved %6.2f us\n", El, T, gpu_route ? "gpu" : "ids", ts, tf, ts - tf);
      }
}

// The GPU router alone at decode sizes (bench/NOTES.md, next steps after D round 21: with router
// logits the chain costs 17-20 us more than with ids at T <= 8, while one warp's k rounds should
// take a few us). Graph replays of launch_route_kimi over 896 experts, after an L2 flush and
// warm, for k = 1 / 4 / 16 and both key stores: if the time hardly moves with k, the rounds are
// not the cost; if it moves with the flush, the logits' and bias' DRAM reads are. A graph of one
// 4-byte memset is the floor (launch + graph overhead).
TEST(GpuGlueBench, DISABLED_RouteAlone) {
  MXMOE_REQUIRE_SM90();
  const int Et = 896;
  const GlueBenchRig rig;
  ASSERT_TRUE(rig.ok());
  const cudaStream_t s = rig.s;
  DevBuf<int32_t> rid(8 * 16);
  DevBuf<float> rw(8 * 16), dlog, dbias;
  auto floor_node = [&](cudaStream_t st) { return cudaMemsetAsync(rid.get(), 0, 4, st); };
  const float floor_flushed = rig.time_us(floor_node), floor_warm = rig.time_us(floor_node, false);
  ASSERT_TRUE(floor_flushed > 0 && floor_warm > 0);
  std::printf("ROUTEBENCH floor (one memset node) | flushed %6.2f us | warm %6.2f us\n",
              floor_flushed, floor_warm);
  for (int T : {1, 8}) {
    Rng r(T);
    std::vector<float> logits(static_cast<size_t>(T) * Et), bias(Et);
    for (auto& v : logits) v = 2.0f * r.normal();
    for (auto& v : bias) v = 0.1f * r.normal();
    CUDA_OK(dlog.upload(logits));
    CUDA_OK(dbias.upload(bias));
    for (int k : {1, 4, 16})
      for (int reg : {smxx::kRouteRegMax, 0}) {
        auto route = [&](cudaStream_t st) {
          return smxx::launch_route_kimi(dlog.get(), Et, dbias.get(), T, Et, k, true, 2.5f,
                                         rid.get(), rw.get(), st, reg);
        };
        const float flushed = rig.time_us(route);
        const float warm = rig.time_us(route, false);
        ASSERT_TRUE(flushed > 0 && warm > 0);
        CUDA_OK(cudaStreamSynchronize(s));
        CUDA_OK(cudaGetLastError());
        std::printf("ROUTEBENCH T=%d E=%d k=%2d keys=%-9s | flushed %6.2f us | warm %6.2f us\n", T,
                    Et, k, reg ? "registers" : "shared", flushed, warm);
      }
  }
}

// The glue at prefill sizes, each kernel alone and the w4a16 chain (group, whose scan also
// writes the SiTU parameters, -> combine), as run_moe launches them outside the fused
// prologue; graph replays after an L2 flush (GlueBenchRig::time_us). Routing as `mxmoe bench`'s
// uniform layouts: each token L distinct local ids among El and 16 - L foreign ones, in
// shuffled slots: EP16 El = 56, L = 1 (every token owns one local pair: the grouping marks out
// rows and the combine skips them, as run_moe's direct stores do), TP8xEP4 El = 224, L = 4
// (every token summed by the combine).
// "quantize" is the W4A8 path's BF16 -> MXFP8 copy of x (the W4A16 path reads x in place).
TEST(GpuGlueBench, DISABLED_PrefillGlue) {
  MXMOE_REQUIRE_SM90();
  const int H = 3584, k = 16, Et = 896;
  const GlueBenchRig rig;
  ASSERT_TRUE(rig.ok());
  const cudaStream_t s = rig.s;
  for (auto [El, L] : {std::pair{56, 1}, {224, 4}})
    for (int T : {4096, 16384}) {
      const int P = T * k;
      Rng r(T * 3 + El);
      std::vector<int32_t> ids(P);
      std::vector<float> w(P);
      for (int t = 0; t < T; ++t) {
        int32_t* row = &ids[static_cast<size_t>(t) * k];
        int n = 0;
        while (n < k) {
          const int e = n < L ? r.below(El) : El + r.below(Et - El);
          if (std::find(row, row + n, e) == row + n) row[n++] = e;
        }
        for (int j = k - 1; j > 0; --j) std::swap(row[j], row[r.below(j + 1)]);
      }
      for (auto& v : w) v = static_cast<float>(0.1 + r.uniform());
      std::vector<uint16_t> xb(static_cast<size_t>(T) * H);
      for (auto& v : xb) v = float_to_bf16(static_cast<float>(r.uniform() - 0.5));
      const bool direct = L == 1;
      DevBuf<uint16_t> dx, xq(static_cast<size_t>(T) * H);
      DevBuf<float> dw, y(static_cast<size_t>(T) * L * H), out(static_cast<size_t>(T) * H);
      DevBuf<int32_t> dids;
      GroupBuffers grp(P, El);
      dx.upload(xb);
      dids.upload(ids);
      dw.upload(w);
      CUDA_OK(cudaMemset(y.get(), 0, y.size() * 4));
      const smxx::GroupArgs g = grp.args(dids.get(), dw.get(), T, k, 0, El, direct, true);
      auto group = [&](cudaStream_t st) {
        const char* failed = nullptr;
        return smxx::launch_group(g, st, &failed);
      };
      auto combine = [&](cudaStream_t st) {
        return smxx::launch_combine(y.get(), H, grp.pos.get(), T, k, out.get(), H, direct, st);
      };
      auto quantize = [&](cudaStream_t st) {
        return smxx::launch_quantize_input(dx.get(), false, H, T, H, true,
                                           reinterpret_cast<__nv_bfloat16*>(xq.get()), st);
      };
      CUDA_OK(group(s));  // pair_pos for the combine's timing alone
      CUDA_OK(cudaStreamSynchronize(s));
      const float tg = rig.time_us(group);
      const float tc = rig.time_us(combine);
      const float tq = rig.time_us(quantize);
      const float tall = rig.time_us([&](cudaStream_t st) {
        const cudaError_t e = group(st);
        return e == cudaSuccess ? combine(st) : e;
      });
      ASSERT_TRUE(tg > 0 && tc > 0 && tq > 0 && tall > 0);
      CUDA_OK(cudaStreamSynchronize(s));
      CUDA_OK(cudaGetLastError());
      std::printf("GLUEBENCH prefill local=%3d per-token=%d T=%5d | group (+ SiTU fill) %7.2f us "
                  "| combine %7.2f us | chain %7.2f us | quantize (w4a8) %7.2f us\n",
                  El, L, T, tg, tc, tall, tq);
    }
}

}  // namespace
}  // namespace mxmoe::test
