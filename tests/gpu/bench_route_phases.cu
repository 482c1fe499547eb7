// tests/gpu/bench_route_phases.cu: where does the GPU router's one-token latency go?
// (bench/NOTES.md G round 13.) RouteAlone measured ~8.5 us for one token at E = 896 against
// ~2 us for an empty graph node, flat in k; the prologue's CTA 0 runs the same routine
// (smxx/route_warp.cuh) on the decode critical path. This program runs one warp on one token,
// E = 896, k = 16, and stamps clock64 between the routine's phases:
//   keys     route_lane_keys: the lane's 28 logits and 28 biases loaded, sigmoid + bias -> keys
//   tree     route_max_key: the lane's best of its 32 keys
//   select   route_select_warp: the k picks (threshold select)
//   tail     the slot sigmoids (a second read of the winners' logits), the slot-order sum and
//            the weights' stores (route_token_warp_regs' last lines, k <= 32)
// next to a loads-only kernel (the same 56 loads per lane, no math), the shipped routine whole,
// the shipped routine twice in one launch (the second run finds the instructions and the data
// in the SM's caches: first minus second is the cold fetch), the keys with an IEEE division per
// sigmoid as before G round 13 (not that code as compiled: see the variant) and an empty kernel.
// "keys by W warps" (W = 4, 16; a CTA of W warps, as the prologue's CTA 0 has idle warps at
// T < 16): every warp computes the keys of its own 1024 / W experts (route_keys_strided), stores
// them to shared memory, a barrier, and warp 0 reads its lanes' 28 keys back and runs the shipped
// tree, select and tail on them: the same keys and the same select, so the same picks (checked
// against the shipped routine's outputs, printed). Stamps: keys (until warp 0 holds every key,
// barrier included), tree, select, tail. The question: how much of the keys phase is the lane's
// 28 load-and-sigmoid chains, which W warps would share, and how much one load's latency.
// "phases, 512 threads": "phases" in a CTA of 16 warps compiled for 512 (__launch_bounds__),
// warps 1..15 exiting at once: whether the wide variants' slower select (fifty-third session,
// call 4) comes from the compile for 512 threads or from the keys' way into registers; "keys by
// 1 warp via smem": the wide variants' path with W = 1 (the keys through shared memory). The
// "maxnreg 128" pair: the 16-warp and 512-thread variants under __maxnreg__(128) instead of
// __launch_bounds__(512), whether a register target gives the select back its schedule.
// "keys by 8 warps, maxnreg 128" is the shipped wide kernel's shape (route.cu: 8 warps, T <= 256)
// with its phases stamped; "shipped wide CTA" runs route_cta.cuh's routine itself, whole (its
// barrier is __syncthreads_or, not wide_keys' flag and two barriers): the next cut of the GPU
// router's premium (bench/NOTES.md, fifty-fifth session, Next 2) starts from these two.
// Each kernel is also timed from the host (events around each launch, one launch at a time), so
// the in-kernel cycles and the launch's cost can be told apart.
// Warm: logits / bias in L2 from the previous launch; flushed: a 256 MiB memset before each.
// A standalone program, timing only (no assertions, not a ctest; GpuRoute.* test the routine):
// `ninja bench_route_phases` (EXCLUDE_FROM_ALL).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <type_traits>
#include <vector>

#include "bench_cuda_check.h"
#include "smxx/route_cta.cuh"
#include "smxx/route_warp.cuh"

