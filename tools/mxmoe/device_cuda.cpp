// tools/mxmoe/device_cuda.cpp: the CLI's CUDA path (device_run.h) over the public GPU API
// (mxmoe/moe.h): upload the request, prepare the owned experts, run_moe, copy the output back.
//
// Scope experts: run_moe on the request's latent rows and routing (one EP rank's experts).
// Scope block: the whole Kimi-K3 MoE block with the reference's rounding points (reference.h):
// router logits in fp64 (smxx/block_ops.cu) -> GPU routing inside run_moe; latent =
// BF16(x . down^T), y = normed . up^T and the shared SiTU-GLU MLP in cuBLAS BF16 GEMMs with fp32
// accumulation; RMSNorm, SiTU and the final add in small kernels. Every expert runs (an EP
// partial sum cannot pass through the RMSNorm), as in reference_block.
// The prepared weights of the last (layer, range) are kept for the next call, so `mxmoe check`
// runs both backends on one upload.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "device_run.h"
#include "io.h"
#include "mxmoe/formats.h"
#include "mxmoe/moe.h"
#include "smxx/block_ops.h"

namespace mxmoe::cli {
namespace {

void cuda_check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw Error("--device cuda: " + what + ": " + cudaGetErrorString(e));
}

// A device allocation freed on scope exit.
struct DevMem {
  void* p = nullptr;
  DevMem(size_t bytes, const char* what) {
    if (bytes) cuda_check(cudaMalloc(&p, bytes), std::string("cudaMalloc of ") + what);
  }
  ~DevMem() { cudaFree(p); }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
};

struct WeightsCache {
  const MoeLayer* layer = nullptr;
  int start = -1, count = -1;
  PreparedWeights* w = nullptr;
  ~WeightsCache() { destroy_weights(w); }
};
WeightsCache& cache() {
  static WeightsCache c;
  return c;
}

const PreparedWeights* prepared_for(const MoeLayer& layer, int start, int count) {
  WeightsCache& c = cache();
  if (c.w && c.layer == &layer && c.start == start && c.count == count) return c.w;
  destroy_weights(c.w);
  c.w = nullptr;
  PrepareOptions o;
  o.expert_start = start;
  o.expert_count = count;
  const Status s = prepare_weights(layer, o, &c.w);
  if (!s.ok()) throw Error("--device cuda: " + s.message());
  c.layer = &layer;
  c.start = start;
  c.count = count;
  return c.w;
}

void cublas_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("--device cuda: cuBLAS ") + what + " failed (status " +
                std::to_string(static_cast<int>(s)) + ")");
}

struct Cublas {
  cublasHandle_t h = nullptr;
  Cublas() { cublas_check(cublasCreate(&h), "create"); }
  ~Cublas() { cublasDestroy(h); }
};

// C[T, N] = A[T, K] . W[N, K]^T, all row-major; A, W BF16; C fp32 or BF16 (one rounding of the
// fp32 accumulator). Column-major view: C^T [N, T] = W [N, K] . A^T [K, T].
void gemm_nt(cublasHandle_t h, const void* a, const void* w, void* c, int T, int N, int K,
             bool c_bf16, const char* what) {
  const float one = 1.0f, zero = 0.0f;
  cublas_check(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &one, w, CUDA_R_16BF, K, a,
                            CUDA_R_16BF, K, &zero, c, c_bf16 ? CUDA_R_16BF : CUDA_R_32F, N,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               what);
}

template <typename T>
DevMem* upload(std::vector<std::unique_ptr<DevMem>>& keep, const T* src, size_t n,
               const char* what) {
  keep.push_back(std::make_unique<DevMem>(n * sizeof(T), what));
  if (n)
    cuda_check(cudaMemcpy(keep.back()->p, src, n * sizeof(T), cudaMemcpyHostToDevice),
               std::string("upload ") + what);
  return keep.back().get();
}

