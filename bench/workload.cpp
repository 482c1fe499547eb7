// bench/workload.cpp: layouts, synthetic weights and routings (see workload.h).
#include "workload.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include "mxmoe/common.h"

namespace mxmoe::bench {

Layout layout_by_name(const std::string& name) {
  if (name == "ep16") return {"ep16", 56, 3072, 1};
  if (name == "tp8ep4") return {"tp8ep4", 224, 384, 4};
  if (name == "full") return {"full", 896, 3072, 16};
  throw Error("bench: unknown layout '" + name + "'");
}

size_t expert_mxfp4_bytes(int intermediate) {
  const size_t e = static_cast<size_t>(3) * kLatent * intermediate;  // elements of w1 + w3 + w2
  return e / 2 + e / 32;
}

namespace {

// SplitMix64: fast, seedable, good enough to make weight bytes look random.
struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

void fill_packed(std::vector<uint8_t>& v, SplitMix& r) {
  size_t i = 0;
  for (; i + 8 <= v.size(); i += 8) {
    const uint64_t x = r.next();
    for (int b = 0; b < 8; ++b) v[i + b] = static_cast<uint8_t>(x >> (8 * b));
  }
  for (; i < v.size(); ++i) v[i] = static_cast<uint8_t>(r.next());
}

void fill_scales(std::vector<uint8_t>& v, SplitMix& r) {
  for (auto& b : v) b = static_cast<uint8_t>(119 + static_cast<int>(r.next() % 7) - 3);
}

}  // namespace

WeightPool::WeightPool(int intermediate, uint64_t seed) : intermediate_(intermediate) {
  SplitMix r{seed * 0x100000001B3ull + 7};
  const int I = intermediate, H = kLatent;
  auto make = [&](int rows, int k, Mxfp4View* view) {
    bytes_.emplace_back(static_cast<size_t>(rows) * k / 2);
    fill_packed(bytes_.back(), r);
    const uint8_t* packed = bytes_.back().data();
    bytes_.emplace_back(static_cast<size_t>(rows) * k / 32);
    fill_scales(bytes_.back(), r);
    view->packed = packed;
    view->scales = bytes_.back().data();
    view->rows = rows;
    view->k = k;
  };
  bytes_.reserve(6 * kWeightPool);  // no reallocation: views point into the vectors' buffers
  for (int p = 0; p < kWeightPool; ++p) {
    make(I, H, &w1_[p]);
    make(I, H, &w3_[p]);
    make(H, I, &w2_[p]);
  }
}

Routing make_routing(const Layout& l, int tokens, bool skewed, uint64_t seed) {
  const int E = l.experts_local, L = l.local_per_token, k = kTopK;
  if (L > k || L > E || k - L > kExpertsTotal - E)
    throw Error("bench: layout " + l.name + " cannot place its ids");
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u01(0.0, 1.0);

  std::vector<int> perm(E);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const int hot = std::min(kHotExperts, E);
  auto draw_local = [&]() -> int {
    if (!skewed) return static_cast<int>(rng() % E);
    if (u01(rng) < kHotShare || hot == E) return perm[rng() % hot];
    return perm[hot + rng() % (E - hot)];
  };

  Routing r;
  r.tokens = tokens;
  r.ids.resize(static_cast<size_t>(tokens) * k);
  r.weights.resize(r.ids.size());
  r.logits.resize(static_cast<size_t>(tokens) * kExpertsTotal);
  r.expert_counts.assign(E, 0);
  std::vector<int32_t> row(k);
  for (int t = 0; t < tokens; ++t) {
    int n = 0;
    while (n < L) {  // distinct local picks (rejection: L is small next to E)
      const int e = draw_local();
      if (std::find(row.begin(), row.begin() + n, e) == row.begin() + n) row[n++] = e;
    }
    while (n < k) {  // distinct foreign ids: other ranks' experts, filtered out by run_moe
      const int e = E + static_cast<int>(rng() % (kExpertsTotal - E));
      if (std::find(row.begin() + L, row.begin() + n, e) == row.begin() + n) row[n++] = e;
    }
    for (int j = 0; j < L; ++j) ++r.expert_counts[row[j]];
    std::shuffle(row.begin(), row.end(), rng);  // local ids in any slot, as a router gives them

    float* lg = &r.logits[static_cast<size_t>(t) * kExpertsTotal];
    // Non-chosen logits in [-6, 2), chosen in [4, 5): sigmoid is monotonic and no bias is
    // passed, so the GPU router's top-16 are exactly `row` (same pairs in both router modes).
    for (int e = 0; e < kExpertsTotal; ++e) lg[e] = static_cast<float>(-6.0 + 8.0 * u01(rng));
    double sum = 0;
    for (int j = 0; j < k; ++j) {
      const double w = 0.1 + u01(rng);
      r.weights[static_cast<size_t>(t) * k + j] = static_cast<float>(w);
      sum += w;
      r.ids[static_cast<size_t>(t) * k + j] = row[j];
      lg[row[j]] = static_cast<float>(4.0 + u01(rng));
    }
    for (int j = 0; j < k; ++j)
      r.weights[static_cast<size_t>(t) * k + j] /= static_cast<float>(sum);
  }
  r.pairs = static_cast<int64_t>(tokens) * L;
  r.distinct_experts = static_cast<int>(
      std::count_if(r.expert_counts.begin(), r.expert_counts.end(), [](int c) { return c > 0; }));
  return r;
}

CountGroups group_by_count(const std::vector<int>& counts) {
  CountGroups g;
  std::map<int, size_t> group_of;  // count -> index in g.groups, filled in increasing order
  for (int c : counts) {
    if (c < 0) throw Error("bench: negative pair count");
    if (c > 0) group_of.emplace(c, 0);
  }
  for (auto& [c, i] : group_of) {
    i = g.groups.size();
    g.groups.push_back({c, {}});
  }
  g.first_row.resize(counts.size());
  for (size_t e = 0; e < counts.size(); ++e) {
    g.first_row[e] = g.rows;
    if (counts[e] == 0) continue;
    g.groups[group_of[counts[e]]].experts.push_back(e);
    g.row_expert.insert(g.row_expert.end(), counts[e], static_cast<int32_t>(e));
    g.rows += counts[e];
    ++g.problems;
  }
  return g;
}

}  // namespace mxmoe::bench
