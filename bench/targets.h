// bench/targets.h: issue 4's performance targets, read off one run's rows, so that the benchmark
// says itself which it meets (the targets are judged on an H200, as ratios to ceilings measured
// in the same run):
//   decode  every mxmoe row with T <= 64:            %copy >= 85;
//   prefill EP16 T = 16384, w4a16:                   %bf16 >= 75;
//           EP16 T = 16384, w4a8:                    %fp8 >= 70, and w4a16 median / w4a8 median
//                                                    >= 1.6 (same routing and router, same run).
// A row whose output check failed never meets a target. Baseline rows (cuBLAS) are not judged.
// Cases the run did not include are simply absent (no line, no verdict).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "report.h"

namespace mxmoe::bench {

constexpr int kDecodeMaxTokens = 64;
constexpr double kDecodeCopyPct = 85.0;
constexpr int kPrefillTokens = 16384;
constexpr double kPrefillW4a16Bf16Pct = 75.0;
constexpr double kPrefillW4a8Fp8Pct = 70.0;
constexpr double kPrefillW4a8Speedup = 1.6;

struct TargetCheck {
  std::string group;  // "decode", "prefill"
  std::string what;   // the case and the measure, e.g. "ep16/64/w4a16 %copy"
  double value = 0, bar = 0;
  bool met = false;
};

std::vector<TargetCheck> evaluate_targets(const Report& r);
// A few lines: per group the rows met, then the ones that are not with their values. Nothing
// when no row is judged.
void print_targets(const std::vector<TargetCheck>& checks, std::FILE* f);

}  // namespace mxmoe::bench
