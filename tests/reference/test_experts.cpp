// test_experts.cpp: reference_experts and its pieces against plain fp64 loops.
//
// Bars (NRMSE = relative RMS error against the fp64 result):
//  - pieces with no intermediate rounding (one GEMM, GEMM1 + SiTU, the mirror loop of
//    fp64_experts.h): < 1e-6. The only differences are the reference's final roundings to fp32
//    (2^-24 ~ 6e-8 relative each) and fp32 SiTU (a few ulps), so 1e-6 leaves a 10x margin while
//    still catching any wrong rounding point, order or operand (those cost >= 2^-9 ~ 2e-3).
//  - the pure-double loop (std::tanh, Q on double values): < 1e-3 in bf16 mode and < 2e-2 in mxfp8
//    mode. A SiTU output within a few fp32 ulps of a rounding midpoint may round the other way in
//    double: one flipped BF16 rounding moves one intermediate by 2^-8 relative, one flipped E4M3
//    rounding by 2^-3; the printed values are normally ~1e-7 (no flip).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "fixture.h"
#include "fp64_experts.h"
#include "mxmoe/mx_quant.h"
#include "mxmoe/reference.h"

namespace {

using namespace mxmoe;
using fixture::Path;

std::vector<float> random_x(int T, int H, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, stddev);
  std::vector<float> x(static_cast<size_t>(T) * H);
  for (auto& v : x) v = n(rng);
  return x;
}

// Random distinct ids per token (some -1 when `holes`), random positive weights.
void random_routing(int T, int E, int k, uint32_t seed, bool holes, std::vector<int32_t>* ids,
                    std::vector<float>* w) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.05f, 1.0f);
  ids->resize(static_cast<size_t>(T) * k);
  w->resize(ids->size());
  std::vector<int> perm(E);
  for (int t = 0; t < T; ++t) {
    for (int e = 0; e < E; ++e) perm[e] = e;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int j = 0; j < k; ++j) {
      (*ids)[t * k + j] = (holes && (t + j) % 5 == 0) ? -1 : perm[j];
      (*w)[t * k + j] = u(rng);
    }
  }
}

const ActMode kModes[] = {ActMode::kBf16, ActMode::kMxfp8};

// One test's inputs: a random layer (seed), activations (seed + 1) and routing (seed + 2).
struct Workload {
  std::unique_ptr<fixture::TestLayer> tl;
  std::vector<float> x;
  std::vector<int32_t> ids;
  std::vector<float> w;
  int T, H, k;

  // reference_experts over the whole batch into `out` (resized to T x H).
  void run(ActMode mode, const SituParams& situ, ExpertRange ep, std::vector<float>* out) const {
    out->resize(static_cast<size_t>(T) * H);
    reference_experts(tl->layer, x.data(), T, ids.data(), w.data(), k, mode, situ, ep, out->data());
  }
};

Workload make_workload(int H, int I, int E, int k, int T, uint32_t seed, bool holes,
                       float stddev = 1.0f) {
  Workload wl;
  wl.tl = fixture::make_layer({128, H, I, E, k, 1}, seed, false);
  wl.x = random_x(T, H, seed + 1, stddev);
  random_routing(T, E, k, seed + 2, holes, &wl.ids, &wl.w);
  wl.T = T;
  wl.H = H;
  wl.k = k;
  return wl;
}

TEST(ActMode, Names) {
  ActMode m;
  ASSERT_TRUE(act_mode_from_name("bf16", &m));
  EXPECT_EQ(m, ActMode::kBf16);
  ASSERT_TRUE(act_mode_from_name("mxfp8", &m));
  EXPECT_EQ(m, ActMode::kMxfp8);
  EXPECT_FALSE(act_mode_from_name("fp8", &m));
  EXPECT_STREQ(act_mode_name(ActMode::kBf16), "bf16");
  EXPECT_STREQ(act_mode_name(ActMode::kMxfp8), "mxfp8");
  ModelConfig c;
  c.activation_situ_beta = 3.0;
  c.activation_situ_linear_beta = 11.0;
  EXPECT_EQ(situ_from_config(c).beta, 3.0f);
  EXPECT_EQ(situ_from_config(c).linear_beta, 11.0f);
}

