// python/csrc/cuda_ops.cpp: the GPU ops over mxmoe/moe.h (built only with CUDA).
//
//   prepare_weights: stacked MXFP4 tensors of this rank's experts (any device; read on the host
//     once) -> prepare_weights_raw -> an int handle in a process-wide registry.
//   moe_experts(_out) / moe_routed: checks (device, dtype, shape, row strides), a workspace
//     from torch's caching allocator on the current stream (legal inside CUDA graph capture:
//     the graph's private pool serves it), then run_moe on the current stream.
// No MoE logic here: semantics, the architecture gate and the per-call checks are run_moe's.
// Limitations: the workspace is sized for this call's T (max_tokens = T), so a captured graph
// replays with the same T, which is what CUDA graphs need anyway.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "checks.h"
#include "mxmoe/moe.h"

namespace mxmoe_torch {
namespace {

// One prepared layer slice. destroy_weights frees device memory; shared_ptr keeps it alive for a
// call that looked it up while another thread releases the handle.
struct Held {
  mxmoe::PreparedWeights* w = nullptr;
  ~Held() { mxmoe::destroy_weights(w); }
};

struct Registry {
  std::mutex mu;
  std::unordered_map<int64_t, std::shared_ptr<Held>> map;
  int64_t next = 1;
};
// Never destroyed: at process exit the CUDA context may already be gone, and freeing device
// memory then would fail; the driver reclaims it.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

std::shared_ptr<Held> lookup(int64_t handle, const char* op) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.map.find(handle);
  MXMOE_CHECK(it != r.map.end(), op, "weights handle ", handle,
              " is unknown or was released (prepare the weights with mxmoe::prepare_weights)");
  return it->second;
}

int64_t prepare_weights(const at::Tensor& w1p, const at::Tensor& w1s, const at::Tensor& w3p,
                        const at::Tensor& w3s, const at::Tensor& w2p, const at::Tensor& w2s,
                        int64_t num_experts_total, int64_t expert_start, int64_t device) {
  const char* op = "prepare_weights";
  const StackedExperts ex = stacked_experts(w1p, w1s, w3p, w3s, w2p, w2s, op);
  std::vector<mxmoe::Mxfp4View> v1, v3, v2;
  for (int e = 0; e < ex.num_experts; ++e) {
    v1.push_back(ex.w1.view(e));
    v3.push_back(ex.w3.view(e));
    v2.push_back(ex.w2.view(e));
  }
  mxmoe::PrepareOptions opt;
  opt.expert_start = static_cast<int>(expert_start);
  opt.expert_count = ex.num_experts;
  opt.device = static_cast<int>(device);
  auto held = std::make_shared<Held>();
  const mxmoe::Status s = mxmoe::prepare_weights_raw(
      v1.data(), v3.data(), v2.data(), static_cast<int>(num_experts_total), opt, &held->w);
  MXMOE_CHECK(s.ok(), op, s.message());
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const int64_t id = r.next++;
  r.map.emplace(id, std::move(held));
  return id;
}

void release_weights(int64_t handle) {
  Registry& r = registry();
  std::shared_ptr<Held> dead;  // destroyed after the lock is dropped
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.map.find(handle);
    MXMOE_CHECK(it != r.map.end(), "release_weights", "weights handle ", handle,
                " is unknown or was already released");
    dead = std::move(it->second);
    r.map.erase(it);
  }
}

// [hidden, intermediate, num_experts_total, expert_start, expert_count, device, cc_major,
//  cc_minor, weight_bytes]
std::vector<int64_t> weights_info(int64_t handle) {
  const mxmoe::PreparedInfo i = mxmoe::prepared_info(lookup(handle, "weights_info")->w);
  return {i.hidden,       i.intermediate, i.num_experts_total,
          i.expert_start, i.expert_count, i.device,
          i.cc_major,     i.cc_minor,     static_cast<int64_t>(i.weight_bytes)};
}

mxmoe::Backend backend(c10::string_view s, const char* op) {
  mxmoe::Backend b;
  const std::string name(s.data(), s.size());
  MXMOE_CHECK(mxmoe::backend_from_name(name, &b), op, "backend must be 'w4a16' or 'w4a8', got '",
              name, "'");
  return b;
}

void check_on(const at::Tensor& t, int device, const char* op, const char* name) {
  MXMOE_CHECK(t.device().is_cuda() && t.device().index() == device, op, name,
              " must be on cuda:", device, " (where the weights live), got ", t.device().str());
}

// Everything one run_moe call needs besides the routing; fills p and keeps tensors alive.
struct Call {
  std::shared_ptr<Held> held;
  mxmoe::PreparedInfo info;
  mxmoe::MoeRunParams p;
  at::Tensor keep_b, keep_lb, workspace;
};

