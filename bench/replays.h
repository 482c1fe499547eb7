// bench/replays.h: how many timed replays a case or ceiling gets (timing.h's rule), apart from
// CUDA so that the CPU tests check it (test_workload.cpp).
#pragma once

#include <algorithm>
#include <cmath>

namespace mxmoe::bench {

// At most this many replays, whatever a window asks (events are created per replay).
constexpr int kMaxReplays = 2000;

// `reps` wanted; unless `fixed` (--reps), shrunk so that reps x probe_s stays within budget_s
// (never below min_reps), then grown so that the timed window lasts at least min_window_s
// (--clocks on the ceilings: the power readings need a second; clocks.h). probe_s <= 0
// (not measured) keeps `reps`.
inline int replays_for(int reps, int min_reps, bool fixed, double budget_s, double min_window_s,
                       double probe_s) {
  if (fixed || !(probe_s > 0)) return reps;
  int n = reps;
  if (n * probe_s > budget_s) n = std::max(min_reps, static_cast<int>(budget_s / probe_s));
  if (n * probe_s < min_window_s)
    n = static_cast<int>(std::min<double>(kMaxReplays, std::ceil(min_window_s / probe_s)));
  return n;
}

}  // namespace mxmoe::bench