namespace {

using namespace mxmoe::smxx;
using mxmoe::situ_sigmoid;

constexpr int kE = 896, kK = 16;
constexpr int kStamps = 6;  // start, after keys, tree, select, tail, end (after a fence)
enum Variant {
  kEmpty,
  kLoadsOnly,
  kPhases,
  kShipped,
  kTwice,
  kDivKeys,
  kWide4,
  kWide16,
  kPhases512,
  kWide1,
  kWide16R,
  kPhases512R,
  kWide8,
  kWide8R,
  kWideCta,
  kWideCtaR
};
const char* const kName[] = {"empty",
                             "loads only",
                             "phases",
                             "shipped route_token_warp",
                             "shipped, twice",
                             "keys by division",
                             "keys by 4 warps",
                             "keys by 16 warps",
                             "phases, 512 threads",
                             "keys by 1 warp via smem",
                             "keys by 16 warps, maxnreg 128",
                             "phases, 512 thr, maxnreg 128",
                             "keys by 8 warps",
                             "keys by 8 warps, maxnreg 128",
                             "wide CTA route_token_cta",
                             "shipped wide CTA (maxnreg 128)"};
// The __maxnreg__(128) variants run their base variant's code in a kernel compiled under that
// register target instead of __launch_bounds__ (the two exclude each other).
constexpr bool is_r128(int v) {
  return v == kWide16R || v == kPhases512R || v == kWide8R || v == kWideCtaR;
}
constexpr int base_of(int v) {
  return v == kWide16R      ? kWide16
         : v == kPhases512R ? kPhases512
         : v == kWide8R     ? kWide8
         : v == kWideCtaR   ? kWideCta
                            : v;
}
constexpr int threads_of(int v) {
  return v == kWide4                                         ? 128
         : base_of(v) == kWide8 || base_of(v) == kWideCta    ? 256
         : base_of(v) == kWide16 || base_of(v) == kPhases512 ? 512
                                                             : 32;
}
// The stamped intervals' names, per variant (the first four; the fifth is the fence).
const char* const kCols[][4] = {{"-", "-", "-", "-"},
                                {"loads", "-", "-", "-"},
                                {"keys", "tree", "select", "tail"},
                                {"route", "-", "-", "-"},
                                {"first", "second", "-", "-"},
                                {"keys", "-", "-", "-"},
                                {"keys", "tree", "select", "tail"},
                                {"keys", "tree", "select", "tail"},
                                {"keys", "tree", "select", "tail"},
                                {"keys", "tree", "select", "tail"},
                                {"keys", "tree", "select", "tail"},
                                {"keys", "tree", "select", "tail"},
                                {"keys", "tree", "select", "tail"},
                                {"keys", "tree", "select", "tail"},
                                {"route", "-", "-", "-"},
                                {"route", "-", "-", "-"}};

// The SM clock, ordered after `dep` is ready: the volatile shared store waits for dep's
// scoreboard, and the clock read follows it in program order (volatile asm, memory clobber).
__device__ __forceinline__ long long stamp_after(uint32_t dep, volatile uint32_t* sink) {
  *sink = dep;
  long long t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
  return t;
}

// The lane's 28 logits and biases (experts lane + 32 i), every load issued before any use, as
// route_lane_keys does.
__device__ __forceinline__ void load_lane(const float* row, const float* bias, int lane,
                                          float (&lg)[32], float (&bs)[32]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int e = lane + 32 * i;
    lg[i] = e < kE ? row[e] : 0.0f;
    bs[i] = e < kE ? bias[e] : 0.0f;
  }
}

// The wide variants: warp w's keys of experts w * 32 * kPer + lane + 32 u (u < kPer) into
// keys[], then warp 0's lanes' 32 keys each back (absent experts 0). Returns, in every lane of
// warp 0, whether any key is NaN.
template <int kWarps>
__device__ __forceinline__ bool wide_keys(const float* row, const float* bias, uint32_t* keys,
                                          int* nan_flag, uint32_t (&key)[32]) {
  constexpr int kPer = 32 / kWarps;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint32_t kb[kPer];
  const int e0 = warp * 32 * kPer + lane;
  const bool nan = route_keys_strided(row, bias, kE, e0, kb);
  if (threadIdx.x == 0) *nan_flag = 0;
  __syncthreads();
#pragma unroll
  for (int u = 0; u < kPer; ++u) keys[e0 + 32 * u] = kb[u];  // 0 when absent
  if (__any_sync(~0u, nan) && lane == 0) atomicOr(nan_flag, 1);
  __syncthreads();
#pragma unroll
  for (int i = 0; i < 32; ++i) key[i] = keys[lane + 32 * i];
  return *nan_flag != 0;
}

