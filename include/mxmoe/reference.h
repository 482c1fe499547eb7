// mxmoe/reference.h: the CPU reference, the semantics every GPU kernel is held to.
//
// Numerical choices (docs/NUMERICS.md has the full list):
//  - every matrix product accumulates in fp64 from exact fp32 operands (dequantized MX values and
//    BF16 values are exact in fp32), then rounds once to fp32;
//  - activation mode kBf16 (W4A16): expert input rounded to BF16; SiTU output rounded to BF16;
//  - activation mode kMxfp8 (W4A8): expert input and SiTU output each quantized to MXFP8 (per 32
//    along K, the MX scale rule, RNE);
//  - SiTU-GLU in fp32 (formats.h: situ_glu) on the fp32 GEMM1 outputs;
//  - the routing-weighted sum runs over the k slots in order, in fp32, starting from +0: each
//    slot adds the fp32-rounded product weight * expert output (no fused multiply-add).
#pragma once

#include <cstdint>
#include <vector>

#include "mxmoe/moe_layer.h"

namespace mxmoe {

enum class ActMode { kBf16, kMxfp8 };
const char* act_mode_name(ActMode m);
bool act_mode_from_name(const std::string& s, ActMode* out);

// ---- routing ----
// Kimi routing on router logits [T, E]: s = sigmoid(logit); pick the top k of s + bias (ties to the
// lower expert id), in descending order; weight = s / sum(chosen s) (if renormalize) *
// scaling_factor. Writes ids [T, k] and weights [T, k].
struct RoutingConfig {
  int num_experts = 0;
  int top_k = 0;
  bool renormalize = true;
  float scaling_factor = 1.0f;
};
void route_kimi(const float* logits, const float* bias /*[E] or null*/, int T,
                const RoutingConfig& rc, int32_t* ids, float* weights);
// logits = x . Wg^T for BF16 x [T, hidden] (fp64 accumulation, rounded to fp32).
void router_logits(const MoeLayer& layer, const uint16_t* x_bf16, int T, float* logits);

// ---- routed experts ----
// Expert parallelism: this rank owns global experts [start, start + count). Pairs whose id is
// outside, or -1, contribute nothing. count = -1 means "all experts from start".
struct ExpertRange {
  int start = 0;
  int count = -1;
};
// SiTU parameters. per_expert_* (indexed by global expert id, num_experts long) override the
// scalars when non-null.
struct SituParams {
  float beta = 4.0f;
  float linear_beta = 25.0f;
  const float* per_expert_beta = nullptr;
  const float* per_expert_linear_beta = nullptr;
};
SituParams situ_from_config(const ModelConfig& cfg);

// out[T, H] = sum_j weights[t, j] * expert_{ids[t, j]}(x[t]) over owned experts, where
// expert_e(v) = W2_e . Q2(situ_glu(W1_e . Q1(v), W3_e . Q1(v))) and Q1/Q2 follow `mode`.
// x is fp32 [T, H] (BF16 inputs are converted exactly by the caller). Throws mxmoe::Error for
// ids >= num_experts, or bad shapes.
void reference_experts(const MoeLayer& layer, const float* x, int T, const int32_t* ids,
                       const float* weights, int top_k, ActMode mode, const SituParams& situ,
                       const ExpertRange& range, float* out);

// ---- the pieces, for GPU tests that compare kernel by kernel on the same quantized inputs ----
// Q1 / Q2 of `mode` on rows [T, K]: kBf16 rounds each value to BF16 (RNE); kMxfp8 fake-quantizes
// each row to MXFP8 (per 32 along K; K % 32 == 0). xq may alias x. Throws on NaN/Inf (kMxfp8).
void quantize_activations(const float* x, int T, int K, ActMode mode, float* xq);
// y[T, w.rows] = x[T, w.k] . dequant(w)^T: fp64 accumulation of exact fp32 products, one rounding
// to fp32. Throws on a NaN scale byte.
void mx_matmul_nt(const Mxfp4View& w, const float* x, int T, float* y);
// The same for a BF16 matrix [rows, cols]: y[T, rows] = x[T, cols] . w^T.
void bf16_matmul_nt(const Bf16View& w, const float* x, int T, float* y);
// GEMM1 + SiTU of one expert on already quantized inputs xq [T, H]: h[T, I] =
// situ_glu(W1 . xq, W3 . xq) in fp32, before Q2.
void reference_gemm1_situ(const ExpertView& ex, const float* xq, int T, float beta,
                          float linear_beta, float* h);
// GEMM2 of one expert on quantized hq [T, I]: y[T, H] = W2 . hq (fp32, unweighted).
void reference_gemm2(const ExpertView& ex, const float* hq, int T, float* y);

// ---- the whole Kimi-K3 MoE block on the full hidden state x (BF16 [T, hidden]) ----
// logits = x.Wg^T -> routing; latent = BF16(x.down^T); routed = reference_experts(latent);
// normed = BF16(RMSNorm(routed) * norm_weight); y = normed.up^T; shared = shared SiTU-GLU MLP
// on x (intermediate rounded to BF16; beta / linear_beta from layer.cfg, the per-expert values of
// `situ` apply to routed experts only); out = y + shared (fp32 [T, hidden]).
// Runs every routed expert: an EP rank's partial sum cannot go through the RMSNorm, so the EP
// range belongs to the experts scope only.
void reference_block(const MoeLayer& layer, const uint16_t* x_bf16, int T, ActMode mode,
                     const SituParams& situ, float* out);

}  // namespace mxmoe
