// bench/test_workload.cpp: CPU checks of the benchmark's inputs (no GPU, no GoogleTest so that it
// builds wherever bench/ does): routings have the promised structure (exactly L distinct local
// ids per token, distinct foreign ids, weights summing to 1, counts that match the ids, router
// logits whose top-16 are the ids), the skew concentrates load, the synthetic weights have the
// promised byte ranges, the per-expert byte count matches KIMI_K3.md's 17.55 MB, the grouped
// baselines' grouping by pair count, and the flag parser's defaults / overrides / refusals. Prints
// every failure; exit 1 if any.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "args.h"
#include "mxmoe/common.h"
#include "options.h"
#include "replays.h"
#include "test_check.h"
#include "workload.h"

using namespace mxmoe::bench;

namespace {

void check_routing(const Layout& l, int T, bool skewed) {
  const Routing r = make_routing(l, T, skewed, 42 + T);
  const char* d = skewed ? "skewed" : "uniform";
  CHECK(r.pairs == static_cast<int64_t>(T) * l.local_per_token, "%s T=%d %s", l.name.c_str(), T, d);
  std::vector<int> counts(l.experts_local, 0);
  for (int t = 0; t < T; ++t) {
    std::set<int> seen;
    int local = 0;
    double wsum = 0;
    for (int j = 0; j < kTopK; ++j) {
      const int id = r.ids[t * kTopK + j];
      const float w = r.weights[t * kTopK + j];
      CHECK(id >= 0 && id < kExpertsTotal, "id %d", id);
      CHECK(w > 0, "weight %g", w);
      wsum += w;
      seen.insert(id);
      if (id < l.experts_local) {
        ++local;
        ++counts[id];
      }
    }
    CHECK(static_cast<int>(seen.size()) == kTopK, "%s token %d has repeated ids", l.name.c_str(),
          t);
    CHECK(local == l.local_per_token, "%s token %d: %d local ids", l.name.c_str(), t, local);
    CHECK(std::fabs(wsum - 1.0) < 1e-5, "token %d weights sum to %g", t, wsum);
    // The GPU router's choice: the 16 largest logits (sigmoid is monotonic, no bias).
    std::vector<int> idx(kExpertsTotal);
    std::iota(idx.begin(), idx.end(), 0);
    const float* lg = &r.logits[static_cast<size_t>(t) * kExpertsTotal];
    std::partial_sort(idx.begin(), idx.begin() + kTopK, idx.end(),
                      [&](int a, int b) { return lg[a] > lg[b]; });
    const std::set<int> top(idx.begin(), idx.begin() + kTopK);
    CHECK(top == seen, "%s token %d: logits' top-16 differ from the ids", l.name.c_str(), t);
    CHECK(lg[idx[kTopK - 1]] > lg[idx[kTopK]], "token %d: tie at the top-16 boundary", t);
  }
  CHECK(counts == r.expert_counts, "%s T=%d %s: expert_counts differ from the ids", l.name.c_str(),
        T, d);
  const int distinct =
      static_cast<int>(std::count_if(counts.begin(), counts.end(), [](int c) { return c > 0; }));
  CHECK(distinct == r.distinct_experts, "distinct %d vs %d", distinct, r.distinct_experts);
}

// Share of pairs held by the 8 most loaded experts.
double top8_share(const Routing& r) {
  std::vector<int> c = r.expert_counts;
  std::sort(c.rbegin(), c.rend());
  return static_cast<double>(std::accumulate(c.begin(), c.begin() + 8, 0)) / r.pairs;
}

template <class F>
bool throws_usage(F f) {
  try {
    f();
  } catch (const mxmoe::cli::UsageError&) {
    return true;
  }
  return false;
}

BenchOptions parse(std::vector<std::string> args) {
  std::vector<char*> argv;
  static std::vector<std::string> keep;
  keep = args;
  keep.insert(keep.begin(), {"mxmoe", "bench"});
  for (auto& s : keep) argv.push_back(s.data());
  return parse_options(static_cast<int>(argv.size()), argv.data(), 2);
}

}  // namespace

