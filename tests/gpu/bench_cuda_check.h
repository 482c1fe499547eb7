// tests/gpu/bench_cuda_check.h: CK(expr) for the standalone GPU microbenchmarks (not gtest
// programs): a failing CUDA call prints where and why, and the program exits 1. Also their
// timing loop with the L2 flushed before each replay (median_flushed_us).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

// The median time in us of `reps` calls of launch(stream), each after a memset of `flush_bytes`
// at `flush` (the L2 flush) and timed alone between two events; the first `warmup` are dropped.
template <class Launch>
double median_flushed_us(Launch&& launch, void* flush, size_t flush_bytes, cudaStream_t st,
                         int reps, int warmup) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> t;
  for (int rep = 0; rep < reps; ++rep) {
    CK(cudaMemsetAsync(flush, rep, flush_bytes, st));
    CK(cudaEventRecord(e0, st));
    launch(st);
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (rep >= warmup) t.push_back(ms);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2] * 1e3;
}