TEST(Pieces, QuantizeActivationsMatchesIndependentQuantizers) {
  const int T = 7, K = 96;
  auto x = random_x(T, K, 1, 3.0f);
  x[5] = -0.0f;
  x[17] = 1e-30f;
  for (ActMode mode : kModes) {
    std::vector<float> q(x.size());
    quantize_activations(x.data(), T, K, mode, q.data());
    for (int t = 0; t < T; ++t) {
      std::vector<double> row(x.begin() + t * K, x.begin() + (t + 1) * K);
      std::vector<double> expect = row;
      if (mode == ActMode::kMxfp8)
        expect = fixture::mxfp8_round(row);
      else
        for (auto& v : expect) v = fixture::bf16_round(v);
      for (int c = 0; c < K; ++c)
        ASSERT_EQ(static_cast<double>(q[t * K + c]), expect[c]) << t << "," << c;
    }
  }
  std::vector<float> q(x.size());
  EXPECT_THROW(quantize_activations(x.data(), 1, 48, ActMode::kMxfp8, q.data()), Error);
  x[3] = NAN;
  EXPECT_THROW(quantize_activations(x.data(), T, K, ActMode::kMxfp8, q.data()), Error);
}

// One GEMM: per element within one fp32 rounding (plus fp64 reordering, ~K * 2^-53).
TEST(Pieces, MxMatmulIsFp64RoundedOnce) {
  auto tl = fixture::make_layer({128, 96, 64, 2, 1, 1}, 2, false);
  const Mxfp4View& W = tl->layer.experts[1].w2;  // [96, 64]
  const int T = 9;
  const auto x = random_x(T, W.k, 3);
  std::vector<float> y(static_cast<size_t>(T) * W.rows);
  mx_matmul_nt(W, x.data(), T, y.data());
  const auto Wd = fixture::dequant(W);
  for (int t = 0; t < T; ++t) {
    const std::vector<double> xt(x.begin() + t * W.k, x.begin() + (t + 1) * W.k);
    const auto yd = fixture::matvec(Wd, W.rows, W.k, xt);
    for (int n = 0; n < W.rows; ++n) {
      double absum = 0;
      for (int k = 0; k < W.k; ++k) absum += std::fabs(Wd[n * W.k + k] * xt[k]);
      EXPECT_LE(std::fabs(y[t * W.rows + n] - yd[n]),
                std::ldexp(std::fabs(yd[n]), -24) + absum * 1e-15)
          << t << "," << n;
    }
  }
}

TEST(Pieces, Gemm1SituAndGemm2AgainstFp64) {
  auto tl = fixture::make_layer({128, 128, 64, 3, 1, 1}, 4, false);
  const ExpertView& ex = tl->layer.experts[2];
  const int T = 5, H = 128, I = 64;
  std::vector<float> xq(static_cast<size_t>(T) * H);
  auto x = random_x(T, H, 5);
  quantize_activations(x.data(), T, H, ActMode::kBf16, xq.data());
  std::vector<float> h(static_cast<size_t>(T) * I), y(static_cast<size_t>(T) * H);
  reference_gemm1_situ(ex, xq.data(), T, 3.0f, 20.0f, h.data());
  reference_gemm2(ex, h.data(), T, y.data());
  const auto w1 = fixture::dequant(ex.w1), w3 = fixture::dequant(ex.w3),
             w2 = fixture::dequant(ex.w2);
  std::vector<double> h64, y64;
  for (int t = 0; t < T; ++t) {
    const std::vector<double> xt(xq.begin() + t * H, xq.begin() + (t + 1) * H);
    const auto g = fixture::matvec(w1, I, H, xt), u = fixture::matvec(w3, I, H, xt);
    for (int i = 0; i < I; ++i) h64.push_back(fixture::situ_double(g[i], u[i], 3.0, 20.0));
    const std::vector<double> ht(h.begin() + t * I, h.begin() + (t + 1) * I);
    const auto yt = fixture::matvec(w2, H, I, ht);  // GEMM2 on the reference's own h
    y64.insert(y64.end(), yt.begin(), yt.end());
  }
  const double e1 = fixture::nrmse(h, h64), e2 = fixture::nrmse(y, y64);
  std::printf("gemm1+situ NRMSE %.3g, gemm2 NRMSE %.3g\n", e1, e2);
  EXPECT_LT(e1, 1e-6);
  EXPECT_LT(e2, 1e-6);
}

struct Case {
  int H, I, E, k, T;
};

