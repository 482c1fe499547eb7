// bench/workload.h: what one benchmark case runs on: the per-GPU expert layouts of Kimi-K3, the
// synthetic MXFP4 weights, and the routings (host side; uploaded by bench.cpp).
//
// Layouts (KIMI_K3.md, "Per-GPU expert shapes" and the peer table): this rank owns global experts
// [0, E_local) of 896, every token carries top_k = 16 global ids, of which exactly
// `local_per_token` are local (EP16: 1, TP8xEP4: 4, full: 16) and the rest are distinct foreign
// ids that run_moe filters out. Fixing the local count per token (instead of letting uniform ids
// hit a Binomial number of local experts) makes the per-rank pair count T * local_per_token, the
// peer table's definition ("one local expert per token" for EP16).
//
// Distributions of the local picks (distinct per token):
//   uniform: every local expert equally likely;
//   skewed:  each pick is one of kHotExperts local experts (a seeded random choice) with
//            probability kHotShare, else one of the others; repeats within a token are redrawn.
//            At EP16 80% of the tokens go to 8 of 56 experts; with 4 picks per token (TP8xEP4)
//            the redraws lower the hot share a little; with 16 (full) every token takes all 8 hot
//            experts and 8 cold ones, so the hot share is 50% there.
//
// Weights: random E2M1 bytes (every code, both signs) and UE8M0 scale bytes 119 +- 3 (the
// binade of QAT weights of magnitude ~2^-8; a 6-binade spread keeps every row inside the FP8 fold
// window). Host memory holds only kWeightPool distinct experts; the views of local expert i alias
// pool[i % kWeightPool], while prepare_weights uploads every expert to its own device memory, so
// the timed kernels read distinct bytes for every expert (values do not change the timing).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mxmoe/moe_layer.h"

namespace mxmoe::bench {

constexpr int kLatent = 3584;       // routed_expert_hidden_size (K of GEMM1, N of GEMM2)
constexpr int kExpertsTotal = 896;  // router width
constexpr int kTopK = 16;
constexpr int kHotExperts = 8;
constexpr double kHotShare = 0.8;
constexpr int kWeightPool = 4;

struct Layout {
  std::string name;     // "ep16", "tp8ep4", "full"
  int experts_local;    // E_local
  int intermediate;     // I
  int local_per_token;  // local ids among each token's top_k
};
Layout layout_by_name(const std::string& name);

// MXFP4 bytes of one expert (w1 + w3 + w2: packed + scales) = 3 * H * I * 17 / 32.
size_t expert_mxfp4_bytes(int intermediate);

// Host-side synthetic weights: kWeightPool distinct experts; views for E_local experts.
class WeightPool {
 public:
  WeightPool(int intermediate, uint64_t seed);
  // Views of local expert i (alias of pool expert i % kWeightPool).
  const Mxfp4View& w1(int i) const { return w1_[i % kWeightPool]; }
  const Mxfp4View& w3(int i) const { return w3_[i % kWeightPool]; }
  const Mxfp4View& w2(int i) const { return w2_[i % kWeightPool]; }
  int intermediate() const { return intermediate_; }

 private:
  int intermediate_;
  std::vector<std::vector<uint8_t>> bytes_;  // packed / scale arrays, 6 per pool expert
  Mxfp4View w1_[kWeightPool], w3_[kWeightPool], w2_[kWeightPool];
};

// One routing of T tokens, top_k = kTopK global ids per token.
struct Routing {
  int tokens = 0;
  std::vector<int32_t> ids;        // [T, 16], global ids, exactly local_per_token of them local
  std::vector<float> weights;      // [T, 16], positive, summing to 1 per token
  std::vector<float> logits;       // [T, 896]: the router's top-16 (sigmoid, no bias) are `ids`
  std::vector<int> expert_counts;  // [E_local] pairs per local expert
  int64_t pairs = 0;               // sum of expert_counts = T * local_per_token
  int distinct_experts = 0;        // local experts with >= 1 pair
};
Routing make_routing(const Layout& l, int tokens, bool skewed, uint64_t seed);

// The grouped baselines' problems: the per-expert loop lays the pairs out expert after expert
// (expert e's rows start at first_row[e]); the grouped forms run one group per distinct pair
// count > 0 (increasing), holding that count's experts in expert order.
struct CountGroups {
  struct Group {
    int count;                    // pairs of each expert of the group (rows of each problem)
    std::vector<size_t> experts;  // in expert order
  };
  std::vector<Group> groups;
  std::vector<size_t> first_row;    // [E_local]
  std::vector<int32_t> row_expert;  // [rows]: the expert each row belongs to
  size_t rows = 0;                  // sum of the counts
  size_t problems = 0;              // experts with count > 0
};
CountGroups group_by_count(const std::vector<int>& counts);

}  // namespace mxmoe::bench