// The stamped phases after the keys (stamps t[1..4]): the keys' arrival, route_max_key,
// route_select_warp and the tail (slot sigmoids, slot-order sum, the weights' stores), as
// route_token_warp_regs runs them for k <= 32.
template <bool kSharedKeys>
__device__ __forceinline__ void stamped_pick(uint32_t (&key)[32], bool nan_token, const float* row,
                                             uint32_t* scratch, const uint32_t* shared_keys,
                                             int32_t* ids, float* weights, int lane,
                                             volatile uint32_t* sink, long long (&t)[kStamps]) {
  t[1] = stamp_after(key[0] ^ key[27], sink);
  const uint32_t lb = route_max_key(key);
  t[2] = stamp_after(lb, sink);
  int32_t my_id = -1;
  const bool selected = route_select_warp<kSharedKeys>(key, lb, kK, scratch, &my_id, shared_keys);
  t[3] = stamp_after(static_cast<uint32_t>(my_id) ^ selected, sink);
  const float my_s = lane < kK ? situ_sigmoid(row[my_id]) : 0.0f;
  const float sum = route_slot_sum(my_s, kK);
  route_write_weights(kK, true, 2.5f, nan_token, sum, my_s, my_id, ids, weights);
  t[4] = stamp_after(__float_as_uint(sum), sink);
}

template <int V>
__device__ __forceinline__ void route_phases_body(const float* row, const float* bias, int32_t* ids,
                                                  float* weights, long long* stamps) {
  __shared__ __align__(8) uint32_t scratch[kRouteSelectWords];
  __shared__ uint32_t sink[threads_of(V)];
  const int lane = threadIdx.x % 32;
  long long t[kStamps] = {};
  t[0] = stamp_after(0u, sink + lane);
  if constexpr (V == kLoadsOnly) {
    float lg[32], bs[32];
    load_lane(row, bias, lane, lg, bs);
    uint32_t x = 0;
#pragma unroll
    for (int i = 0; i < 32; ++i) x ^= __float_as_uint(lg[i]) ^ __float_as_uint(bs[i]);
    t[1] = t[2] = t[3] = t[4] = stamp_after(x, sink + lane);
    if (x == 0x12345678u) ids[lane] = 0;  // keeps the loads
  } else if constexpr (V == kPhases || V == kPhases512) {
    if (threadIdx.x >= 32) return;  // (kPhases512: warp 0 alone works, compiled for 512 threads)
    uint32_t key[32];
    const bool nan_token = __any_sync(~0u, route_lane_keys(row, bias, kE, key));
    stamped_pick<false>(key, nan_token, row, scratch, nullptr, ids, weights, lane, sink + lane, t);
  } else if constexpr (V == kWide4 || V == kWide8 || V == kWide16 || V == kWide1) {
    __shared__ uint32_t keys[1024];
    __shared__ int nan_flag;
    uint32_t key[32];
    constexpr int kWarps = V == kWide4 ? 4 : V == kWide8 ? 8 : V == kWide16 ? 16 : 1;
    const bool nan_token = wide_keys<kWarps>(row, bias, keys, &nan_flag, key);
    if (threadIdx.x >= 32) return;  // warp 0 selects (its candidates' keys from keys[])
    stamped_pick<true>(key, nan_token, row, scratch, keys, ids, weights, lane, sink + lane, t);
  } else if constexpr (V == kWideCta) {
    __shared__ uint32_t keys[kRouteRegMax];
    route_token_cta(row, bias, kE, kK, true, 2.5f, keys, scratch, 0, ids, weights);
    if (threadIdx.x >= 32) return;  // (route_token_cta's warps 1.. are done after its barrier)
    __syncwarp();
    t[1] = t[2] = t[3] = t[4] = stamp_after(static_cast<uint32_t>(ids[lane % kK]), sink + lane);
  } else if constexpr (V == kShipped) {
    route_token_warp(row, bias, kE, kK, true, 2.5f, scratch, ids, weights);
    t[1] = t[2] = t[3] = t[4] = stamp_after(0u, sink + lane);
  } else if constexpr (V == kDivKeys) {
    // The keys with situ_sigmoid (an IEEE division with its called slow path) per expert, as
    // route_lane_keys computed them before G round 13, but not that code as compiled: folded by
    // XOR, without the NaN vote, it read 3.78 us on an H200 where the old route_lane_keys read
    // 2.24 on an H100 at equal loads (bench/NOTES.md, fifty-second session). An upper bound on
    // the division's cost, not the before of an A/B.
    float lg[32], bs[32];
    load_lane(row, bias, lane, lg, bs);
    uint32_t x = 0;
#pragma unroll
    for (int i = 0; i < 32; ++i)
      if (lane + 32 * i < kE) x ^= route_order_key(situ_sigmoid(lg[i]) + bs[i]);
    t[1] = t[2] = t[3] = t[4] = stamp_after(x, sink + lane);
    if (x == 0x12345678u) ids[lane] = 0;
  } else if constexpr (V == kTwice) {
    route_token_warp(row, bias, kE, kK, true, 2.5f, scratch, ids, weights);
    __syncwarp();
    t[1] = stamp_after(static_cast<uint32_t>(ids[lane % kK]), sink + lane);
    route_token_warp(row, bias, kE, kK, true, 2.5f, scratch, ids + 32, weights + 32);
    __syncwarp();
    t[2] = t[3] = t[4] = stamp_after(static_cast<uint32_t>(ids[32 + lane % kK]), sink + lane);
  } else {
    t[1] = t[2] = t[3] = t[4] = t[0];
  }
  __threadfence();  // as the prologue's flag write does after the routes
  t[5] = stamp_after(0u, sink + lane);
  if (lane == 0)
    for (int i = 0; i < kStamps; ++i) stamps[i] = t[i];
}