Call begin_call(const char* op, const at::Tensor& hidden, int64_t handle, c10::string_view be,
                double beta, double linear_beta, const c10::optional<at::Tensor>& per_beta,
                const c10::optional<at::Tensor>& per_lbeta) {
  Call c;
  c.held = lookup(handle, op);
  c.info = mxmoe::prepared_info(c.held->w);
  check_on(hidden, c.info.device, op, "hidden");
  MXMOE_CHECK(hidden.scalar_type() == at::kBFloat16 || hidden.scalar_type() == at::kFloat, op,
              "hidden must be BFloat16 or Float, got ", c10::toString(hidden.scalar_type()));
  check_rows_dense(hidden, op, "hidden");
  MXMOE_CHECK(hidden.size(1) == c.info.hidden, op, "hidden is ", shape_str(hidden),
              " but the weights' latent width is ", c.info.hidden);
  MXMOE_CHECK(hidden.size(0) <= (int64_t{1} << 30), op, "too many tokens: ", hidden.size(0));
  c.p.num_tokens = static_cast<int>(hidden.size(0));
  c.p.backend = backend(be, op);
  c.p.hidden = hidden.data_ptr();
  c.p.hidden_dtype =
      hidden.scalar_type() == at::kFloat ? mxmoe::InputDType::kF32 : mxmoe::InputDType::kBf16;
  c.p.hidden_stride = hidden.size(0) > 1 ? hidden.stride(0) : hidden.size(1);
  c.p.beta = static_cast<float>(beta);
  c.p.linear_beta = static_cast<float>(linear_beta);
  const int64_t E = c.info.num_experts_total;
  c.p.per_expert_beta = per_expert_array(per_beta, E, true, op, "per_expert_beta", &c.keep_b);
  c.p.per_expert_linear_beta =
      per_expert_array(per_lbeta, E, true, op, "per_expert_linear_beta", &c.keep_lb);
  if (per_beta) check_on(*per_beta, c.info.device, op, "per_expert_beta");
  if (per_lbeta) check_on(*per_lbeta, c.info.device, op, "per_expert_linear_beta");
  return c;
}

void check_out(const at::Tensor& out, const at::Tensor& hidden, int device, const char* op) {
  check_on(out, device, op, "out");
  check_dtype(out, at::kFloat, op, "out");
  check_rows_dense(out, op, "out");
  check_shape(out, {hidden.size(0), hidden.size(1)}, op, "out");
}

void finish_call(Call& c, const at::Tensor& hidden, const at::Tensor& out, const char* op) {
  c.p.out = out.data_ptr<float>();
  c.p.out_stride = out.size(0) > 1 ? out.stride(0) : out.size(1);
  c.p.max_tokens = c.p.num_tokens;
  const size_t ws = mxmoe::workspace_bytes(c.held->w, c.p.max_tokens, c.p.top_k);
  // The caching allocator hands out blocks aligned to at least 512 bytes (run_moe needs 256).
  c.workspace =
      at::empty({static_cast<int64_t>(std::max<size_t>(ws, 1))}, hidden.options().dtype(at::kByte));
  c.p.workspace = c.workspace.data_ptr();
  c.p.workspace_size = ws;
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(c.info.device);
  const mxmoe::Status s = mxmoe::run_moe(c.held->w, c.p, stream.stream());
  MXMOE_CHECK(s.ok(), op, s.message());
}

void check_topk(const at::Tensor& ids, const at::Tensor& w, const at::Tensor& hidden, int device,
                const char* op) {
  check_on(ids, device, op, "topk_ids");
  check_on(w, device, op, "topk_weights");
  check_dtype(ids, at::kInt, op, "topk_ids");
  check_dtype(w, at::kFloat, op, "topk_weights");
  MXMOE_CHECK(ids.dim() == 2 && ids.size(0) == hidden.size(0) && ids.size(1) >= 1, op,
              "topk_ids must be [T = ", hidden.size(0), ", k >= 1], got ", shape_str(ids));
  check_shape(w, {hidden.size(0), ids.size(1)}, op, "topk_weights");
}

void experts_into(const char* op, const at::Tensor& hidden, const at::Tensor& topk_ids,
                  const at::Tensor& topk_weights, int64_t handle, c10::string_view be, double beta,
                  double linear_beta, const c10::optional<at::Tensor>& per_beta,
                  const c10::optional<at::Tensor>& per_lbeta, const at::Tensor& out) {
  const c10::cuda::CUDAGuard guard(hidden.device());
  Call c = begin_call(op, hidden, handle, be, beta, linear_beta, per_beta, per_lbeta);
  check_topk(topk_ids, topk_weights, hidden, c.info.device, op);
  check_out(out, hidden, c.info.device, op);
  // run_moe reads ids / weights as dense [T, k]; a strided view is copied (stream-ordered).
  const at::Tensor ids = topk_ids.contiguous(), w = topk_weights.contiguous();
  c.p.top_k = static_cast<int>(ids.size(1));
  c.p.topk_ids = ids.data_ptr<int32_t>();
  c.p.topk_weights = w.data_ptr<float>();
  finish_call(c, hidden, out, op);
}