void require_bf16(const Bf16View& v, int rows, int cols, const char* name) {
  if (!v.data || v.rows != rows || v.cols != cols)
    throw Error(std::string("--device cuda --scope block: ") + name + " missing or not [" +
                std::to_string(rows) + ", " + std::to_string(cols) + "]");
}

void run_block(const RunRequest& req, Backend backend, std::vector<float>* out) {
  const MoeLayer& layer = *req.layer;
  const ModelConfig& cfg = layer.cfg;
  if (!layer.has_block)
    throw Error("--device cuda --scope block: layer loaded without block tensors");
  const int T = req.tokens, D = cfg.hidden_size, L = cfg.routed_expert_hidden_size;
  const int E = cfg.num_experts, k = cfg.num_experts_per_token, Is = cfg.shared_intermediate_size();
  require_bf16(layer.router, E, D, "gate.weight");
  require_bf16(layer.latent_down, L, D, "routed_expert_down_proj.weight");
  require_bf16(layer.latent_up, D, L, "routed_expert_up_proj.weight");
  if (cfg.latent_moe_use_norm && !layer.latent_norm)
    throw Error("--device cuda --scope block: routed_expert_norm.weight missing");
  if (Is > 0) {
    require_bf16(layer.shared_gate, Is, D, "shared_experts.gate_proj.weight");
    require_bf16(layer.shared_up, Is, D, "shared_experts.up_proj.weight");
    require_bf16(layer.shared_down, D, Is, "shared_experts.down_proj.weight");
  }
  if (static_cast<int64_t>(req.x.size()) != static_cast<int64_t>(T) * D)
    throw Error("--device cuda --scope block: hidden_states is not [tokens, hidden]");
  const PreparedWeights* w = prepared_for(layer, 0, E);
  out->assign(static_cast<size_t>(T) * D, 0.0f);
  if (T == 0) return;

  std::vector<std::unique_ptr<DevMem>> keep;
  const std::vector<uint16_t> xb = hidden_states_bf16(req);
  const size_t TD = static_cast<size_t>(T) * D, TL = static_cast<size_t>(T) * L;
  const size_t TI = static_cast<size_t>(T) * Is;
  void* dx = upload(keep, xb.data(), TD, "hidden_states")->p;
  void* dwg = upload(keep, layer.router.data, static_cast<size_t>(E) * D, "gate.weight")->p;
  void* dbias = layer.router_bias
                    ? upload(keep, layer.router_bias, static_cast<size_t>(E), "correction bias")->p
                    : nullptr;
  void* ddown = upload(keep, layer.latent_down.data, static_cast<size_t>(L) * D, "down_proj")->p;
  void* dup = upload(keep, layer.latent_up.data, static_cast<size_t>(D) * L, "up_proj")->p;
  void* dnorm = layer.latent_norm
                    ? upload(keep, layer.latent_norm, static_cast<size_t>(L), "norm")->p
                    : nullptr;
  DevMem logits(static_cast<size_t>(T) * E * 4, "logits"), latent(TL * 2, "latent");
  DevMem routed(TL * 4, "routed"), normed(TL * 2, "normed"), dout(TD * 4, "out");
  DevMem db(req.situ.per_expert_beta ? E * 4 : 0, "per-expert beta");
  DevMem dlb(req.situ.per_expert_linear_beta ? E * 4 : 0, "per-expert linear_beta");
  if (db.p)
    cuda_check(cudaMemcpy(db.p, req.situ.per_expert_beta, E * 4, cudaMemcpyHostToDevice), "beta");
  if (dlb.p)
    cuda_check(cudaMemcpy(dlb.p, req.situ.per_expert_linear_beta, E * 4, cudaMemcpyHostToDevice),
               "linear_beta");
  Cublas cb;
  cuda_check(smxx::launch_router_logits(static_cast<const uint16_t*>(dx),
                                        static_cast<const uint16_t*>(dwg), T, E, D,
                                        static_cast<float*>(logits.p), nullptr),
             "router_logits kernel");
  gemm_nt(cb.h, dx, ddown, latent.p, T, L, D, true, "latent down-projection");

  const size_t wsb = workspace_bytes(w, T, k);
  DevMem ws(wsb, "workspace");
  MoeRunParams p;
  p.num_tokens = T;
  p.top_k = k;
  p.backend = backend;
  p.hidden = latent.p;
  p.hidden_dtype = InputDType::kBf16;
  p.router_logits = static_cast<const float*>(logits.p);
  p.correction_bias = static_cast<const float*>(dbias);
  p.renormalize = cfg.moe_renormalize;
  p.routed_scaling_factor = static_cast<float>(cfg.routed_scaling_factor);
  p.beta = req.situ.beta;
  p.linear_beta = req.situ.linear_beta;
  p.per_expert_beta = static_cast<const float*>(db.p);
  p.per_expert_linear_beta = static_cast<const float*>(dlb.p);
  p.out = static_cast<float*>(routed.p);
  p.workspace = ws.p;
  p.workspace_size = wsb;
  p.max_tokens = T;
  const Status s = run_moe(w, p, nullptr);
  if (!s.ok()) throw Error("--device cuda: " + s.message());

  cuda_check(
      smxx::launch_rmsnorm_bf16(static_cast<const float*>(routed.p),
                                static_cast<const uint16_t*>(dnorm), T, L, cfg.rms_norm_eps,
                                cfg.latent_moe_use_norm, static_cast<uint16_t*>(normed.p), nullptr),
      "rmsnorm kernel");
  gemm_nt(cb.h, normed.p, dup, dout.p, T, D, L, false, "latent up-projection");
  if (Is > 0) {
    void* dsg = upload(keep, layer.shared_gate.data, static_cast<size_t>(Is) * D, "shared gate")->p;
    void* dsu = upload(keep, layer.shared_up.data, static_cast<size_t>(Is) * D, "shared up")->p;
    void* dsd = upload(keep, layer.shared_down.data, static_cast<size_t>(D) * Is, "shared down")->p;
    DevMem g(TI * 4, "shared g"), u(TI * 4, "shared u"), h(TI * 2, "shared h"),
        sh(TD * 4, "shared");
    gemm_nt(cb.h, dx, dsg, g.p, T, Is, D, false, "shared gate");
    gemm_nt(cb.h, dx, dsu, u.p, T, Is, D, false, "shared up");
    cuda_check(
        smxx::launch_situ_bf16(static_cast<const float*>(g.p), static_cast<const float*>(u.p), TI,
                               static_cast<float>(cfg.activation_situ_beta),
                               static_cast<float>(cfg.activation_situ_linear_beta),
                               static_cast<uint16_t*>(h.p), nullptr),
        "situ kernel");
    gemm_nt(cb.h, h.p, dsd, sh.p, T, D, Is, false, "shared down");
    cuda_check(
        smxx::launch_add(static_cast<float*>(dout.p), static_cast<const float*>(sh.p), TD, nullptr),
        "add kernel");
    cuda_check(cudaDeviceSynchronize(), "block (shared experts)");
  }
  cuda_check(cudaDeviceSynchronize(), "block");
  cuda_check(cudaMemcpy(out->data(), dout.p, TD * 4, cudaMemcpyDeviceToHost), "download out");
}

}  // namespace