template <int V>
__global__ void __launch_bounds__(threads_of(V))
    route_phases(const float* row, const float* bias, int32_t* ids, float* weights,
                 long long* stamps) {
  route_phases_body<V>(row, bias, ids, weights, stamps);
}
template <int V>
__global__ void __maxnreg__(128)
    route_phases_r128(const float* row, const float* bias, int32_t* ids, float* weights,
                      long long* stamps) {
  route_phases_body<base_of(V)>(row, bias, ids, weights, stamps);
}

// Spins ~2 ms on the global timer and returns the SM clock in MHz over that window.
__global__ void clock_rate(double* mhz) {
  uint64_t g0, g1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g0));
  const long long c0 = clock64();
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g1));
  } while (g1 - g0 < 2000000u);
  const long long c1 = clock64();
  *mhz = static_cast<double>(c1 - c0) / static_cast<double>(g1 - g0) * 1e3;
}

template <int V>
void run(const float* row, const float* bias, int32_t* ids, float* weights, long long* dstamps,
         void* flush, size_t flush_bytes, double mhz, cudaStream_t st) {
  for (int flushed = 0; flushed < 2; ++flushed) {
    constexpr int kReps = 200, kWarm = 20;
    std::vector<std::vector<double>> phase(kStamps - 1);
    std::vector<float> host_us;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int rep = 0; rep < kReps; ++rep) {
      CK(cudaMemsetAsync(flush, rep, flushed ? flush_bytes : 256, st));
      CK(cudaEventRecord(e0, st));
      if constexpr (is_r128(V))
        route_phases_r128<V><<<1, threads_of(V), 0, st>>>(row, bias, ids, weights, dstamps);
      else
        route_phases<V><<<1, threads_of(V), 0, st>>>(row, bias, ids, weights, dstamps);
      CK(cudaGetLastError());
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      long long s[kStamps];
      CK(cudaMemcpy(s, dstamps, sizeof(s), cudaMemcpyDeviceToHost));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (rep < kWarm) continue;
      host_us.push_back(ms * 1e3f);
      for (int i = 0; i + 1 < kStamps; ++i)
        phase[i].push_back(static_cast<double>(s[i + 1] - s[i]) / mhz * 1e3);  // ns
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::vector<double> h(host_us.begin(), host_us.end());
    std::printf("%-25s %-7s host %6.2f us, in-kernel ns (medians):", kName[V],
                flushed ? "flushed" : "warm", median(h));
    for (int i = 0; i < 4; ++i)
      if (kCols[V][i][0] != '-') std::printf(" %s %.0f", kCols[V][i], median(phase[i]));
    std::printf(" fence %.0f, stamped total %.0f\n", median(phase[4]),
                median(phase[0]) + median(phase[1]) + median(phase[2]) + median(phase[3]) +
                    median(phase[4]));
  }
}

