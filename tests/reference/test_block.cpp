// test_block.cpp: reference_block against a plain fp64 loop of the whole Kimi-K3 MoE block.
//
// The mirror loop keeps the reference's rounding points (router logits and latent to fp32 then
// BF16, fp32 SiTU via formats.h, fp32 expert combine, RMSNorm output to BF16, shared SiTU output
// to BF16) and computes everything else in fp64: bar NRMSE < 1e-6 (only the final fp32 roundings
// differ). The pure loop computes routing, SiTU and RMSNorm in double: bar NRMSE < 2e-3 in bf16
// mode and < 2e-2 in mxfp8 mode, for the rounding flips explained in test_experts.cpp (here also
// in the latent, the norm output and the shared intermediate, all BF16).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "fixture.h"
#include "fp64_experts.h"
#include "mxmoe/reference.h"

namespace {

using namespace mxmoe;
using fixture::Path;

std::vector<double> block_fp64(const MoeLayer& L, const std::vector<uint16_t>& xb, int T,
                               ActMode mode, Path path) {
  const ModelConfig& c = L.cfg;
  const int D = c.hidden_size, H = c.routed_expert_hidden_size, E = c.num_experts,
            k = c.num_experts_per_token, Is = c.shared_intermediate_size();
  const bool mirror = path == Path::kMirror;
  const auto Wg = fixture::dequant(L.router), Wd = fixture::dequant(L.latent_down),
             Wu = fixture::dequant(L.latent_up), Sg = fixture::dequant(L.shared_gate),
             Su = fixture::dequant(L.shared_up), Sd = fixture::dequant(L.shared_down);
  const auto xall = fixture::dequant(Bf16View{xb.data(), T, D});
  fixture::Fp64Experts ex(L);
  SituParams situ;
  situ.beta = static_cast<float>(c.activation_situ_beta);
  situ.linear_beta = static_cast<float>(c.activation_situ_linear_beta);
  std::vector<double> out;
  for (int t = 0; t < T; ++t) {
    const std::vector<double> x(xall.begin() + t * D, xall.begin() + (t + 1) * D);
    // Router: sort all experts by (key desc, id asc).
    const auto logit = fixture::matvec(Wg, E, D, x);
    std::vector<double> s(E), key(E);
    for (int e = 0; e < E; ++e) {
      if (mirror) {
        s[e] = situ_sigmoid(static_cast<float>(logit[e]));
        key[e] = static_cast<float>(static_cast<float>(s[e]) + L.router_bias[e]);
      } else {
        s[e] = 1.0 / (1.0 + std::exp(-logit[e]));
        key[e] = s[e] + L.router_bias[e];
      }
    }
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key[a] > key[b]; });
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += s[order[j]];
    std::vector<int32_t> ids(order.begin(), order.begin() + k);
    std::vector<float> w(k);
    if (mirror) {  // the contract's fp32 arithmetic: sum in slot order, s / sum * scaling
      float fsum = 0.0f;
      for (int j = 0; j < k; ++j) fsum = fsum + static_cast<float>(s[order[j]]);
      for (int j = 0; j < k; ++j)
        w[j] = static_cast<float>(s[order[j]]) / fsum * static_cast<float>(c.routed_scaling_factor);
    } else {
      for (int j = 0; j < k; ++j)
        w[j] = static_cast<float>(s[order[j]] / sum * c.routed_scaling_factor);
    }
    // Latent, experts, RMSNorm, up-projection.
    auto lat = fixture::matvec(Wd, H, D, x);
    std::vector<float> latf(H);
    for (int i = 0; i < H; ++i)
      latf[i] =
          static_cast<float>(fixture::bf16_round(mirror ? static_cast<float>(lat[i]) : lat[i]));
    const auto r = ex.run(latf, 1, ids, w, k, mode, situ, 0, E, path);
    double ss = 0;
    for (double v : r) ss += v * v;
    const double rms = std::sqrt(ss / H + c.rms_norm_eps);
    std::vector<double> normed(H);
    for (int i = 0; i < H; ++i)
      normed[i] = fixture::bf16_round(r[i] / rms * bf16_to_float(L.latent_norm[i]));
    const auto y = fixture::matvec(Wu, D, H, normed);
    // Shared experts.
    const auto g = fixture::matvec(Sg, Is, D, x), u = fixture::matvec(Su, Is, D, x);
    std::vector<double> h(Is);
    for (int i = 0; i < Is; ++i)
      h[i] =
          fixture::bf16_round(mirror ? situ_glu(static_cast<float>(g[i]), static_cast<float>(u[i]),
                                                situ.beta, situ.linear_beta)
                                     : fixture::situ_double(g[i], u[i], c.activation_situ_beta,
                                                            c.activation_situ_linear_beta));
    const auto sh = fixture::matvec(Sd, D, Is, h);
    for (int i = 0; i < D; ++i) out.push_back(y[i] + sh[i]);
  }
  return out;
}

struct Case {
  int D, H, I, E, k, T, shared;
};

TEST(Block, AgainstFp64Loops) {
  const Case cases[] = {
      {128, 64, 64, 8, 2, 1, 1}, {256, 128, 64, 8, 4, 3, 2}, {128, 96, 64, 16, 3, 9, 1}};
  uint32_t seed = 300;
  for (const Case& cs : cases)
    for (ActMode mode : {ActMode::kBf16, ActMode::kMxfp8}) {
      auto tl = fixture::make_layer({cs.D, cs.H, cs.I, cs.E, cs.k, cs.shared}, ++seed, true);
      tl->layer.cfg.activation_situ_beta = 3.5;  // not the defaults: the block must read the config
      tl->layer.cfg.activation_situ_linear_beta = 20.0;
      tl->layer.cfg.routed_scaling_factor = 2.5;
      std::mt19937 rng(++seed);
      std::normal_distribution<float> n(0.0f, 1.0f);
      std::vector<uint16_t> x(static_cast<size_t>(cs.T) * cs.D);
      for (auto& v : x) v = float_to_bf16(n(rng));
      std::vector<float> out(x.size());
      reference_block(tl->layer, x.data(), cs.T, mode, situ_from_config(tl->layer.cfg), out.data());
      const auto mirror = block_fp64(tl->layer, x, cs.T, mode, Path::kMirror);
      const auto pure = block_fp64(tl->layer, x, cs.T, mode, Path::kPure);
      const double em = fixture::nrmse(out, mirror), ep = fixture::nrmse(out, pure);
      std::printf(
          "D=%d H=%d I=%d E=%d k=%d T=%d %s: block NRMSE vs mirror %.3g, vs pure fp64 %.3g\n", cs.D,
          cs.H, cs.I, cs.E, cs.k, cs.T, act_mode_name(mode), em, ep);
      EXPECT_LT(em, 1e-6);
      EXPECT_LT(ep, mode == ActMode::kBf16 ? 2e-3 : 2e-2);
    }
}

TEST(Block, MissingTensorsThrow) {
  auto tl = fixture::make_layer({128, 64, 64, 8, 2, 1}, 7, false);
  std::vector<uint16_t> x(128, 0x3F80);
  std::vector<float> out(128);
  EXPECT_THROW(reference_block(tl->layer, x.data(), 1, ActMode::kBf16, {}, out.data()), Error);
  auto tb = fixture::make_layer({128, 64, 64, 8, 2, 1}, 8, true);
  tb->layer.shared_down = Bf16View{};
  try {
    reference_block(tb->layer, x.data(), 1, ActMode::kBf16, {}, out.data());
    ADD_FAILURE() << "missing shared_down accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shared_experts.down_proj"), std::string::npos)
        << e.what();
  }
}

}  // namespace
