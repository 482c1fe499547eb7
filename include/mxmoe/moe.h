// mxmoe/moe.h: the public GPU API of mxmoe: Kimi-K3's routed-expert MoE on Hopper (sm_90a).
//
// Torch-free, exception-free, in the FlashInfer / FlashAttention-3 spirit: plain structs of device
// pointers, strides and sizes, a caller's cudaStream_t, a returned mxmoe::Status.
//
//   PreparedWeights* w;  prepare_weights(layer, {start, count}, &w);     // once: upload + convert
//   size_t ws = workspace_bytes(w, max_tokens, top_k);                    // caller allocates it
//   run_moe(w, params, stream);                                           // per forward call
//   destroy_weights(w);
//
// run_moe allocates nothing, never synchronizes with the host and takes no host decision that
// depends on device data: every grid is sized from num_tokens * top_k, so the call can be
// captured in a CUDA graph and replayed with new inputs and new routings (same num_tokens).
//
// Semantics are those of the CPU reference (mxmoe/reference.h: reference_experts, route_kimi):
//  - backend kW4A16: the expert input is rounded to BF16, the SiTU output to BF16;
//  - backend kW4A8: each is quantized to MXFP8 (per 32 along K, the MX scale rule, RNE);
//  - out[t] = sum over the k slots, in order, of weight[t, j] * expert_{id[t, j]}(x[t]) in fp32,
//    over the experts this rank owns; other ids and -1 add nothing; bit-identical run to run.
//
// Limitations:
//  1. sm_90a only: any other compute capability gets "unsupported architecture" before a launch.
//  2. latent % 64 == 0 and intermediate % 64 == 0 (the GEMM tiles); top_k <= 64.
//  3. NaN / Inf in the hidden states propagate (a GPU call cannot throw); NaN scale bytes in the
//     weights are refused at prepare time.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "mxmoe/common.h"
#include "mxmoe/moe_layer.h"

namespace mxmoe {

enum class Backend { kW4A16, kW4A8 };
const char* backend_name(Backend b);  // "w4a16" / "w4a8"
bool backend_from_name(const std::string& s, Backend* out);

struct PrepareOptions {
  int expert_start = 0;   // this rank owns global experts [expert_start, expert_start + count)
  int expert_count = -1;  // -1: every expert from expert_start on
  Backend backend = Backend::kW4A8;  // the default backend of run_moe (both use the same weights)
  int device = -1;                   // CUDA device ordinal; -1: the current device
  // With backend kW4A8: also keep the weights folded exactly into E4M3 (one power-of-two exponent
  // per row) for the FP8-tensor-core prefill GEMMs, which run_moe then takes at large token
  // counts. Off by default: on the H200 the BF16-MMA kernels are faster at every measured size
  // (w4a8 end to end, EP16 T = 16384: 2795 us against 4035 with the FP8 path; bench/RESULTS.md,
  // third session), and the fold costs 3 x H x I bytes per expert on top of the MXFP4 copy
  // (33 MB per Kimi-K3 expert: 1.85 GB for an EP16 slice) plus a host fold at prepare time.
  // MXMOE_W4A8_FP8=on / off in the environment overrides this either way (A/B runs).
  bool fp8_prefill_weights = false;
};

struct PreparedWeights;  // opaque; lives on `device`

// Uploads the owned experts of `layer` once: w1/w3 fused (weight_layout.h), then prepacked into the
// kernels' order. Checks latent % 64, intermediate % 64, the expert range and every scale byte
// (255 = NaN is refused, naming the expert and tensor). Synchronous (host memcpy).
Status prepare_weights(const MoeLayer& layer, const PrepareOptions& opt, PreparedWeights** out);

// The same from raw host views, for engines without mxmoe's checkpoint loader: w1[i], w3[i],
// w2[i] are the views of local expert i (global id opt.expert_start + i), i < opt.expert_count
// (which must be >= 1 here); num_experts_total is the model's expert count (router width).
Status prepare_weights_raw(const Mxfp4View* w1, const Mxfp4View* w3, const Mxfp4View* w2,
                           int num_experts_total, const PrepareOptions& opt, PreparedWeights** out);

void destroy_weights(PreparedWeights* w);  // null is fine

// Shape facts of prepared weights (host-side, no sync).
struct PreparedInfo {
  int hidden = 0;        // latent width H (routed_expert_hidden_size)
  int intermediate = 0;  // I
  int num_experts_total = 0;
  int expert_start = 0, expert_count = 0;
  int device = 0;
  int cc_major = 0, cc_minor = 0;
  size_t weight_bytes = 0;      // the MXFP4 copy
  size_t fp8_weight_bytes = 0;  // the E4M3 fold (PrepareOptions::fp8_prefill_weights), 0 if none
};
PreparedInfo prepared_info(const PreparedWeights* w);

// Workspace for any call with num_tokens <= max_tokens and this top_k. 256-byte aligned pieces.
size_t workspace_bytes(const PreparedWeights* w, int max_tokens, int top_k);

enum class InputDType { kBf16, kF32 };

struct MoeRunParams {
  int num_tokens = 0;  // T; 0 is a no-op
  int top_k = 0;
  Backend backend = Backend::kW4A8;

  // Expert input x [T, H] (H = latent), row r at hidden + r * hidden_stride elements.
  const void* hidden = nullptr;
  InputDType hidden_dtype = InputDType::kBf16;
  int64_t hidden_stride = 0;  // elements; 0 means H (contiguous)

  // Routing, one of:
  //  (a) caller's choice: topk_ids int32 [T, k] (global ids, -1 = none) + topk_weights fp32 [T, k];
  const int32_t* topk_ids = nullptr;
  const float* topk_weights = nullptr;
  //  (b) router logits fp32 [T, E_total] (row stride logits_stride, 0 = E_total) and the
  //      correction bias fp32 [E_total] (may be null): Kimi sigmoid + bias top-k on the GPU.
  const float* router_logits = nullptr;
  int64_t logits_stride = 0;
  const float* correction_bias = nullptr;
  bool renormalize = true;
  float routed_scaling_factor = 1.0f;
  //  With (b), the chosen ids / weights may be copied out here (device [T, k]; null = not wanted).
  int32_t* routed_ids_out = nullptr;
  float* routed_weights_out = nullptr;

  // SiTU-GLU: scalars, or per-expert device arrays indexed by GLOBAL expert id (E_total long).
  float beta = 4.0f;
  float linear_beta = 25.0f;
  const float* per_expert_beta = nullptr;
  const float* per_expert_linear_beta = nullptr;

  // Output fp32 [T, H], row r at out + r * out_stride (0 = H). Every row is written.
  float* out = nullptr;
  int64_t out_stride = 0;

  // Workspace from workspace_bytes(w, max_tokens, top_k); device memory, 256-byte aligned.
  void* workspace = nullptr;
  size_t workspace_size = 0;
  int max_tokens = 0;  // what the workspace was sized for; num_tokens must not exceed it
};

// Enqueues the MoE on `stream` (which must belong to the weights' device). Returns a failed
// Status, having launched nothing, for bad parameters or an unsupported architecture; a launch
// error comes back naming the kernel.
Status run_moe(const PreparedWeights* w, const MoeRunParams& p, cudaStream_t stream);

}  // namespace mxmoe
