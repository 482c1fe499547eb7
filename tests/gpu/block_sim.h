// tests/gpu/block_sim.h: runs a device routine of one thread block (whole warps) on the CPU, one
// std::thread per CUDA thread, so CPU tests (label cpu) can check the routine's logic where no
// GPU is at hand. What it checks is the source's algorithm as written (its collectives, lane and
// warp roles, barriers, shared scratch); not the device compiler, the hardware or timing.
//
// Include this before the device header: host compilers see `__device__` / `__forceinline__`
// as nothing (cuda_runtime.h), and the intrinsics such a routine calls are defined here: the warp
// ones as collectives over the warp's 32 threads (each one two barriers: publish, then read),
// __syncthreads as a barrier of the block (__syncthreads_or with a vote), the atomics as host
// atomics. Full warps only (mask ~0u), one block at a time (run_block), and only the intrinsics
// below. Shared memory is whatever the test passes the routine (host arrays).
#pragma once

#include <cuda_runtime.h>  // uint2 / uint3, make_uint2

#ifndef __noinline__  // an nvcc keyword; inlining does not matter here
#define __noinline__
#endif

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace block_sim {

// A reusable barrier of n threads.
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void sync() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t gen = gen_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return gen_ != gen; });
    }
  }

 private:
  const int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t gen_ = 0;
};

class Warp {
 public:
  void sync() { barrier_.sync(); }
  // Every lane's v, after every lane has published its own.
  template <class T>
  void gather(int lane, T v, T (&all)[32]) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "a register value");
    std::memcpy(&slot_[lane], &v, sizeof(T));
    barrier_.sync();
    for (int l = 0; l < 32; ++l) std::memcpy(&all[l], &slot_[l], sizeof(T));
    barrier_.sync();  // nobody overwrites a slot before every lane has read it
  }

 private:
  Barrier barrier_{32};
  uint64_t slot_[32] = {};
};

struct ThreadState {
  Warp* warp = nullptr;
  Barrier* block = nullptr;
  int* block_vote = nullptr;  // __syncthreads_or's accumulator, one per block
  int lane = 0;
};
inline ThreadState& self() {
  thread_local ThreadState s;
  return s;
}

template <class T>
T shfl(T v, int src_of_lane(int, int), int arg) {
  T all[32];
  const int lane = self().lane;
  self().warp->gather(lane, v, all);
  const int src = src_of_lane(lane, arg);
  return src >= 0 && src < 32 ? all[src] : v;
}

template <class T, class Op>
T reduce(T v, Op op) {
  T all[32];
  self().warp->gather(self().lane, v, all);
  T r = all[0];
  for (int l = 1; l < 32; ++l) r = op(r, all[l]);
  return r;
}

// Runs body() on `threads` threads (a multiple of 32) as one block: threadIdx.x = 0..threads-1,
// warps of 32 consecutive threads.
template <class F>
void run_block(int threads, F body);
// One warp: run_block(32, body).
template <class F>
void run_warp(F body) {
  run_block(32, body);
}

}  // namespace block_sim

inline thread_local uint3 threadIdx;

template <class F>
void block_sim::run_block(int threads, F body) {
  Barrier block(threads);
  int vote = 0;
  std::vector<std::unique_ptr<Warp>> warps;
  for (int w = 0; w < threads / 32; ++w) warps.push_back(std::make_unique<Warp>());
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      self() = ThreadState{warps[t / 32].get(), &block, &vote, t % 32};
      threadIdx = make_uint3(static_cast<unsigned>(t), 0u, 0u);
      body();
    });
  for (auto& t : pool) t.join();
}

// ---- the intrinsics (full warps only) ----
template <class T>
T __shfl_sync(unsigned, T v, int src, int = 32) {
  return block_sim::shfl(
      v, [](int, int s) { return s & 31; }, src);
}
template <class T>
T __shfl_up_sync(unsigned, T v, unsigned d, int = 32) {
  return block_sim::shfl(
      v, [](int lane, int dd) { return lane - dd; }, static_cast<int>(d));
}
template <class T>
T __shfl_xor_sync(unsigned, T v, int m, int = 32) {
  return block_sim::shfl(
      v, [](int lane, int mm) { return lane ^ mm; }, m);
}
inline unsigned __ballot_sync(unsigned, int pred) {
  int all[32];
  block_sim::self().warp->gather(block_sim::self().lane, pred ? 1 : 0, all);
  unsigned bits = 0;
  for (int l = 0; l < 32; ++l) bits |= all[l] ? 1u << l : 0u;
  return bits;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline void __syncwarp(unsigned = ~0u) { block_sim::self().warp->sync(); }
inline void __syncthreads() { block_sim::self().block->sync(); }
// Every thread ORs its predicate in, a barrier, every thread reads the result, a barrier, thread
// 0 clears it, and a third barrier keeps the next call's ORs behind the clear.
inline int __syncthreads_or(int pred) {
  block_sim::ThreadState& s = block_sim::self();
  if (pred) __atomic_fetch_or(s.block_vote, 1, __ATOMIC_SEQ_CST);
  s.block->sync();
  const int any = __atomic_load_n(s.block_vote, __ATOMIC_SEQ_CST);
  s.block->sync();
  if (threadIdx.x == 0) __atomic_store_n(s.block_vote, 0, __ATOMIC_SEQ_CST);
  s.block->sync();
  return any;
}
inline unsigned __reduce_max_sync(unsigned, unsigned v) {
  return block_sim::reduce(v, [](unsigned a, unsigned b) { return a > b ? a : b; });
}
inline int __reduce_max_sync(unsigned, int v) {
  return block_sim::reduce(v, [](int a, int b) { return a > b ? a : b; });
}
inline unsigned __reduce_min_sync(unsigned, unsigned v) {
  return block_sim::reduce(v, [](unsigned a, unsigned b) { return a < b ? a : b; });
}
inline int __reduce_min_sync(unsigned, int v) {
  return block_sim::reduce(v, [](int a, int b) { return a < b ? a : b; });
}
inline unsigned __reduce_add_sync(unsigned, unsigned v) {
  return block_sim::reduce(v, [](unsigned a, unsigned b) { return a + b; });
}
inline int __reduce_add_sync(unsigned, int v) {
  return block_sim::reduce(v, [](int a, int b) { return a + b; });
}
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline int atomicOr(int* p, int v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
inline int __ldcg(const int* p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
