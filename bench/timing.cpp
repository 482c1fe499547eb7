// bench/timing.cpp: graph capture, L2 flushing and event timing (see timing.h).
#include "timing.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "replays.h"
#include "spread.h"

namespace mxmoe::bench {

TimingPolicy policy_for_tokens(int tokens, int reps_flag, double budget_s) {
  TimingPolicy p;
  p.budget_s = budget_s;
  if (tokens <= 64) {
    p.reps = 50;
    p.min_reps = 20;
  } else if (tokens <= 512) {
    p.reps = 30;
    p.min_reps = 10;
  } else {
    p.reps = 10;
    p.min_reps = 5;
  }
  if (reps_flag > 0) {
    p.reps = reps_flag;
    p.fixed = true;
  }
  return p;
}

L2Flusher::L2Flusher(int device) {
  int l2 = 0;
  BENCH_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  const size_t bytes = std::max<size_t>(size_t{2} * static_cast<size_t>(l2), size_t{64} << 20);
  buf_ = DevBuf(bytes, "the L2 flush buffer");
}

void L2Flusher::flush(cudaStream_t s) {
  // A new byte value each time, so no layer of the memory system can skip the write.
  BENCH_CUDA(cudaMemsetAsync(buf_.get(), static_cast<int>(++counter_ & 0xFF), buf_.bytes(), s));
}

Graph::Graph(const std::function<void(cudaStream_t)>& enqueue, cudaStream_t s) {
  // ThreadLocal: other host threads (none today) may still make unsafe calls while we capture.
  BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue(s);
  } catch (...) {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(s, &g);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    throw;
  }
  BENCH_CUDA(cudaStreamEndCapture(s, &graph_));
  const cudaError_t e = cudaGraphInstantiate(&exec_, graph_, 0);
  if (e != cudaSuccess) {
    cudaGraphDestroy(graph_);
    graph_ = nullptr;
    BENCH_CUDA(e);
  }
}

Graph::~Graph() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
}

void Graph::launch(cudaStream_t s) { BENCH_CUDA(cudaGraphLaunch(exec_, s)); }

Timing time_graph(Graph& g, cudaStream_t s, L2Flusher* flush, const TimingPolicy& policy) {
  for (int i = 0; i < policy.warmup; ++i) {
    if (flush) flush->flush(s);
    g.launch(s);
  }
  cudaEvent_t a = nullptr, b = nullptr;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  if (flush) flush->flush(s);
  BENCH_CUDA(cudaEventRecord(a, s));
  g.launch(s);
  BENCH_CUDA(cudaEventRecord(b, s));
  BENCH_CUDA(cudaStreamSynchronize(s));  // also surfaces faults of the warm-up replays here
  float probe_ms = 0;
  BENCH_CUDA(cudaEventElapsedTime(&probe_ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);

  const int n =
      replays_for(policy.reps, policy.min_reps, policy.fixed, policy.budget_s, probe_ms * 1e-3);

  std::vector<cudaEvent_t> ev(2 * static_cast<size_t>(n), nullptr);
  for (auto& e : ev) BENCH_CUDA(cudaEventCreate(&e));
  struct Cleanup {
    std::vector<cudaEvent_t>& ev;
    ~Cleanup() {
      for (auto e : ev)
        if (e) cudaEventDestroy(e);
    }
  } cleanup{ev};
  // The sampler covers the timed replays only: it starts before the first is enqueued and stops
  // once the last has finished, or when a failure in between unwinds (the next case starts a new
  // window).
  struct Window {
    ClockMonitor* m;
    ~Window() {
      if (m) m->stop();
    }
  } window{nullptr};
  if (policy.clocks) {
    policy.clocks->start();
    window.m = policy.clocks;
  }
  for (int i = 0; i < n; ++i) {
    if (flush) flush->flush(s);
    BENCH_CUDA(cudaEventRecord(ev[2 * i], s));
    g.launch(s);
    BENCH_CUDA(cudaEventRecord(ev[2 * i + 1], s));
  }
  BENCH_CUDA(cudaStreamSynchronize(s));
  ClockStats clocks;
  if (window.m) clocks = std::exchange(window.m, nullptr)->stop();
  std::vector<double> us(n);
  for (int i = 0; i < n; ++i) {
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    us[i] = 1e3 * ms;
  }
  const Spread sp = spread_of(std::move(us));
  Timing t;
  t.clocks = clocks;
  t.reps = n;
  t.min_us = sp.min;
  t.max_us = sp.max;
  t.median_us = sp.median;
  return t;
}

Timing time_graph(const std::function<void(cudaStream_t)>& enqueue, cudaStream_t s,
                  L2Flusher* flush, const TimingPolicy& policy) {
  Graph g(enqueue, s);
  return time_graph(g, s, flush, policy);
}

}  // namespace mxmoe::bench
