// bench/options.h: the flags of `mxmoe bench` and their parser.
//
// Lists are comma separated (`--tokens 1,64,4096`). `--quick` picks a small default matrix
// (EP16 and TP8xEP4, T = 1, 64, 4096, uniform routing, ids given, both backends) that any explicit
// list flag overrides. Bad flags throw mxmoe::cli::UsageError naming the flag.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mxmoe::bench {

struct BenchOptions {
  std::vector<std::string> layouts;  // "ep16", "tp8ep4", "full"
  std::vector<int> tokens;
  bool tokens_given = false;          // --tokens explicit: run full x T >= 8192 too
  std::vector<std::string> backends;  // "w4a16", "w4a8"
  std::vector<std::string> routing;   // distributions: "uniform", "skewed"
  std::vector<std::string> router;    // "ids" (caller's top-k) or "gpu" (router logits on GPU)
  bool quick = false;
  int reps = 0;                // 0: by token count (see timing.h)
  double case_budget_s = 2.0;  // cap on timed seconds per case (never below min reps)
  uint64_t seed = 1234;
  bool baselines = true;
  double baseline_cap_gb = 16.0;  // skip baselines whose BF16 weights exceed this
  bool verify = true;
  // false (--warm-l2): no L2 flush before the replays, so code and the small tensors stay cached
  // (weights larger than L2 still stream); shows what the flush itself costs a case.
  bool flush_l2 = true;
  // --clocks: sample the SM clock, power and throttle reasons (NVML) during every timed case and
  // ceiling (clocks.h); a machine without NVML gets a note and no clock column values.
  bool clocks = false;
  int device = 0;
  std::string csv, json;
  bool help = false;
};

// Parses argv[first..argc).
BenchOptions parse_options(int argc, char** argv, int first);
const char* usage_text();

}  // namespace mxmoe::bench