bool cuda_built() { return true; }

void run_on_cuda(const RunRequest& req, const std::string& backend_str, std::vector<float>* out) {
  Backend backend;
  if (!backend_from_name(backend_str, &backend))
    throw Error("--backend: unknown backend '" + backend_str + "' (w4a16 or w4a8)");
  if (!req.layer) throw Error("--device cuda: no layer loaded");
  int n = 0;
  const cudaError_t ce = cudaGetDeviceCount(&n);
  if (ce != cudaSuccess || n == 0)
    throw Error(std::string("--device cuda: no CUDA GPU (") +
                (ce != cudaSuccess ? cudaGetErrorString(ce) : "no device visible") + ")");
  if (req.scope == Scope::kBlock) {
    run_block(req, backend, out);
    return;
  }
  const MoeLayer& layer = *req.layer;
  const int E = layer.cfg.num_experts, H = layer.cfg.routed_expert_hidden_size;
  const int T = req.tokens, k = req.top_k;
  const int start = req.range.start;
  const int count = req.range.count < 0 ? E - start : req.range.count;
  if (static_cast<int64_t>(req.x.size()) != static_cast<int64_t>(T) * H)
    throw Error("--device cuda: hidden_states is not [tokens, latent]");
  if (static_cast<int64_t>(req.topk_ids.size()) != static_cast<int64_t>(T) * k ||
      req.topk_weights.size() != req.topk_ids.size())
    throw Error("--device cuda: topk_ids / topk_weights are not [tokens, top_k]");
  const PreparedWeights* w = prepared_for(layer, start, count);
  out->assign(static_cast<size_t>(T) * H, 0.0f);
  if (T == 0) return;

  // The input goes up in its own dtype: BF16 bits exactly, or fp32.
  std::vector<uint16_t> xb;
  const void* xhost = req.x.data();
  size_t xbytes = req.x.size() * sizeof(float);
  if (req.x_is_bf16) {
    xb.resize(req.x.size());
    for (size_t i = 0; i < xb.size(); ++i) xb[i] = float_to_bf16(req.x[i]);  // exact: BF16 values
    xhost = xb.data();
    xbytes = xb.size() * 2;
  }
  DevMem dx(xbytes, "hidden_states"), dids(req.topk_ids.size() * 4, "topk_ids");
  DevMem dw(req.topk_weights.size() * 4, "topk_weights"), dout(out->size() * 4, "out");
  const size_t wsb = workspace_bytes(w, T, k);
  DevMem ws(wsb, "workspace");
  DevMem db(req.situ.per_expert_beta ? E * 4 : 0, "per-expert beta");
  DevMem dlb(req.situ.per_expert_linear_beta ? E * 4 : 0, "per-expert linear_beta");
  cuda_check(cudaMemcpy(dx.p, xhost, xbytes, cudaMemcpyHostToDevice), "upload hidden_states");
  cuda_check(
      cudaMemcpy(dids.p, req.topk_ids.data(), req.topk_ids.size() * 4, cudaMemcpyHostToDevice),
      "upload topk_ids");
  cuda_check(cudaMemcpy(dw.p, req.topk_weights.data(), req.topk_weights.size() * 4,
                        cudaMemcpyHostToDevice),
             "upload topk_weights");
  if (db.p)
    cuda_check(cudaMemcpy(db.p, req.situ.per_expert_beta, E * 4, cudaMemcpyHostToDevice),
               "upload per-expert beta");
  if (dlb.p)
    cuda_check(cudaMemcpy(dlb.p, req.situ.per_expert_linear_beta, E * 4, cudaMemcpyHostToDevice),
               "upload per-expert linear_beta");

  MoeRunParams p;
  p.num_tokens = T;
  p.top_k = k;
  p.backend = backend;
  p.hidden = dx.p;
  p.hidden_dtype = req.x_is_bf16 ? InputDType::kBf16 : InputDType::kF32;
  p.topk_ids = static_cast<const int32_t*>(dids.p);
  p.topk_weights = static_cast<const float*>(dw.p);
  p.beta = req.situ.beta;
  p.linear_beta = req.situ.linear_beta;
  p.per_expert_beta = static_cast<const float*>(db.p);
  p.per_expert_linear_beta = static_cast<const float*>(dlb.p);
  p.out = static_cast<float*>(dout.p);
  p.workspace = ws.p;
  p.workspace_size = wsb;
  p.max_tokens = T;
  const Status s = run_moe(w, p, nullptr);
  if (!s.ok()) throw Error("--device cuda: " + s.message());
  cuda_check(cudaDeviceSynchronize(), "run_moe");
  cuda_check(cudaMemcpy(out->data(), dout.p, out->size() * 4, cudaMemcpyDeviceToHost),
             "download out");
}

}  // namespace mxmoe::cli
