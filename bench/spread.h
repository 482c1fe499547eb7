// bench/spread.h: median, min and max of a sample, as the bench reports every timing
// (timing.cpp) and every clock window (clocks.cpp). Header-only and CUDA-free, so the CPU tests
// of either use it as it is.
#pragma once

#include <algorithm>
#include <vector>

namespace mxmoe::bench {

struct Spread {
  double median = 0, min = 0, max = 0;
};

// The median of an even count is the mean of the middle two; an empty sample gives zeros.
inline Spread spread_of(std::vector<double> v) {
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.min = v.front();
  s.max = v.back();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return s;
}

}  // namespace mxmoe::bench
