// src/cuda/runtime/direct_stores.h: when run_moe lets GEMM2 store single-pair tokens' out rows
// itself (smxx/gemm2_store.cuh) instead of leaving them to the combine. Host-only, from sizes
// alone, so a captured CUDA graph keeps its path.
#pragma once

namespace mxmoe::runtime {

// Below this expected share of single-pair tokens the direct stores are not used: at TP8 x EP4
// (5%) the grouping's and GEMM2's extra work cost ~1.5-2% end to end for nothing
// (bench/NOTES.md G round 5).
constexpr double kDirectMinSingleShare = 0.2;

// Expected share of tokens that own exactly one local pair when each token picks top_k distinct
// experts of total_experts uniformly and this rank holds local_experts of them (hypergeometric:
// k positions for the local pick, L / T for it, then the other k - 1 picks all non-local).
// EP16 of Kimi-K3: 0.38; TP8 x EP4: 0.05; a whole layer: 0.
inline double expected_single_pair_share(int local_experts, int total_experts, int top_k) {
  const int L = local_experts, T = total_experts, k = top_k;
  if (L <= 0 || T <= 0 || k <= 0 || k > T) return 0.0;
  double p = static_cast<double>(k) * L / T;
  for (int j = 1; j < k; ++j) p *= static_cast<double>(T - L - (j - 1)) / (T - j);
  return p < 0.0 ? 0.0 : p;
}

inline bool use_direct_gemm2_stores(int local_experts, int total_experts, int top_k) {
  return expected_single_pair_share(local_experts, total_experts, top_k) >= kDirectMinSingleShare;
}

}  // namespace mxmoe::runtime
