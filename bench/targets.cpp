// bench/targets.cpp: issue 4's targets against a run's rows (see targets.h).
#include "targets.h"

namespace mxmoe::bench {
namespace {

bool is_mxmoe(const Row& w) { return w.backend == "w4a16" || w.backend == "w4a8"; }
bool check_ok(const Row& w) { return w.verify.rfind("FAIL", 0) != 0; }

// layout/T/backend, then the routing and router when they are not the table's usual ones.
std::string label(const Row& w) {
  std::string s = w.layout + "/" + std::to_string(w.tokens) + "/" + w.backend;
  if (w.routing != "uniform") s += "/" + w.routing;
  if (w.router != "ids") s += "/" + w.router;
  return s;
}

TargetCheck judge(const char* group, const Row& w, const char* measure, double value, double bar) {
  return {group, label(w) + " " + measure, value, bar, value >= bar && check_ok(w)};
}

}  // namespace

std::vector<TargetCheck> evaluate_targets(const Report& r) {
  std::vector<TargetCheck> out;
  for (const Row& w : r.rows) {
    if (!is_mxmoe(w)) continue;
    if (w.tokens <= kDecodeMaxTokens)
      out.push_back(judge("decode", w, "%copy", w.pct_copy, kDecodeCopyPct));
    if (w.layout != "ep16" || w.tokens != kPrefillTokens) continue;
    if (w.backend == "w4a16") {
      out.push_back(judge("prefill", w, "%bf16", w.pct_bf16, kPrefillW4a16Bf16Pct));
      continue;
    }
    out.push_back(judge("prefill", w, "%fp8", w.pct_fp8, kPrefillW4a8Fp8Pct));
    if (w.t.median_us <= 0) continue;  // no time: no speed-up to judge
    for (const Row& v : r.rows) {      // its w4a16 twin of the same run
      if (v.backend != "w4a16" || v.layout != w.layout || v.tokens != w.tokens ||
          v.routing != w.routing || v.router != w.router)
        continue;
      TargetCheck c =
          judge("prefill", w, "x w4a16", v.t.median_us / w.t.median_us, kPrefillW4a8Speedup);
      c.met = c.met && check_ok(v);
      out.push_back(c);
    }
  }
  return out;
}

void print_targets(const std::vector<TargetCheck>& checks, std::FILE* f) {
  if (checks.empty()) return;
  std::fprintf(f, "targets (issue 4; judged on an H200, ratios to this run's ceilings):\n");
  for (const char* group : {"decode", "prefill"}) {
    int n = 0, met = 0;
    std::string missed;
    for (const TargetCheck& c : checks) {
      if (c.group != group) continue;
      ++n;
      if (c.met) {
        ++met;
        continue;
      }
      char b[160];
      const bool ratio = c.bar < 10;  // a speed-up, else a percentage
      std::snprintf(b, sizeof b, ratio ? "%s%s %.2f (>= %.2f)" : "%s%s %.1f (>= %.0f)",
                    missed.empty() ? "" : ", ", c.what.c_str(), c.value, c.bar);
      missed += b;
    }
    if (n == 0) continue;
    std::fprintf(f, "  %-7s %d of %d met%s%s\n", group, met, n,
                 missed.empty() ? "" : "; not: ", missed.c_str());
  }
}

}  // namespace mxmoe::bench
