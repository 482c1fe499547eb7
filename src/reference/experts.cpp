// experts.cpp: the routed experts of the CPU reference (reference.h: reference_experts and its
// pieces), the activation modes and the SiTU parameters.
//
// Algorithm: Q1 is applied once to every token row (it does not depend on the expert). Then, slot
// by slot (j = 0..k-1), the tokens whose slot j names an owned expert are grouped by expert; each
// group runs GEMM1 + SiTU, Q2, GEMM2, and out[t] += fp32(w[t, j] * y) for its tokens. Slot-major
// order keeps the documented fp32 sum order (slot 0 first) with only [T, H] of extra memory;
// each expert's rows are dequantized once per slot in which it appears.
// Limitations: host only; the layer's expert views must cover every id that is used.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mxmoe/formats.h"
#include "mxmoe/mx_quant.h"
#include "mxmoe/reference.h"

namespace mxmoe {

const char* act_mode_name(ActMode m) { return m == ActMode::kBf16 ? "bf16" : "mxfp8"; }

bool act_mode_from_name(const std::string& s, ActMode* out) {
  if (s == "bf16")
    *out = ActMode::kBf16;
  else if (s == "mxfp8")
    *out = ActMode::kMxfp8;
  else
    return false;
  return true;
}

SituParams situ_from_config(const ModelConfig& cfg) {
  SituParams p;
  p.beta = static_cast<float>(cfg.activation_situ_beta);
  p.linear_beta = static_cast<float>(cfg.activation_situ_linear_beta);
  return p;
}

void quantize_activations(const float* x, int T, int K, ActMode mode, float* xq) {
  const size_t n = static_cast<size_t>(T) * static_cast<size_t>(K);
  if (mode == ActMode::kBf16) {
    for (size_t i = 0; i < n; ++i) xq[i] = round_bf16(x[i]);
    return;
  }
  for (int t = 0; t < T; ++t) {
    try {
      fake_quantize_mxfp8_row(x + static_cast<size_t>(t) * K, K, xq + static_cast<size_t>(t) * K);
    } catch (const Error& e) {
      throw Error("activation row " + std::to_string(t) + ": " + e.what());
    }
  }
}

void reference_gemm1_situ(const ExpertView& ex, const float* xq, int T, float beta,
                          float linear_beta, float* h) {
  const int I = ex.w1.rows;
  if (ex.w3.rows != I || ex.w3.k != ex.w1.k)
    throw Error("reference_gemm1_situ: w1 and w3 shapes differ");
  std::vector<float> g(static_cast<size_t>(T) * I), u(static_cast<size_t>(T) * I);
  mx_matmul_nt(ex.w1, xq, T, g.data());
  mx_matmul_nt(ex.w3, xq, T, u.data());
  for (size_t i = 0; i < g.size(); ++i) h[i] = situ_glu(g[i], u[i], beta, linear_beta);
}

void reference_gemm2(const ExpertView& ex, const float* hq, int T, float* y) {
  mx_matmul_nt(ex.w2, hq, T, y);
}

namespace {

void check_expert_shapes(const ExpertView& ex, int e, int H, int I) {
  auto bad = [&](const char* name, const Mxfp4View& v, int rows, int k) {
    if (v.rows != rows || v.k != k || !v.packed || !v.scales)
      throw Error("reference_experts: expert " + std::to_string(e) + " " + name + " is [" +
                  std::to_string(v.rows) + ", " + std::to_string(v.k) + "], expected [" +
                  std::to_string(rows) + ", " + std::to_string(k) + "]");
  };
  bad("w1", ex.w1, I, H);
  bad("w3", ex.w3, I, H);
  bad("w2", ex.w2, H, I);
}

}  // namespace

void reference_experts(const MoeLayer& layer, const float* x, int T, const int32_t* ids,
                       const float* weights, int top_k, ActMode mode, const SituParams& situ,
                       const ExpertRange& range, float* out) {
  const ModelConfig& cfg = layer.cfg;
  const int E = cfg.num_experts, H = cfg.routed_expert_hidden_size, I = cfg.moe_intermediate_size;
  if (T < 0) throw Error("reference_experts: negative token count");
  if (top_k < 1) throw Error("reference_experts: top_k = " + std::to_string(top_k) + " < 1");
  if (static_cast<int>(layer.experts.size()) != E)
    throw Error("reference_experts: layer holds " + std::to_string(layer.experts.size()) +
                " experts, config says " + std::to_string(E));
  if (H % kMxBlock != 0 || I % kMxBlock != 0)
    throw Error("reference_experts: latent and intermediate widths must be multiples of 32");
  const int start = range.start;
  const int count = range.count < 0 ? E - start : range.count;
  if (start < 0 || start > E || range.count < -1 || start + count > E)
    throw Error("reference_experts: expert range [" + std::to_string(start) + ", +" +
                std::to_string(range.count) + ") outside [0, " + std::to_string(E) + ")");
  const size_t pairs = static_cast<size_t>(T) * top_k;
  for (size_t p = 0; p < pairs; ++p)
    if (ids[p] < -1 || ids[p] >= E)
      throw Error("reference_experts: topk_ids[" + std::to_string(p / top_k) + ", " +
                  std::to_string(p % top_k) + "] = " + std::to_string(ids[p]) +
                  " is not an expert id (0.." + std::to_string(E - 1) + " or -1)");
  auto owned = [&](int32_t id) { return id >= start && id < start + count; };
  for (size_t p = 0; p < pairs; ++p)
    if (owned(ids[p])) check_expert_shapes(layer.experts[ids[p]], ids[p], H, I);

  std::fill(out, out + static_cast<size_t>(T) * H, 0.0f);  // +0: the sum's starting value
  if (T == 0) return;
  std::vector<float> xq(static_cast<size_t>(T) * H);
  quantize_activations(x, T, H, mode, xq.data());

  std::vector<std::vector<int>> tokens(static_cast<size_t>(E));
  std::vector<float> xg, h, y;
  for (int j = 0; j < top_k; ++j) {
    for (auto& v : tokens) v.clear();
    for (int t = 0; t < T; ++t) {
      const int32_t id = ids[static_cast<size_t>(t) * top_k + j];
      if (owned(id)) tokens[id].push_back(t);
    }
    for (int e = start; e < start + count; ++e) {
      const std::vector<int>& tk = tokens[e];
      const int n = static_cast<int>(tk.size());
      if (n == 0) continue;
      xg.resize(static_cast<size_t>(n) * H);
      for (int i = 0; i < n; ++i)
        std::copy_n(&xq[static_cast<size_t>(tk[i]) * H], H, &xg[static_cast<size_t>(i) * H]);
      const float beta = situ.per_expert_beta ? situ.per_expert_beta[e] : situ.beta;
      const float lbeta =
          situ.per_expert_linear_beta ? situ.per_expert_linear_beta[e] : situ.linear_beta;
      h.resize(static_cast<size_t>(n) * I);
      y.resize(static_cast<size_t>(n) * H);
      try {
        reference_gemm1_situ(layer.experts[e], xg.data(), n, beta, lbeta, h.data());
        quantize_activations(h.data(), n, I, mode, h.data());
        reference_gemm2(layer.experts[e], h.data(), n, y.data());
      } catch (const Error& err) {
        throw Error("reference_experts: expert " + std::to_string(e) + ": " + err.what());
      }
      for (int i = 0; i < n; ++i) {
        const int t = tk[i];
        const float w = weights[static_cast<size_t>(t) * top_k + j];
        float* o = out + static_cast<size_t>(t) * H;
        const float* yi = &y[static_cast<size_t>(i) * H];
        // Product rounded to fp32, then the sum rounded (no FMA: -ffp-contract=off).
        for (int c = 0; c < H; ++c) o[c] = o[c] + w * yi[c];
      }
    }
  }
}

}  // namespace mxmoe
