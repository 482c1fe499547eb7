// bench/timing.h: how every number of `mxmoe bench` is timed.
//
// The work of one case is captured once into a CUDA graph (engines replay graphs; run_moe is
// capturable by contract), then: 2 warm-up replays, one probe replay, and N timed replays. Before
// every replay (timed or not) the L2 flusher writes a buffer of twice the L2 size, outside the
// timed window, so weights and activations come from HBM as they would in a model where other
// layers ran in between. Each timed replay sits between its own pair of CUDA events; the result is
// the median (and min / max) over the N replays.
//
// N: --reps if given; else 50 for T <= 64, 30 for T <= 512, 10 above, shrunk so that N x (probe
// time) stays within --budget seconds, but never below 20 (T <= 64), 10 (T <= 512) or 5. The
// ceilings take 20 (replays.h; the same with --clocks).
#pragma once

#include <cuda_runtime.h>

#include <functional>

#include "clocks.h"
#include "device_util.h"

namespace mxmoe::bench {

struct TimingPolicy {
  int reps = 10;     // wanted replays
  int min_reps = 5;  // floor when the budget shrinks them
  double budget_s = 4.0;
  int warmup = 2;
  bool fixed = false;  // --reps given: exactly `reps`
  // --clocks: sampled over the N timed replays (and their flushes) into Timing::clocks; null:
  // not sampled.
  ClockMonitor* clocks = nullptr;
};
TimingPolicy policy_for_tokens(int tokens, int reps_flag, double budget_s);

class L2Flusher {
 public:
  explicit L2Flusher(int device);  // 2 x L2 size, at least 64 MiB
  void flush(cudaStream_t s);
  size_t bytes() const { return buf_.bytes(); }

 private:
  DevBuf buf_;
  unsigned counter_ = 0;
};

struct Timing {
  double median_us = 0, min_us = 0, max_us = 0;
  int reps = 0;
  ClockStats clocks;  // samples 0: not sampled
};

// Captures enqueue(s) into a graph and times its replays as described above (flush may be null:
// the dense ceilings use operands far larger than L2). enqueue must only enqueue work on `s`; an
// exception from it ends the capture cleanly and propagates.
Timing time_graph(const std::function<void(cudaStream_t)>& enqueue, cudaStream_t s,
                  L2Flusher* flush, const TimingPolicy& policy);

// A captured graph, kept for extra replays (the verification replays the timed graph).
class Graph {
 public:
  Graph(const std::function<void(cudaStream_t)>& enqueue, cudaStream_t s);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void launch(cudaStream_t s);

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

Timing time_graph(Graph& g, cudaStream_t s, L2Flusher* flush, const TimingPolicy& policy);

}  // namespace mxmoe::bench