// The first kK ids and weights (the last run's outputs), bit for bit.
void read_outputs(const int32_t* dids, const float* dw, std::vector<int32_t>* ids,
                  std::vector<uint32_t>* wbits) {
  ids->resize(kK);
  wbits->resize(kK);
  CK(cudaMemcpy(ids->data(), dids, kK * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(wbits->data(), dw, kK * 4, cudaMemcpyDeviceToHost));
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("bench_route_phases on %s: one warp, one token, E = %d, k = %d\n", prop.name, kE, kK);
  // Logits like a router's (normal, sd 2) and a small correction bias; fixed seed.
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 2.0f), nb(0.0f, 0.05f);
  std::vector<float> lg(kE), bs(kE);
  for (int e = 0; e < kE; ++e) {
    lg[e] = nd(rng);
    bs[e] = nb(rng);
  }
  float *drow, *dbias, *dw;
  int32_t* dids;
  long long* dstamps;
  double* dmhz;
  const size_t flush_bytes = size_t{256} << 20;
  void* flush;
  CK(cudaMalloc(&drow, kE * 4));
  CK(cudaMalloc(&dbias, kE * 4));
  CK(cudaMalloc(&dw, 64 * 4));
  CK(cudaMalloc(&dids, 64 * 4));
  CK(cudaMalloc(&dstamps, kStamps * 8));
  CK(cudaMalloc(&dmhz, 8));
  CK(cudaMalloc(&flush, flush_bytes));
  CK(cudaMemcpy(drow, lg.data(), kE * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dbias, bs.data(), kE * 4, cudaMemcpyHostToDevice));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  clock_rate<<<1, 1, 0, st>>>(dmhz);
  CK(cudaGetLastError());
  double mhz = 0;
  CK(cudaMemcpyAsync(&mhz, dmhz, 8, cudaMemcpyDeviceToHost, st));
  CK(cudaStreamSynchronize(st));
  std::printf("SM clock over a 2 ms spin: %.0f MHz (in-kernel ns = cycles / that)\n", mhz);
  run<kEmpty>(drow, dbias, dids, dw, dstamps, flush, flush_bytes, mhz, st);
  run<kLoadsOnly>(drow, dbias, dids, dw, dstamps, flush, flush_bytes, mhz, st);
  run<kPhases>(drow, dbias, dids, dw, dstamps, flush, flush_bytes, mhz, st);
  run<kShipped>(drow, dbias, dids, dw, dstamps, flush, flush_bytes, mhz, st);
  run<kTwice>(drow, dbias, dids, dw, dstamps, flush, flush_bytes, mhz, st);
  run<kDivKeys>(drow, dbias, dids, dw, dstamps, flush, flush_bytes, mhz, st);
  std::vector<int32_t> ref_ids, got_ids;
  std::vector<uint32_t> ref_w, got_w;
  CK(cudaMemset(dids, 0xFF, 64 * 4));
  run<kShipped>(drow, dbias, dids, dw, dstamps, flush, flush_bytes, mhz, st);
  read_outputs(dids, dw, &ref_ids, &ref_w);
  auto compared = [&](auto v) {  // runs variant v on poisoned outputs, then compares them
    constexpr int kV = decltype(v)::value;
    CK(cudaMemset(dids, 0xFF, 64 * 4));
    CK(cudaMemset(dw, 0xFF, 64 * 4));
    run<kV>(drow, dbias, dids, dw, dstamps, flush, flush_bytes, mhz, st);
    read_outputs(dids, dw, &got_ids, &got_w);
    std::printf("%s: ids and weights equal to the shipped routine's: %s\n", kName[kV],
                got_ids == ref_ids && got_w == ref_w ? "yes" : "NO");
  };
  compared(std::integral_constant<int, kWide4>{});
  compared(std::integral_constant<int, kWide16>{});
  run<kPhases512>(drow, dbias, dids, dw, dstamps, flush, flush_bytes, mhz, st);
  run<kWide1>(drow, dbias, dids, dw, dstamps, flush, flush_bytes, mhz, st);
  compared(std::integral_constant<int, kWide16R>{});
  run<kPhases512R>(drow, dbias, dids, dw, dstamps, flush, flush_bytes, mhz, st);
  compared(std::integral_constant<int, kWide8R>{});
  compared(std::integral_constant<int, kWideCtaR>{});
  CK(cudaFree(drow));
  CK(cudaFree(dbias));
  CK(cudaFree(dw));
  CK(cudaFree(dids));
  CK(cudaFree(dstamps));
  CK(cudaFree(dmhz));
  CK(cudaFree(flush));
  CK(cudaStreamDestroy(st));
  return 0;
}
