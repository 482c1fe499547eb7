// python/csrc/ops.cpp: the schemas of every mxmoe torch op (TORCH_LIBRARY(mxmoe, m)), and the
// CPU-side answers of the GPU ops (a one-line error instead of torch's "could not run ... with
// arguments from the 'CPU' backend" list).
//
// Ops (Python wrappers and fake impls: python/mxmoe/torch/ops.py):
//   prepare_weights  stacked MXFP4 tensors -> int handle of mxmoe::PreparedWeights (CUDA build)
//   release_weights / weights_info            the handle's lifetime and shape facts
//   moe_experts / moe_experts_out             routed experts on caller's top-k (CUDA)
//   moe_routed                                Kimi routing on the GPU + routed experts (CUDA)
//   reference_experts / reference_route / reference_block    the CPU reference (always built)
//   has_cuda                                  whether this build has the CUDA ops
//
// The weights travel as an int handle, not a custom class: ints pass through torch.compile,
// opcheck and CUDA graph capture without a fake class, and a released or unknown handle gives a
// clear error instead of a dangling pointer (ids are never reused).
#include <torch/library.h>

#include "checks.h"

namespace mxmoe_torch {
namespace {

bool has_cuda() {
#ifdef MXMOE_TORCH_WITH_CUDA
  return true;
#else
  return false;
#endif
}

[[noreturn]] void cpu_tensor_error(const char* op, const at::Tensor& hidden) {
  TORCH_CHECK(
      false, "mxmoe::", op, ": hidden is on ", hidden.device().str(),
      "; this op runs on CUDA tensors only (the CPU reference is mxmoe::reference_experts)");
}

at::Tensor moe_experts_cpu(const at::Tensor& hidden, const at::Tensor&, const at::Tensor&, int64_t,
                           c10::string_view, double, double, const c10::optional<at::Tensor>&,
                           const c10::optional<at::Tensor>&) {
  cpu_tensor_error("moe_experts", hidden);
}

void moe_experts_out_cpu(const at::Tensor& hidden, const at::Tensor&, const at::Tensor&, int64_t,
                         c10::string_view, double, double, const c10::optional<at::Tensor>&,
                         const c10::optional<at::Tensor>&, const at::Tensor&) {
  cpu_tensor_error("moe_experts_out", hidden);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> moe_routed_cpu(
    const at::Tensor& hidden, const at::Tensor&, const c10::optional<at::Tensor>&, int64_t, int64_t,
    bool, double, c10::string_view, double, double, const c10::optional<at::Tensor>&,
    const c10::optional<at::Tensor>&) {
  cpu_tensor_error("moe_routed", hidden);
}

#ifndef MXMOE_TORCH_WITH_CUDA
[[noreturn]] void no_cuda(const char* op) {
  TORCH_CHECK(false, "mxmoe::", op,
              ": this mxmoe build has no CUDA (built against a CPU torch or with "
              "MXMOE_TORCH_CUDA=0); only the CPU reference ops are available");
}
int64_t prepare_weights_nocuda(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                               const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                               int64_t, int64_t) {
  no_cuda("prepare_weights");
}
void release_weights_nocuda(int64_t) { no_cuda("release_weights"); }
std::vector<int64_t> weights_info_nocuda(int64_t) { no_cuda("weights_info"); }
#endif

}  // namespace
}  // namespace mxmoe_torch

TORCH_LIBRARY(mxmoe, m) {
  m.def("has_cuda() -> bool");
  m.def(
      "prepare_weights(Tensor w1_packed, Tensor w1_scale, Tensor w3_packed, Tensor w3_scale, "
      "Tensor w2_packed, Tensor w2_scale, int num_experts_total, int expert_start, int device) "
      "-> int");
  m.def("release_weights(int weights) -> ()");
  m.def("weights_info(int weights) -> int[]");
  m.def(
      "moe_experts(Tensor hidden, Tensor topk_ids, Tensor topk_weights, int weights, str backend, "
      "float beta, float linear_beta, Tensor? per_expert_beta, Tensor? per_expert_linear_beta) "
      "-> Tensor");
  m.def(
      "moe_experts_out(Tensor hidden, Tensor topk_ids, Tensor topk_weights, int weights, "
      "str backend, float beta, float linear_beta, Tensor? per_expert_beta, "
      "Tensor? per_expert_linear_beta, Tensor(a!) out) -> ()");
  m.def(
      "moe_routed(Tensor hidden, Tensor router_logits, Tensor? correction_bias, int weights, "
      "int top_k, bool renormalize, float routed_scaling_factor, str backend, float beta, "
      "float linear_beta, Tensor? per_expert_beta, Tensor? per_expert_linear_beta) "
      "-> (Tensor, Tensor, Tensor)");
  m.def(
      "reference_experts(Tensor hidden, Tensor topk_ids, Tensor topk_weights, Tensor w1_packed, "
      "Tensor w1_scale, Tensor w3_packed, Tensor w3_scale, Tensor w2_packed, Tensor w2_scale, "
      "int expert_start, int expert_count, str act, float beta, float linear_beta, "
      "Tensor? per_expert_beta, Tensor? per_expert_linear_beta) -> Tensor");
  m.def(
      "reference_route(Tensor router_logits, Tensor? correction_bias, int top_k, "
      "bool renormalize, float routed_scaling_factor) -> (Tensor, Tensor)");
  m.def(
      "reference_block(Tensor hidden, Tensor router_weight, Tensor? router_bias, "
      "Tensor latent_down, Tensor? latent_norm, Tensor latent_up, Tensor? shared_gate, "
      "Tensor? shared_up, Tensor? shared_down, Tensor w1_packed, Tensor w1_scale, "
      "Tensor w3_packed, Tensor w3_scale, Tensor w2_packed, Tensor w2_scale, int top_k, "
      "bool renormalize, float routed_scaling_factor, float rms_norm_eps, str act, float beta, "
      "float linear_beta, Tensor? per_expert_beta, Tensor? per_expert_linear_beta) -> Tensor");
}

TORCH_LIBRARY_IMPL(mxmoe, CompositeExplicitAutograd, m) {
  m.impl("has_cuda", &mxmoe_torch::has_cuda);
#ifndef MXMOE_TORCH_WITH_CUDA
  m.impl("prepare_weights", &mxmoe_torch::prepare_weights_nocuda);
  m.impl("release_weights", &mxmoe_torch::release_weights_nocuda);
  m.impl("weights_info", &mxmoe_torch::weights_info_nocuda);
#endif
}

TORCH_LIBRARY_IMPL(mxmoe, CPU, m) {
  m.impl("moe_experts", &mxmoe_torch::moe_experts_cpu);
  m.impl("moe_experts_out", &mxmoe_torch::moe_experts_out_cpu);
  m.impl("moe_routed", &mxmoe_torch::moe_routed_cpu);
}
