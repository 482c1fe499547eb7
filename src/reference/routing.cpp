// routing.cpp: Kimi-K3 routing for the CPU reference (reference.h: route_kimi, router_logits).
//
// s = sigmoid(logit) in fp32 (formats.h situ_sigmoid, the function the GPU router uses too);
// selection key c = s + bias in fp32; the top k by (c descending, expert id ascending), so equal
// keys go to the lower id; weights use s alone: w = s / sum * scaling with sum over the chosen s in
// slot order in fp32 from +0 (or w = s * scaling without renormalization). NaN logits are bad
// input: they have no place in an order, and a silent pick would hide them.
// Limitations: host only; O(T * E log k).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mxmoe/formats.h"
#include "mxmoe/reference.h"

namespace mxmoe {

void route_kimi(const float* logits, const float* bias, int T, const RoutingConfig& rc,
                int32_t* ids, float* weights) {
  const int E = rc.num_experts, k = rc.top_k;
  if (E < 1 || k < 1 || k > E)
    throw Error("route_kimi: top_k = " + std::to_string(k) + " with " + std::to_string(E) +
                " experts");
  std::vector<float> s(static_cast<size_t>(E)), c(static_cast<size_t>(E));
  std::vector<int> order(static_cast<size_t>(E));
  for (int t = 0; t < T; ++t) {
    const float* row = logits + static_cast<size_t>(t) * E;
    for (int e = 0; e < E; ++e) {
      if (std::isnan(row[e]))
        throw Error("route_kimi: router logit [" + std::to_string(t) + ", " + std::to_string(e) +
                    "] is NaN");
      s[e] = situ_sigmoid(row[e]);
      c[e] = bias ? s[e] + bias[e] : s[e];
      if (std::isnan(c[e]))
        throw Error("route_kimi: e_score_correction_bias[" + std::to_string(e) + "] is NaN");
    }
    for (int e = 0; e < E; ++e) order[e] = e;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int a, int b) { return c[a] > c[b] || (c[a] == c[b] && a < b); });
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum = sum + s[order[j]];
    for (int j = 0; j < k; ++j) {
      const size_t i = static_cast<size_t>(t) * k + j;
      ids[i] = order[j];
      const float sj = s[order[j]];
      // All chosen s can underflow to 0 only for logits below about -88: weights are then 0.
      weights[i] = rc.renormalize ? (sum > 0.0f ? sj / sum * rc.scaling_factor : 0.0f)
                                  : sj * rc.scaling_factor;
    }
  }
}

void router_logits(const MoeLayer& layer, const uint16_t* x_bf16, int T, float* logits) {
  const int hidden = layer.cfg.hidden_size;
  if (!layer.router.data || layer.router.rows != layer.cfg.num_experts ||
      layer.router.cols != hidden)
    throw Error("router_logits: gate.weight missing or not [" +
                std::to_string(layer.cfg.num_experts) + ", " + std::to_string(hidden) + "]");
  std::vector<float> x(static_cast<size_t>(T) * hidden);
  for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_to_float(x_bf16[i]);
  bf16_matmul_nt(layer.router, x.data(), T, logits);
}

}  // namespace mxmoe