at::Tensor moe_experts(const at::Tensor& hidden, const at::Tensor& topk_ids,
                       const at::Tensor& topk_weights, int64_t handle, c10::string_view be,
                       double beta, double linear_beta, const c10::optional<at::Tensor>& per_beta,
                       const c10::optional<at::Tensor>& per_lbeta) {
  MXMOE_CHECK(hidden.dim() == 2, "moe_experts", "hidden must be 2-D, got ", shape_str(hidden));
  at::Tensor out = at::empty({hidden.size(0), hidden.size(1)}, hidden.options().dtype(at::kFloat));
  experts_into("moe_experts", hidden, topk_ids, topk_weights, handle, be, beta, linear_beta,
               per_beta, per_lbeta, out);
  return out;
}

void moe_experts_out(const at::Tensor& hidden, const at::Tensor& topk_ids,
                     const at::Tensor& topk_weights, int64_t handle, c10::string_view be,
                     double beta, double linear_beta, const c10::optional<at::Tensor>& per_beta,
                     const c10::optional<at::Tensor>& per_lbeta, const at::Tensor& out) {
  experts_into("moe_experts_out", hidden, topk_ids, topk_weights, handle, be, beta, linear_beta,
               per_beta, per_lbeta, out);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> moe_routed(
    const at::Tensor& hidden, const at::Tensor& logits, const c10::optional<at::Tensor>& bias,
    int64_t handle, int64_t top_k, bool renormalize, double scaling, c10::string_view be,
    double beta, double linear_beta, const c10::optional<at::Tensor>& per_beta,
    const c10::optional<at::Tensor>& per_lbeta) {
  const char* op = "moe_routed";
  const c10::cuda::CUDAGuard guard(hidden.device());
  Call c = begin_call(op, hidden, handle, be, beta, linear_beta, per_beta, per_lbeta);
  const int64_t T = hidden.size(0), E = c.info.num_experts_total;
  check_on(logits, c.info.device, op, "router_logits");
  check_dtype(logits, at::kFloat, op, "router_logits");
  check_rows_dense(logits, op, "router_logits");
  check_shape(logits, {T, E}, op, "router_logits");
  at::Tensor keep_bias;
  if (bias) check_on(*bias, c.info.device, op, "correction_bias");
  c.p.correction_bias = per_expert_array(bias, E, true, op, "correction_bias", &keep_bias);
  MXMOE_CHECK(top_k >= 1 && top_k <= std::min<int64_t>(E, 64), op, "top_k = ", top_k,
              " must be in 1..", std::min<int64_t>(E, 64));
  c.p.top_k = static_cast<int>(top_k);
  c.p.router_logits = logits.data_ptr<float>();
  c.p.logits_stride = T > 1 ? logits.stride(0) : E;
  c.p.renormalize = renormalize;
  c.p.routed_scaling_factor = static_cast<float>(scaling);
  at::Tensor out = at::empty({T, hidden.size(1)}, hidden.options().dtype(at::kFloat));
  at::Tensor ids = at::empty({T, top_k}, hidden.options().dtype(at::kInt));
  at::Tensor w = at::empty({T, top_k}, hidden.options().dtype(at::kFloat));
  c.p.routed_ids_out = ids.data_ptr<int32_t>();
  c.p.routed_weights_out = w.data_ptr<float>();
  finish_call(c, hidden, out, op);
  return {out, ids, w};
}

}  // namespace
}  // namespace mxmoe_torch

// prepare / release / info take no CUDA tensor (or none at all): one kernel for every backend.
TORCH_LIBRARY_IMPL(mxmoe, CompositeExplicitAutograd, m) {
  m.impl("prepare_weights", &mxmoe_torch::prepare_weights);
  m.impl("release_weights", &mxmoe_torch::release_weights);
  m.impl("weights_info", &mxmoe_torch::weights_info);
}

TORCH_LIBRARY_IMPL(mxmoe, CUDA, m) {
  m.impl("moe_experts", &mxmoe_torch::moe_experts);
  m.impl("moe_experts_out", &mxmoe_torch::moe_experts_out);
  m.impl("moe_routed", &mxmoe_torch::moe_routed);
}