// The replay count (replays.h): the budget shrinks it to its floor, nothing grows it, --reps
// fixes it, an unmeasured probe keeps it.
void check_replays() {
  CHECK(replays_for(50, 20, false, 0.1, 25e-6) == 50, "50 x 25 us fits 0.1 s");
  CHECK(replays_for(50, 20, false, 0.1, 4e-3) == 25, "0.1 s / 4 ms: %d",
        replays_for(50, 20, false, 0.1, 4e-3));
  CHECK(replays_for(50, 20, false, 0.1, 40e-3) == 20, "the floor, not 2");
  CHECK(replays_for(20, 10, false, 0.1, 1e-6) == 20, "a short probe does not grow the count");
  CHECK(replays_for(7, 5, true, 0.1, 1e-3) == 7, "--reps is exact");
  CHECK(replays_for(20, 10, false, 0.1, 0) == 20, "no probe: the wanted count");
}

// The grouped baselines' grouping: one group per distinct count > 0, increasing, experts in order;
// rows laid out expert after expert as the per-expert loop does.
void check_groups() {
  const CountGroups g = group_by_count({2, 0, 1, 2, 3, 0, 1});
  CHECK(g.groups.size() == 3, "%zu groups", g.groups.size());
  if (g.groups.size() == 3) {
    CHECK(g.groups[0].count == 1 && g.groups[0].experts == std::vector<size_t>({2, 6}), "count 1");
    CHECK(g.groups[1].count == 2 && g.groups[1].experts == std::vector<size_t>({0, 3}), "count 2");
    CHECK(g.groups[2].count == 3 && g.groups[2].experts == std::vector<size_t>({4}), "count 3");
  }
  CHECK(g.first_row == std::vector<size_t>({0, 2, 2, 3, 5, 8, 8}), "first rows");
  CHECK(g.row_expert == std::vector<int32_t>({0, 0, 2, 3, 3, 4, 4, 4, 6}), "row experts");
  CHECK(g.rows == 9 && g.problems == 5, "rows %zu problems %zu", g.rows, g.problems);
  const CountGroups none = group_by_count({0, 0});
  CHECK(none.groups.empty() && none.rows == 0 && none.problems == 0, "no pairs, no groups");
  bool threw = false;
  try {
    group_by_count({1, -1});
  } catch (const mxmoe::Error&) {
    threw = true;
  }
  CHECK(threw, "a negative count accepted");
  // A real routing: every local pair in exactly one problem row.
  const Routing r = make_routing(layout_by_name("tp8ep4"), 64, false, 11);
  const CountGroups t = group_by_count(r.expert_counts);
  size_t rows = 0;
  for (const auto& grp : t.groups) rows += grp.count * grp.experts.size();
  CHECK(rows == t.rows && static_cast<int64_t>(t.rows) == r.pairs, "rows %zu vs pairs %lld", rows,
        static_cast<long long>(r.pairs));
  CHECK(static_cast<int>(t.problems) == r.distinct_experts, "problems %zu", t.problems);
}

