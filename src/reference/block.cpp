// block.cpp: the whole Kimi-K3 MoE block on the CPU (reference.h: reference_block).
//
//   logits = x . Wg^T                        -> route_kimi (sigmoid + correction bias, top-k)
//   latent = BF16(x . down^T)                   [T, latent]
//   routed = reference_experts(latent)          every expert (an EP partial sum cannot be normed)
//   normed = BF16(routed / sqrt(mean(routed^2) + eps) * norm_w)   in fp64, one rounding to BF16
//   y      = normed . up^T                      [T, hidden]
//   shared = down_s . BF16(situ_glu(x . gate_s^T, x . up_s^T))     config's beta / linear_beta
//   out    = y + shared                         fp32
// Every product: fp64 accumulation, one rounding to fp32 (matmul.cpp).
// Limitations: needs a layer loaded with LayerScope::kBlock; with latent_moe_use_norm = false the
// norm is skipped (routed is only rounded to BF16).
#include <cmath>
#include <string>
#include <vector>

#include "mxmoe/formats.h"
#include "mxmoe/reference.h"

namespace mxmoe {
namespace {

void check_bf16(const Bf16View& v, const char* name, int rows, int cols) {
  if (!v.data || v.rows != rows || v.cols != cols)
    throw Error(std::string("reference_block: ") + name + " missing or not [" +
                std::to_string(rows) + ", " + std::to_string(cols) + "]");
}

// fp64 -> BF16 with one rounding (RNE). Going through fp32 with RNE could round twice; rounding
// to fp32 by round-to-odd first keeps the sticky information, and 24 >= 8 + 2 bits make the
// second (RNE) rounding exact-once.
float round_bf16_from_double(double d) {
  float f = static_cast<float>(d);
  if (std::isfinite(f) && static_cast<double>(f) != d) {
    if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
    f = bits_float(float_bits(f) | 1u);
  }
  return round_bf16(f);
}

}  // namespace

void reference_block(const MoeLayer& layer, const uint16_t* x_bf16, int T, ActMode mode,
                     const SituParams& situ, float* out) {
  const ModelConfig& cfg = layer.cfg;
  const int D = cfg.hidden_size, L = cfg.routed_expert_hidden_size, E = cfg.num_experts,
            k = cfg.num_experts_per_token, Is = cfg.shared_intermediate_size();
  if (!layer.has_block) throw Error("reference_block: layer was not loaded with the block tensors");
  check_bf16(layer.latent_down, "routed_expert_down_proj.weight", L, D);
  check_bf16(layer.latent_up, "routed_expert_up_proj.weight", D, L);
  if (cfg.latent_moe_use_norm && !layer.latent_norm)
    throw Error("reference_block: routed_expert_norm.weight missing");
  if (Is > 0) {
    check_bf16(layer.shared_gate, "shared_experts.gate_proj.weight", Is, D);
    check_bf16(layer.shared_up, "shared_experts.up_proj.weight", Is, D);
    check_bf16(layer.shared_down, "shared_experts.down_proj.weight", D, Is);
  }
  if (T <= 0) return;
  const size_t TD = static_cast<size_t>(T) * D, TL = static_cast<size_t>(T) * L;
  std::vector<float> x(TD);
  for (size_t i = 0; i < TD; ++i) x[i] = bf16_to_float(x_bf16[i]);

  // Routing.
  std::vector<float> logits(static_cast<size_t>(T) * E), weights(static_cast<size_t>(T) * k);
  std::vector<int32_t> ids(static_cast<size_t>(T) * k);
  router_logits(layer, x_bf16, T, logits.data());
  RoutingConfig rc;
  rc.num_experts = E;
  rc.top_k = k;
  rc.renormalize = cfg.moe_renormalize;
  rc.scaling_factor = static_cast<float>(cfg.routed_scaling_factor);
  route_kimi(logits.data(), layer.router_bias, T, rc, ids.data(), weights.data());

  // Latent down-projection, routed experts.
  std::vector<float> latent(TL), routed(TL);
  bf16_matmul_nt(layer.latent_down, x.data(), T, latent.data());
  for (float& v : latent) v = round_bf16(v);
  reference_experts(layer, latent.data(), T, ids.data(), weights.data(), k, mode, situ,
                    ExpertRange{0, -1}, routed.data());

  // RMSNorm in fp64 (sum of squares, rsqrt and scaling), one rounding to BF16.
  for (int t = 0; t < T; ++t) {
    float* r = &routed[static_cast<size_t>(t) * L];
    if (!cfg.latent_moe_use_norm) {
      for (int c = 0; c < L; ++c) r[c] = round_bf16(r[c]);
      continue;
    }
    double ss = 0;
    for (int c = 0; c < L; ++c) ss += static_cast<double>(r[c]) * r[c];
    const double inv = 1.0 / std::sqrt(ss / L + cfg.rms_norm_eps);
    for (int c = 0; c < L; ++c)
      r[c] = round_bf16_from_double(r[c] * inv * bf16_to_float(layer.latent_norm[c]));
  }
  bf16_matmul_nt(layer.latent_up, routed.data(), T, out);

  if (Is <= 0) return;
  // Shared experts: one SiTU-GLU MLP of width num_shared * moe_intermediate on the full x.
  const size_t TI = static_cast<size_t>(T) * Is;
  std::vector<float> g(TI), u(TI), sh(TD);
  bf16_matmul_nt(layer.shared_gate, x.data(), T, g.data());
  bf16_matmul_nt(layer.shared_up, x.data(), T, u.data());
  const float beta = static_cast<float>(cfg.activation_situ_beta),
              lbeta = static_cast<float>(cfg.activation_situ_linear_beta);
  for (size_t i = 0; i < TI; ++i) g[i] = round_bf16(situ_glu(g[i], u[i], beta, lbeta));
  bf16_matmul_nt(layer.shared_down, g.data(), T, sh.data());
  for (size_t i = 0; i < TD; ++i) out[i] = out[i] + sh[i];
}

}  // namespace mxmoe
