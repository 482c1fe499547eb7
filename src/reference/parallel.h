// src/reference/parallel.h: a minimal static-partition parallel_for for the CPU reference.
//
// [0, n) is cut into contiguous chunks, one per thread, so which thread computes which index never
// changes the arithmetic: results are bit-identical for any thread count. The thread count is
// hardware_concurrency, or MXMOE_REF_THREADS when set; small jobs run inline (spawning costs more
// than it saves). An exception in a worker is rethrown on the caller's thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace mxmoe::ref {

inline int reference_threads() {
  if (const char* env = std::getenv("MXMOE_REF_THREADS")) {
    const int n = std::atoi(env);
    if (n >= 1) return n;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

// f(begin, end) over chunks of [0, n). `work` estimates the total cost in multiply-adds.
template <class F>
void parallel_for(int n, int64_t work, F f) {
  int threads = std::min(reference_threads(), n);
  if (work < (int64_t{1} << 20)) threads = 1;
  if (threads <= 1) {
    if (n > 0) f(0, n);
    return;
  }
  std::exception_ptr err;
  std::mutex mu;
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    const int b = static_cast<int>(int64_t{n} * i / threads);
    const int e = static_cast<int>(int64_t{n} * (i + 1) / threads);
    pool.emplace_back([&, b, e] {
      try {
        f(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!err) err = std::current_exception();
      }
    });
  }
  for (auto& t : pool) t.join();
  if (err) std::rethrow_exception(err);
}

}  // namespace mxmoe::ref