int main() {
  check_replays();
  check_groups();
  // KIMI_K3.md: one expert's weights are 17.55 MB (3 x 3072 x 3584 elements at 4.25 bits).
  CHECK(expert_mxfp4_bytes(3072) == 17547264u, "%zu", expert_mxfp4_bytes(3072));
  CHECK(expert_mxfp4_bytes(384) * 8 == expert_mxfp4_bytes(3072), "I=384 is 1/8 of I=3072");

  for (const char* name : {"ep16", "tp8ep4", "full"}) {
    const Layout l = layout_by_name(name);
    for (int T : {1, 7, 300})
      for (bool skewed : {false, true}) check_routing(l, T, skewed);
  }
  const Layout ep16 = layout_by_name("ep16");
  CHECK(ep16.experts_local == 56 && ep16.intermediate == 3072 && ep16.local_per_token == 1, "ep16");
  const Layout tp = layout_by_name("tp8ep4");
  CHECK(tp.experts_local == 224 && tp.intermediate == 384 && tp.local_per_token == 4, "tp8ep4");
  const double hot = top8_share(make_routing(ep16, 4096, true, 5));
  const double flat = top8_share(make_routing(ep16, 4096, false, 5));
  CHECK(hot > 0.75 && hot < 0.85, "skewed: top-8 share %.3f, expected ~0.8", hot);
  CHECK(flat < 0.25, "uniform: top-8 share %.3f, expected ~8/56", flat);
  // Same seed, same routing; another seed, another routing.
  CHECK(make_routing(tp, 64, false, 9).ids == make_routing(tp, 64, false, 9).ids, "determinism");
  CHECK(make_routing(tp, 64, false, 9).ids != make_routing(tp, 64, false, 10).ids, "seed ignored");

  const WeightPool pool(384, 3);
  int lo = 255, hi = 0;
  for (int p = 0; p < kWeightPool; ++p) {
    for (const mxmoe::Mxfp4View* v : {&pool.w1(p), &pool.w3(p), &pool.w2(p)})
      for (size_t i = 0; i < v->scale_bytes(); ++i) {
        lo = std::min(lo, static_cast<int>(v->scales[i]));
        hi = std::max(hi, static_cast<int>(v->scales[i]));
      }
  }
  CHECK(lo == 116 && hi == 122, "scale bytes span [%d, %d], expected [116, 122]", lo, hi);
  CHECK(pool.w1(0).rows == 384 && pool.w1(0).k == kLatent && pool.w2(1).rows == kLatent &&
            pool.w2(1).k == 384,
        "view shapes");
  CHECK(pool.w1(5).packed == pool.w1(1).packed, "expert 5 aliases pool expert 1");
  CHECK(pool.w1(0).packed != pool.w1(1).packed, "pool experts are distinct");
  std::set<uint8_t> nibbles;
  for (size_t i = 0; i < 4096; ++i) nibbles.insert(pool.w3(2).packed[i] & 15);
  CHECK(nibbles.size() == 16, "only %zu distinct E2M1 codes", nibbles.size());

  const BenchOptions def = parse({});
  CHECK(def.layouts.size() == 3 && def.tokens.size() == 7 && def.backends.size() == 2 &&
            def.routing.size() == 2 && def.router.size() == 2 && !def.tokens_given,
        "defaults");
  const BenchOptions q = parse({"--quick", "--tokens", "64,1,64", "--router=gpu"});
  CHECK(q.quick && q.layouts.size() == 2 && q.tokens == std::vector<int>({1, 64}) &&
            q.tokens_given && q.router == std::vector<std::string>({"gpu"}),
        "quick + overrides");
  CHECK(throws_usage([] { parse({"--layouts", "ep8"}); }), "unknown layout accepted");
  CHECK(throws_usage([] { parse({"--tokens", "0"}); }), "T=0 accepted");
  CHECK(throws_usage([] { parse({"--tokens", "1,,2"}); }), "empty list item accepted");
  CHECK(throws_usage([] { parse({"--csv"}); }), "missing value accepted");
  CHECK(throws_usage([] { parse({"--reps", "5", "--reps", "6"}); }), "repeated flag accepted");
  CHECK(throws_usage([] { parse({"--budget", "nan"}); }), "NaN budget accepted");
  CHECK(def.flush_l2 && !parse({"--warm-l2"}).flush_l2, "--warm-l2 turns the L2 flush off");
  CHECK(throws_usage([] { parse({"--warm-l2=1"}); }), "--warm-l2 takes no value");
  CHECK(!def.clocks && parse({"--clocks"}).clocks, "--clocks turns the clock sampler on");
  CHECK(throws_usage([] { parse({"--clocks=yes"}); }), "--clocks takes no value");

  return test::check_summary("bench workload / options checks passed");
}
