// tools/mxmoe/device_cuda.cpp: the CLI's CUDA path (device_run.h) over the public GPU API
// (mxmoe/moe.h): upload the request, prepare the owned experts, run_moe, copy the output back.
//
// Scope experts only. Scope block (router, latent projections, RMSNorm, shared experts on the GPU)
// is not implemented yet and says so; it never falls back to the CPU silently.
// The prepared weights of the last (layer, range) are kept for the next call, so `mxmoe check`
// runs both backends on one upload.
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "device_run.h"
#include "mxmoe/formats.h"
#include "mxmoe/moe.h"

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

}  // namespace

bool cuda_built() { return true; }

void run_on_cuda(const RunRequest& req, const std::string& backend_str, std::vector<float>* out) {
  Backend backend;
  if (!backend_from_name(backend_str, &backend))
    throw Error("--backend: unknown backend '" + backend_str + "' (w4a16 or w4a8)");
  if (req.scope == Scope::kBlock)
    throw Error("--device cuda --scope block is not implemented yet (the GPU path runs the routed "
                "experts only): use --scope experts, or --device cpu for the whole block");
  if (!req.layer) throw Error("--device cuda: no layer loaded");
  int n = 0;
  const cudaError_t ce = cudaGetDeviceCount(&n);
  if (ce != cudaSuccess || n == 0)
    throw Error(std::string("--device cuda: no CUDA GPU (") +
                (ce != cudaSuccess ? cudaGetErrorString(ce) : "no device visible") + ")");
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
  cuda_check(cudaMemcpy(dids.p, req.topk_ids.data(), req.topk_ids.size() * 4,
                        cudaMemcpyHostToDevice), "upload topk_ids");
  cuda_check(cudaMemcpy(dw.p, req.topk_weights.data(), req.topk_weights.size() * 4,
                        cudaMemcpyHostToDevice), "upload topk_weights");
  if (db.p)
    cuda_check(cudaMemcpy(db.p, req.situ.per_expert_beta, E * 4, cudaMemcpyHostToDevice),
               "upload per-expert beta");
  if (dlb.p)
    cuda_check(cudaMemcpy(dlb.p, req.situ.per_expert_linear_beta, E * 4,
                          cudaMemcpyHostToDevice), "upload per-expert linear_beta");

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
