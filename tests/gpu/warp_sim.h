// tests/gpu/warp_sim.h: runs a warp-level device routine on the CPU, one std::thread per lane,
// so CPU tests (label cpu) can check the routine's logic where no GPU is at hand. What it checks
// is the source's algorithm as written (its collectives, lane roles, shared scratch); not the
// device compiler, the hardware or timing.
//
// Include this before the device header: host compilers see `__device__` / `__forceinline__`
// as nothing (cuda_runtime.h), and the warp intrinsics such a routine calls are defined here as
// collectives over the 32 lane threads (each one two barriers: publish, then read). Only full
// warps (mask ~0u), one warp at a time (run_warp), and only the intrinsics below.
#pragma once

#include <cuda_runtime.h>  // uint2 / uint3, make_uint2

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace warp_sim {

class Warp {
 public:
  void sync() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t gen = gen_;
    if (++arrived_ == 32) {
      arrived_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return gen_ != gen; });
    }
  }
  // Every lane's v, after every lane has published its own.
  template <class T>
  void gather(int lane, T v, T (&all)[32]) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "a register value");
    std::memcpy(&slot_[lane], &v, sizeof(T));
    sync();
    for (int l = 0; l < 32; ++l) std::memcpy(&all[l], &slot_[l], sizeof(T));
    sync();  // nobody overwrites a slot before every lane has read it
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t gen_ = 0;
  uint64_t slot_[32] = {};
};

inline Warp*& current_warp() {
  static Warp* w = nullptr;
  return w;
}
inline int& lane_id() {
  thread_local int lane = 0;
  return lane;
}

template <class T>
T shfl(T v, int src_of_lane(int, int), int arg) {
  T all[32];
  const int lane = lane_id();
  current_warp()->gather(lane, v, all);
  const int src = src_of_lane(lane, arg);
  return src >= 0 && src < 32 ? all[src] : v;
}

// Runs body() on 32 threads as the lanes of one warp (threadIdx.x = lane).
template <class F>
void run_warp(F body);

}  // namespace warp_sim

inline thread_local uint3 threadIdx;

template <class F>
void warp_sim::run_warp(F body) {
  Warp warp;
  current_warp() = &warp;
  std::vector<std::thread> lanes;
  for (int l = 0; l < 32; ++l)
    lanes.emplace_back([&, l] {
      lane_id() = l;
      threadIdx = make_uint3(static_cast<unsigned>(l), 0u, 0u);
      body();
    });
  for (auto& t : lanes) t.join();
  current_warp() = nullptr;
}

// ---- the warp intrinsics (full mask only) ----
template <class T>
T __shfl_sync(unsigned, T v, int src, int = 32) {
  return warp_sim::shfl(v, [](int, int s) { return s & 31; }, src);
}
template <class T>
T __shfl_up_sync(unsigned, T v, unsigned d, int = 32) {
  return warp_sim::shfl(v, [](int lane, int dd) { return lane - dd; }, static_cast<int>(d));
}
template <class T>
T __shfl_xor_sync(unsigned, T v, int m, int = 32) {
  return warp_sim::shfl(v, [](int lane, int mm) { return lane ^ mm; }, m);
}
inline unsigned __ballot_sync(unsigned, int pred) {
  int all[32];
  warp_sim::current_warp()->gather(warp_sim::lane_id(), pred ? 1 : 0, all);
  unsigned bits = 0;
  for (int l = 0; l < 32; ++l) bits |= all[l] ? 1u << l : 0u;
  return bits;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline void __syncwarp(unsigned = ~0u) { warp_sim::current_warp()->sync(); }
template <class T, class Op>
T warp_sim_reduce(T v, Op op) {
  T all[32];
  warp_sim::current_warp()->gather(warp_sim::lane_id(), v, all);
  T r = all[0];
  for (int l = 1; l < 32; ++l) r = op(r, all[l]);
  return r;
}
inline unsigned __reduce_max_sync(unsigned, unsigned v) {
  return warp_sim_reduce(v, [](unsigned a, unsigned b) { return a > b ? a : b; });
}
inline int __reduce_max_sync(unsigned, int v) {
  return warp_sim_reduce(v, [](int a, int b) { return a > b ? a : b; });
}
inline unsigned __reduce_min_sync(unsigned, unsigned v) {
  return warp_sim_reduce(v, [](unsigned a, unsigned b) { return a < b ? a : b; });
}
inline int __reduce_min_sync(unsigned, int v) {
  return warp_sim_reduce(v, [](int a, int b) { return a < b ? a : b; });
}
inline unsigned __reduce_add_sync(unsigned, unsigned v) {
  return warp_sim_reduce(v, [](unsigned a, unsigned b) { return a + b; });
}
inline int __reduce_add_sync(unsigned, int v) {
  return warp_sim_reduce(v, [](int a, int b) { return a + b; });
}
inline int __ffs(int x) { return __builtin_ffs(x); }
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
