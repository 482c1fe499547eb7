// python/csrc/reference_ops.cpp: the CPU reference (mxmoe/reference.h) as torch ops on CPU
// tensors, so that Python tests and engines' test suites can compare against it.
//
//   reference_experts: hidden [T, H] BF16 or F32 (any row stride), topk_ids int32 [T, k],
//     topk_weights fp32 [T, k], stacked weights of ALL experts (stack index = global id),
//     EP range [expert_start, expert_start + expert_count) (count -1 = the rest) -> fp32 [T, H].
//   reference_route: router logits fp32 [T, E], bias fp32 [E] -> (ids int32, weights fp32) [T, k].
//   reference_block: BF16 x [T, hidden] and the block's BF16 tensors -> fp32 [T, hidden].
// Numerics: docs/NUMERICS.md. Errors of the reference (bad ids, NaN scales) come back as
// RuntimeError with its one-line message.
#include <torch/library.h>

#include <string>

#include "checks.h"
#include "mxmoe/reference.h"

namespace mxmoe_torch {
namespace {

mxmoe::ActMode act_mode(c10::string_view s, const char* op) {
  mxmoe::ActMode m;
  const std::string name(s.data(), s.size());
  MXMOE_CHECK(mxmoe::act_mode_from_name(name, &m), op, "act must be 'bf16' or 'mxfp8', got '", name,
              "'");
  return m;
}

// Runs a reference function, turning mxmoe::Error into a torch error with the op's name.
template <typename F>
void guarded(const char* op, F&& f) {
  try {
    f();
  } catch (const mxmoe::Error& e) {
    TORCH_CHECK(false, "mxmoe::", op, ": ", e.what());
  }
}

// Routing tensors of a [T, k] call: int32 ids and fp32 weights on the CPU.
void check_topk(const at::Tensor& ids, const at::Tensor& w, int64_t T, const char* op) {
  check_cpu(ids, op, "topk_ids");
  check_cpu(w, op, "topk_weights");
  check_dtype(ids, at::kInt, op, "topk_ids");
  check_dtype(w, at::kFloat, op, "topk_weights");
  MXMOE_CHECK(ids.dim() == 2 && ids.size(0) == T && ids.size(1) >= 1, op,
              "topk_ids must be [T = ", T, ", k >= 1], got ", shape_str(ids));
  check_shape(w, {T, ids.size(1)}, op, "topk_weights");
}

at::Tensor reference_experts(const at::Tensor& hidden, const at::Tensor& topk_ids,
                             const at::Tensor& topk_weights, const at::Tensor& w1p,
                             const at::Tensor& w1s, const at::Tensor& w3p, const at::Tensor& w3s,
                             const at::Tensor& w2p, const at::Tensor& w2s, int64_t expert_start,
                             int64_t expert_count, c10::string_view act, double beta,
                             double linear_beta, const c10::optional<at::Tensor>& per_beta,
                             const c10::optional<at::Tensor>& per_lbeta) {
  const char* op = "reference_experts";
  check_cpu(hidden, op, "hidden");
  MXMOE_CHECK(hidden.scalar_type() == at::kBFloat16 || hidden.scalar_type() == at::kFloat, op,
              "hidden must be BFloat16 or Float, got ", c10::toString(hidden.scalar_type()));
  check_rows_dense(hidden, op, "hidden");
  const StackedExperts ex = stacked_experts(w1p, w1s, w3p, w3s, w2p, w2s, op);
  MXMOE_CHECK(hidden.size(1) == ex.hidden, op, "hidden is ", shape_str(hidden),
              " but the experts' latent width is ", ex.hidden);
  const int64_t T = hidden.size(0);
  check_topk(topk_ids, topk_weights, T, op);
  const mxmoe::ActMode mode = act_mode(act, op);
  at::Tensor keep_b, keep_lb;
  mxmoe::SituParams situ;
  situ.beta = static_cast<float>(beta);
  situ.linear_beta = static_cast<float>(linear_beta);
  situ.per_expert_beta =
      per_expert_array(per_beta, ex.num_experts, false, op, "per_expert_beta", &keep_b);
  situ.per_expert_linear_beta =
      per_expert_array(per_lbeta, ex.num_experts, false, op, "per_expert_linear_beta", &keep_lb);
  const mxmoe::MoeLayer layer = layer_from_stacked(ex);
  const at::Tensor x = hidden.to(at::kFloat).contiguous();  // BF16 -> fp32 is exact
  const at::Tensor ids = topk_ids.contiguous(), w = topk_weights.contiguous();
  at::Tensor out = at::empty({T, ex.hidden}, hidden.options().dtype(at::kFloat));
  guarded(op, [&] {
    mxmoe::reference_experts(
        layer, x.data_ptr<float>(), static_cast<int>(T), ids.data_ptr<int32_t>(),
        w.data_ptr<float>(), static_cast<int>(ids.size(1)), mode, situ,
        mxmoe::ExpertRange{static_cast<int>(expert_start), static_cast<int>(expert_count)},
        out.data_ptr<float>());
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> reference_route(const at::Tensor& logits,
                                                   const c10::optional<at::Tensor>& bias,
                                                   int64_t top_k, bool renormalize,
                                                   double scaling) {
  const char* op = "reference_route";
  check_cpu(logits, op, "router_logits");
  check_dtype(logits, at::kFloat, op, "router_logits");
  MXMOE_CHECK(logits.dim() == 2, op, "router_logits must be [T, experts], got ", shape_str(logits));
  const int64_t T = logits.size(0), E = logits.size(1);
  MXMOE_CHECK(top_k >= 1 && top_k <= E, op, "top_k = ", top_k, " must be in 1..", E);
  at::Tensor keep_bias;
  const float* b = per_expert_array(bias, E, false, op, "correction_bias", &keep_bias);
  const at::Tensor l = logits.contiguous();
  at::Tensor ids = at::empty({T, top_k}, logits.options().dtype(at::kInt));
  at::Tensor w = at::empty({T, top_k}, logits.options().dtype(at::kFloat));
  mxmoe::RoutingConfig rc;
  rc.num_experts = static_cast<int>(E);
  rc.top_k = static_cast<int>(top_k);
  rc.renormalize = renormalize;
  rc.scaling_factor = static_cast<float>(scaling);
  guarded(op, [&] {
    mxmoe::route_kimi(l.data_ptr<float>(), b, static_cast<int>(T), rc, ids.data_ptr<int32_t>(),
                      w.data_ptr<float>());
  });
  return {ids, w};
}

at::Tensor reference_block(
    const at::Tensor& hidden, const at::Tensor& router_weight,
    const c10::optional<at::Tensor>& router_bias, const at::Tensor& latent_down,
    const c10::optional<at::Tensor>& latent_norm, const at::Tensor& latent_up,
    const c10::optional<at::Tensor>& shared_gate, const c10::optional<at::Tensor>& shared_up,
    const c10::optional<at::Tensor>& shared_down, const at::Tensor& w1p, const at::Tensor& w1s,
    const at::Tensor& w3p, const at::Tensor& w3s, const at::Tensor& w2p, const at::Tensor& w2s,
    int64_t top_k, bool renormalize, double scaling, double eps, c10::string_view act, double beta,
    double linear_beta, const c10::optional<at::Tensor>& per_beta,
    const c10::optional<at::Tensor>& per_lbeta) {
  const char* op = "reference_block";
  check_cpu(hidden, op, "hidden");
  check_dtype(hidden, at::kBFloat16, op, "hidden");
  check_rows_dense(hidden, op, "hidden");
  const StackedExperts ex = stacked_experts(w1p, w1s, w3p, w3s, w2p, w2s, op);
  const int64_t T = hidden.size(0), D = hidden.size(1), L = ex.hidden, E = ex.num_experts;
  MXMOE_CHECK(top_k >= 1 && top_k <= E, op, "top_k = ", top_k, " must be in 1..", E);
  mxmoe::MoeLayer layer = layer_from_stacked(ex);
  mxmoe::ModelConfig& cfg = layer.cfg;
  cfg.hidden_size = static_cast<int>(D);
  cfg.num_experts_per_token = static_cast<int>(top_k);
  cfg.moe_renormalize = renormalize;
  cfg.routed_scaling_factor = scaling;
  cfg.rms_norm_eps = eps;
  // The shared experts use the scalar betas (the config's); per-expert ones are routed-only.
  cfg.activation_situ_beta = beta;
  cfg.activation_situ_linear_beta = linear_beta;
  layer.has_block = true;

  at::Tensor k_router, k_down, k_up, k_norm, k_sg, k_su, k_sd, k_bias, k_b, k_lb;
  layer.router = bf16_view(router_weight, E, D, op, "router_weight", &k_router);
  layer.router_bias = per_expert_array(router_bias, E, false, op, "router_bias", &k_bias);
  layer.latent_down = bf16_view(latent_down, L, D, op, "latent_down", &k_down);
  layer.latent_up = bf16_view(latent_up, D, L, op, "latent_up", &k_up);
  cfg.latent_moe_use_norm = latent_norm.has_value();
  if (latent_norm.has_value()) {
    check_cpu(*latent_norm, op, "latent_norm");
    check_dtype(*latent_norm, at::kBFloat16, op, "latent_norm");
    check_shape(*latent_norm, {L}, op, "latent_norm");
    k_norm = latent_norm->contiguous();
    layer.latent_norm = reinterpret_cast<const uint16_t*>(k_norm.data_ptr<at::BFloat16>());
  }
  const int n_shared = shared_gate.has_value() + shared_up.has_value() + shared_down.has_value();
  MXMOE_CHECK(n_shared == 0 || n_shared == 3, op,
              "give all three shared_{gate,up,down} tensors or none");
  cfg.num_shared_experts = 0;
  if (n_shared == 3) {
    const int64_t Is = shared_gate->dim() == 2 ? shared_gate->size(0) : -1;
    const int64_t I = ex.intermediate;
    // reference.h sizes the shared MLP as num_shared_experts * moe_intermediate_size.
    MXMOE_CHECK(Is > 0 && Is % I == 0, op, "shared_gate is ", shape_str(*shared_gate),
                "; its rows must be a multiple of the routed intermediate size ", I);
    cfg.num_shared_experts = static_cast<int>(Is / I);
    layer.shared_gate = bf16_view(*shared_gate, Is, D, op, "shared_gate", &k_sg);
    layer.shared_up = bf16_view(*shared_up, Is, D, op, "shared_up", &k_su);
    layer.shared_down = bf16_view(*shared_down, D, Is, op, "shared_down", &k_sd);
  }
  const mxmoe::ActMode mode = act_mode(act, op);
  mxmoe::SituParams situ;
  situ.beta = static_cast<float>(beta);
  situ.linear_beta = static_cast<float>(linear_beta);
  situ.per_expert_beta = per_expert_array(per_beta, E, false, op, "per_expert_beta", &k_b);
  situ.per_expert_linear_beta =
      per_expert_array(per_lbeta, E, false, op, "per_expert_linear_beta", &k_lb);
  const at::Tensor x = hidden.contiguous();
  at::Tensor out = at::zeros({T, D}, hidden.options().dtype(at::kFloat));
  guarded(op, [&] {
    mxmoe::reference_block(layer, reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>()),
                           static_cast<int>(T), mode, situ, out.data_ptr<float>());
  });
  return out;
}

}  // namespace
}  // namespace mxmoe_torch

TORCH_LIBRARY_IMPL(mxmoe, CPU, m) {
  m.impl("reference_experts", &mxmoe_torch::reference_experts);
  m.impl("reference_route", &mxmoe_torch::reference_route);
  m.impl("reference_block", &mxmoe_torch::reference_block);
}
