// tests/gpu/cta_timeline_stats.h: the per-CTA timelines' records (src/cuda/smxx/cta_timeline.h)
// reduced to what the timeline tests print: for one kernel, the min / median / max over its
// stamped CTAs of each event, in us from a chosen origin.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "smxx/cta_timeline.h"

namespace mxmoe::test {

// One kernel's records: [CTA][kTlFields] words for ctas CTAs, from first_cta on.
struct KernelRecords {
  const char* name;
  const std::vector<uint64_t>* rec;
  int first_cta, ctas;
};

// The events printed, in the order they happen (data and math: where the kernel stamps them).
constexpr cta_timeline::TimelineEvent kTimelineEvents[] = {
    cta_timeline::kTlStart, cta_timeline::kTlWaited, cta_timeline::kTlData, cta_timeline::kTlMath,
    cta_timeline::kTlExit};
constexpr const char* kTimelineEventNames[] = {"entry", "waited", "data", "math", "exit"};
constexpr int kNumTimelineEvents = 5;

// min / median / max over one kernel's stamped CTAs (kTlStart set) of each event, in us from t0
// (-1: no CTA stamped it).
struct KernelSpan {
  int ctas = 0;
  double v[kNumTimelineEvents][3];
};
inline KernelSpan span_of(const KernelRecords& k, uint64_t t0) {
  using namespace cta_timeline;
  KernelSpan s;
  std::vector<double> f[kNumTimelineEvents];
  for (int c = k.first_cta; c < k.first_cta + k.ctas; ++c) {
    const uint64_t* r = &(*k.rec)[static_cast<size_t>(c) * kTlFields];
    if (r[kTlStart] == 0) continue;
    ++s.ctas;
    for (int e = 0; e < kNumTimelineEvents; ++e) {
      const uint64_t t = r[kTimelineEvents[e]];
      if (t != 0) f[e].push_back((static_cast<double>(t) - static_cast<double>(t0)) * 1e-3);
    }
  }
  for (int e = 0; e < kNumTimelineEvents; ++e) {
    std::sort(f[e].begin(), f[e].end());
    s.v[e][0] = f[e].empty() ? -1 : f[e].front();
    s.v[e][1] = f[e].empty() ? -1 : f[e][f[e].size() / 2];
    s.v[e][2] = f[e].empty() ? -1 : f[e].back();
  }
  return s;
}

}  // namespace mxmoe::test