// The whole routed-expert path, both modes, several shapes, against both fp64 loops.
TEST(Experts, AgainstFp64Loops) {
  const Case cases[] = {
      {64, 64, 8, 2, 1}, {128, 64, 8, 4, 5}, {96, 64, 8, 3, 17}, {64, 96, 4, 4, 33}};
  uint32_t seed = 100;
  for (const Case& cs : cases)
    for (ActMode mode : kModes) {
      const Workload wl = make_workload(cs.H, cs.I, cs.E, cs.k, cs.T, seed + 1, true);
      seed += 3;
      SituParams situ;
      std::vector<float> out;
      wl.run(mode, situ, {}, &out);
      fixture::Fp64Experts f(wl.tl->layer);
      const auto mirror = f.run(wl.x, cs.T, wl.ids, wl.w, cs.k, mode, situ, 0, cs.E, Path::kMirror);
      const auto pure = f.run(wl.x, cs.T, wl.ids, wl.w, cs.k, mode, situ, 0, cs.E, Path::kPure);
      const double em = fixture::nrmse(out, mirror), ep = fixture::nrmse(out, pure);
      std::printf("H=%d I=%d E=%d k=%d T=%d %s: NRMSE vs mirror %.3g, vs pure fp64 %.3g\n", cs.H,
                  cs.I, cs.E, cs.k, cs.T, act_mode_name(mode), em, ep);
      EXPECT_LT(em, 1e-6);
      EXPECT_LT(ep, mode == ActMode::kBf16 ? 1e-3 : 2e-2);
    }
}

// Expert parallelism: a rank's output is the fp64 loop restricted to its range; -1 and foreign
// ids add nothing; unowned experts may even have no weights at all.
TEST(Experts, ExpertParallelRanges) {
  const int H = 64, I = 64, E = 8, k = 4, T = 12;
  Workload wl = make_workload(H, I, E, k, T, 7, true);
  const auto& tl = wl.tl;
  const auto& x = wl.x;
  auto& ids = wl.ids;
  const auto& w = wl.w;
  fixture::Fp64Experts f(tl->layer);
  std::vector<float> sum(static_cast<size_t>(T) * H, 0.0f), part(sum.size()), full;
  wl.run(ActMode::kMxfp8, {}, {}, &full);
  const std::pair<int, int> ranges[] = {{0, 3}, {3, 2}, {5, -1}};
  for (auto [start, count] : ranges) {
    MoeLayer sliced = tl->layer;  // drop the weights this rank does not own
    const int end = count < 0 ? E : start + count;
    for (int e = 0; e < E; ++e)
      if (e < start || e >= end) sliced.experts[e] = ExpertView{};
    reference_experts(sliced, x.data(), T, ids.data(), w.data(), k, ActMode::kMxfp8, {},
                      {start, count}, part.data());
    const auto expect =
        f.run(x, T, ids, w, k, ActMode::kMxfp8, {}, start, end - start, Path::kMirror);
    EXPECT_LT(fixture::nrmse(part, expect), 1e-6) << start;
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
  }
  EXPECT_LT(fixture::nrmse(sum, full), 1e-6);
  // An empty range gives zeros; a token whose ids are all -1 gives zeros.
  wl.run(ActMode::kBf16, {}, {3, 0}, &part);
  for (float v : part) ASSERT_EQ(v, 0.0f);
  std::fill(ids.begin(), ids.begin() + k, -1);
  wl.run(ActMode::kBf16, {}, {}, &part);
  for (int c = 0; c < H; ++c) ASSERT_EQ(part[c], 0.0f);
  EXPECT_THROW(reference_experts(tl->layer, x.data(), T, ids.data(), w.data(), k, ActMode::kBf16,
                                 {}, {6, 3}, part.data()),
               Error);
  EXPECT_THROW(reference_experts(tl->layer, x.data(), T, ids.data(), w.data(), k, ActMode::kBf16,
                                 {}, {-1, 2}, part.data()),
               Error);
}

TEST(Experts, PerExpertBetas) {
  const int H = 64, I = 64, E = 4, k = 2, T = 6;
  const Workload wl = make_workload(H, I, E, k, T, 11, false, 2.0f);
  const float betas[E] = {4.0f, 1.0f, 2.5f, 8.0f}, lbetas[E] = {25.0f, 3.0f, 10.0f, 1.5f};
  SituParams per;
  per.per_expert_beta = betas;
  per.per_expert_linear_beta = lbetas;
  SituParams scalar;
  scalar.beta = 2.0f;
  scalar.linear_beta = 5.0f;
  fixture::Fp64Experts f(wl.tl->layer);
  for (ActMode mode : kModes) {
    std::vector<float> a, b, d;
    wl.run(mode, per, {}, &a);
    wl.run(mode, scalar, {}, &b);
    wl.run(mode, {}, {}, &d);
    EXPECT_LT(fixture::nrmse(a, f.run(wl.x, T, wl.ids, wl.w, k, mode, per, 0, E, Path::kMirror)),
              1e-6);
    EXPECT_LT(fixture::nrmse(b, f.run(wl.x, T, wl.ids, wl.w, k, mode, scalar, 0, E, Path::kMirror)),
              1e-6);
    EXPECT_GT(fixture::nrmse(a, d), 1e-2);  // the parameters really change the result
    EXPECT_GT(fixture::nrmse(b, d), 1e-2);
  }
}

