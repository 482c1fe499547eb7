// bench/replays.h: how many timed replays a case or ceiling gets (timing.h's rule), apart from
// CUDA so that the CPU tests check it (test_workload.cpp).
#pragma once

#include <algorithm>

namespace mxmoe::bench {

// `reps` wanted; unless `fixed` (--reps), shrunk so that reps x probe_s stays within budget_s,
// never below min_reps. probe_s <= 0 (not measured) keeps `reps`. Nothing grows the count:
// --clocks must not change what is timed (ceilings.cpp).
inline int replays_for(int reps, int min_reps, bool fixed, double budget_s, double probe_s) {
  if (fixed || !(probe_s > 0)) return reps;
  if (reps * probe_s <= budget_s) return reps;
  return std::max(min_reps, static_cast<int>(budget_s / probe_s));
}

}  // namespace mxmoe::bench