TEST(Experts, Mxfp8AndBf16ModesDifferButAreClose) {
  const int H = 128, I = 64, E = 8, k = 4, T = 16;
  const Workload wl = make_workload(H, I, E, k, T, 14, false);
  std::vector<float> a, b;
  wl.run(ActMode::kBf16, {}, {}, &a);
  wl.run(ActMode::kMxfp8, {}, {}, &b);
  const double e = fixture::nrmse(b, a);
  std::printf("mxfp8 vs bf16 NRMSE %.4f\n", e);
  EXPECT_GT(e, 1e-3);  // E4M3 has 3 mantissa bits: the modes must not coincide
  EXPECT_LT(e, 0.08);  // ~2^-5 relative per quantized operand, two quantization points
}

TEST(Experts, BadIdsThrowAndNameTheSlot) {
  const int H = 64, E = 4, k = 2, T = 3;
  auto tl = fixture::make_layer({128, H, 64, E, k, 1}, 17, false);
  const auto x = random_x(T, H, 18);
  std::vector<int32_t> ids = {0, 1, 2, 3, 1, 0};
  std::vector<float> w(ids.size(), 0.5f), out(static_cast<size_t>(T) * H);
  for (int bad : {E, E + 100, -2}) {
    ids[3] = bad;
    try {
      reference_experts(tl->layer, x.data(), T, ids.data(), w.data(), k, ActMode::kBf16, {}, {},
                        out.data());
      ADD_FAILURE() << "id " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("topk_ids[1, 1]"), std::string::npos) << e.what();
    }
  }
  ids[3] = 3;
  EXPECT_THROW(reference_experts(tl->layer, x.data(), T, ids.data(), w.data(), 0, ActMode::kBf16,
                                 {}, {}, out.data()),
               Error);
  // A NaN scale byte in a used expert names the expert.
  auto* scales = const_cast<uint8_t*>(tl->layer.experts[2].w3.scales);
  scales[5] = 255;
  try {
    reference_experts(tl->layer, x.data(), T, ids.data(), w.data(), k, ActMode::kBf16, {}, {},
                      out.data());
    ADD_FAILURE() << "NaN scale accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert 2"), std::string::npos) << e.what();
  }
}

// Results never depend on the thread count, and a token's result does not depend on the other
// tokens in the batch (grouping is per slot and expert).
TEST(Experts, DeterministicAcrossThreadsAndBatches) {
  const int H = 256, I = 256, E = 4, k = 4, T = 40;
  const Workload wl = make_workload(H, I, E, k, T, 19, false);
  std::vector<float> a, b, one(H);
  setenv("MXMOE_REF_THREADS", "1", 1);
  wl.run(ActMode::kMxfp8, {}, {}, &a);
  setenv("MXMOE_REF_THREADS", "3", 1);
  wl.run(ActMode::kMxfp8, {}, {}, &b);
  unsetenv("MXMOE_REF_THREADS");
  ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
  const int t = 23;
  reference_experts(wl.tl->layer, &wl.x[t * H], 1, &wl.ids[t * k], &wl.w[t * k], k, ActMode::kMxfp8,
                    {}, {}, one.data());
  ASSERT_EQ(0, std::memcmp(one.data(), &a[t * H], H * 4));
}

// Kimi-K3's real expert shape (latent 3584, intermediate 3072), 8 experts all chosen by 2 tokens:
// checks one token against the mirror loop on a sample of columns and prints the time.
TEST(Experts, KimiExpertShapeSmoke) {
  const int H = 3584, I = 3072, E = 8, k = 8, T = 2;
  const Workload wl = make_workload(H, I, E, k, T, 22, false);
  const auto& x = wl.x;
  const auto& ids = wl.ids;
  const auto& w = wl.w;
  std::vector<float> out;
  const auto t0 = std::chrono::steady_clock::now();
  wl.run(ActMode::kMxfp8, {}, {}, &out);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("latent %d, intermediate %d, %d tokens x %d experts: %.2f s\n", H, I, T, k, s);
  fixture::Fp64Experts f(wl.tl->layer);
  const std::vector<float> x0(x.begin(), x.begin() + H);
  const std::vector<int32_t> ids0(ids.begin(), ids.begin() + k);
  const std::vector<float> w0(w.begin(), w.begin() + k);
  const auto expect = f.run(x0, 1, ids0, w0, k, ActMode::kMxfp8, {}, 0, E, Path::kMirror);
  EXPECT_LT(fixture::nrmse(std::vector<float>(out.begin(), out.begin() + H), expect), 1e-6);
}

}  // namespace
