// tests/gpu/bench_wgmma_fp8_depth.cu: how fast can FP8 wgmma run on an SM90 when every k32
// block's result must be read back, as the exact MX promotion acc += tmp * 2^s needs
// (HOPPER_MX.md option 2)? No memory traffic: one CTA per SM, operands and scales in shared
// memory (A in registers for "RS"), each consumer warpgroup keeping D wgmma groups in flight (D
// temporaries) over steps of B k32 blocks that start and end with nothing in flight (as a
// pipeline step of a kernel does), waiting for each block's group (wgmma.wait_group with the
// number of newer groups), then promoting it:
//   promote 0: no promotion (the code stays behind a run-time flag that is 0, so every
//              temporary keeps its registers, as in the kernels' timing diagnostic);
//   promote 1 / 2: tokens on wgmma N (swap-AB, the layout of every shipped kernel): each
//              thread's N/2 products span N/4 tokens, N/16 LDS.128 of scales per block, loaded
//              after (1) or before (2) the wait;
//   promote 3: the same FFMAs with the scales in registers (no loads: the FFMA-only bound);
//   promote 4 ("rows"): tokens on wgmma M: a thread's products span 2 tokens, 2 scalar loads.
// "per-k64" / "per-k128" rows chain 2 / 4 k32 wgmmas per promotion: coarser activation scales,
// not MX semantics, for the price of the per-32 granularity. "ring" rows feed the same steps
// through the warp-specialized kernels' mbarrier ring (a producer warpgroup that copies nothing):
// the handshake's own cost per step.
// Prints FLOP per clock per SM against 8192 (the FP8 tensor core's dense peak) and TFLOP/s at
// the clock it ran. A standalone program, timing only (no assertions, not a ctest): built with
// `ninja bench_wgmma_fp8_depth` (EXCLUDE_FROM_ALL); results in bench/NOTES.md F round 3.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_cuda_check.h"
#include "sm90/ptx.cuh"
#include "sm90/wgmma_fp8.cuh"

namespace ptx = mxmoe::sm90::ptx;

// Shared memory of both kernels (after 1024-byte alignment): the B tile (up to 128 rows x 128 B),
// the SS form's A tile (64 rows x 128 B), then 4 blocks x N scale floats (the ring kernel puts
// its barriers after them).
constexpr int kBTileBytes = 16384, kATileBytes = 8192;
constexpr double kPeakFlopPerClk = 8192.0;  // FP8 dense, per SM
__host__ __device__ constexpr int smem_bytes(int n) {
  return 1024 + kBTileBytes + kATileBytes + 16 * n;
}

// Fills the operand tiles with finite E4M3 bytes near 1 and the scales; returns the scales.
__device__ __forceinline__ float* fill_operands(uint8_t* smem, int n) {
  float* sc = reinterpret_cast<float*>(smem + kBTileBytes + kATileBytes);
  for (int i = threadIdx.x; i < (kBTileBytes + kATileBytes) / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(smem)[i] = 0x38383838u ^ ((i * 2654435761u) & 0x07070707u);
  for (int i = threadIdx.x; i < 4 * n; i += blockDim.x) sc[i] = 1.0f + (i & 3) * 0.25f;
  return sc;
}

// The consumer's result (the sum of its accumulators, so no wgmma is dead code) and, from the
// thread that times the CTA, its cycle count.
template <int NA>
__device__ __forceinline__ void store_result(const float (&acc)[NA], float* out, long long* cycles,
                                             unsigned timer_thread, long long c0, long long c1) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < NA; ++i) s += acc[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
  if (threadIdx.x == timer_thread) cycles[blockIdx.x] = c1 - c0;
}

// One pipeline step of B k32 blocks, unrolled at compile time (wait counts are immediates):
// D - 1 groups issued ahead, each block's group waited for (wgmma.wait_group with the number of
// newer groups still in flight), then promoted; the step starts and ends with nothing in flight,
// as a step of the FP8 kernel does (its slot is released after the step).
template <int N, int D, int B, int kChain, int kPromote, bool kSS = false>
struct Step {
  static constexpr int NA = N / 2;
  static __device__ __forceinline__ void issue(float* d, const uint4& a, uint32_t b_addr, int blk) {
    ptx::wgmma_fence();
#pragma unroll
    for (int c = 0; c < kChain; ++c) {
      const uint64_t bd = ptx::desc_sw128(b_addr + 32 * ((blk + c) & 3));
      if constexpr (kSS) {  // A = the 64-row tile after B (tokens on M from shared memory)
        ptx::WgmmaFp8SS<N>::mma(d, ptx::desc_sw128(b_addr + kBTileBytes + 32 * ((blk + c) & 3)), bd,
                                kChain > 1 ? 1 : 0);
      } else {
        ptx::WgmmaFp8RS<N>::mma(d, a, bd, kChain > 1 ? 1 : 0);
      }
    }
    ptx::wgmma_commit();
  }
  static __device__ __forceinline__ float4 lds4(uint32_t addr) {
    float4 s;
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(s.x), "=f"(s.y), "=f"(s.z), "=f"(s.w)
                 : "r"(addr));
    return s;
  }
  template <int b>
  static __device__ __forceinline__ void run(float (&acc)[NA], float (&tmp)[D][NA], const uint4& a,
                                             uint32_t b_addr, uint32_t sc_addr, int live) {
    if constexpr (b == 0) {
#pragma unroll
      for (int j = 0; j < D - 1 && j < B; ++j) issue(tmp[j], a, b_addr, j);
    }
    if constexpr (b + D - 1 < B) issue(tmp[(b + D - 1) % D], a, b_addr, b + D - 1);
    // kPromote 1: the block's scales loaded after its wait; 2: before it (their latency hides
    // under the wgmma); 3: no loads (scales in registers: the FFMAs alone).
    float4 sv[N / 16];
    float r0 = 0.0f, r1 = 0.0f;  // kPromote 4: one scale per accumulator row (tokens on M)
    if constexpr (kPromote == 4) {
      asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(r0) : "r"(sc_addr + 4 * (b & 3) * N));
      asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(r1) : "r"(sc_addr + 4 * (b & 3) * N + 32));
    }
    if constexpr (kPromote == 2) {
#pragma unroll
      for (int m = 0; m < N / 16; ++m) sv[m] = lds4(sc_addr + 4 * ((b & 3) * N + 16 * m));
    }
    constexpr int newer = (B - 1 - b) < (D - 1) ? (B - 1 - b) : (D - 1);
    ptx::wgmma_wait<newer>();
    float* t = tmp[b % D];
#pragma unroll
    for (int i = 0; i < NA; ++i) ptx::fence_operand(t[i]);
    // Without promotion the code stays behind a run-time flag that is 0: every temporary
    // keeps its own registers (as in the kernel's timing diagnostic), nothing is executed.
    if constexpr (kPromote == 4) {
#pragma unroll
      for (int i = 0; i < NA; ++i) acc[i] = fmaf(t[i], ((i >> 1) & 1) ? r1 : r0, acc[i]);
    } else if (kPromote != 0 || live) {
#pragma unroll
      for (int m = 0; m < N / 16; ++m) {
        float4 s;
        if constexpr (kPromote == 2) {
          s = sv[m];
        } else if constexpr (kPromote == 3) {
          s = make_float4(__uint_as_float(sc_addr), __uint_as_float(sc_addr + 1),
                          __uint_as_float(sc_addr + 2), __uint_as_float(sc_addr + 3));
        } else {
          s = lds4(sc_addr + 4 * ((b & 3) * N + 16 * m));
        }
        acc[8 * m + 0] = fmaf(t[8 * m + 0], s.x, acc[8 * m + 0]);
        acc[8 * m + 1] = fmaf(t[8 * m + 1], s.y, acc[8 * m + 1]);
        acc[8 * m + 2] = fmaf(t[8 * m + 2], s.x, acc[8 * m + 2]);
        acc[8 * m + 3] = fmaf(t[8 * m + 3], s.y, acc[8 * m + 3]);
        acc[8 * m + 4] = fmaf(t[8 * m + 4], s.z, acc[8 * m + 4]);
        acc[8 * m + 5] = fmaf(t[8 * m + 5], s.w, acc[8 * m + 5]);
        acc[8 * m + 6] = fmaf(t[8 * m + 6], s.z, acc[8 * m + 6]);
        acc[8 * m + 7] = fmaf(t[8 * m + 7], s.w, acc[8 * m + 7]);
      }
    }
    if constexpr (b + 1 < B) run<b + 1>(acc, tmp, a, b_addr, sc_addr, live);
  }
};

template <int N, int D, int B, int kChain, int kPromote, int kThreads, bool kSS = false>
__global__ void __launch_bounds__(kThreads, 1)
    depth_kernel(int iters, int nwg, int live, float* out, long long* cycles) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = ptx::align_smem<1024>(smem_raw);
  float* sc = fill_operands(smem, N);
  __syncthreads();
  const int wg = threadIdx.x / 128;
  if (wg >= nwg) return;
  const int t = threadIdx.x & 3;
  const uint32_t b_addr = ptx::smem_addr(smem);
  const uint32_t sc_addr = ptx::smem_addr(sc) + 16 * t;
  const uint4 a = make_uint4(0x38383838u ^ (threadIdx.x & 7), 0x30303030u, 0x3A3A3A3Au,
                             0x34343434u ^ (threadIdx.x & 3));
  constexpr int NA = N / 2;
  float acc[NA], tmp[D][NA];
#pragma unroll
  for (int i = 0; i < NA; ++i) {
    acc[i] = 0.0f;
#pragma unroll
    for (int d = 0; d < D; ++d) tmp[d][i] = 0.0f;
  }
  __syncwarp();
  const long long c0 = clock64();
  for (int it = 0; it < iters; ++it)
    Step<N, D, B, kChain, kPromote, kSS>::template run<0>(acc, tmp, a, b_addr, sc_addr, live);
  store_result(acc, out, cycles, 0, c0, clock64());
}

// The same consumer steps fed through the warp-specialized kernels' mbarrier ring: warpgroup 0
// is a producer that copies nothing (the slots hold fixed data) but keeps the handshake: per step
// it waits empty[slot] and, kLag steps later, arrives on full[slot] (128 arrivals; with kFence
// after a proxy fence, as after real cp.async copies); each consumer warpgroup waits full[slot],
// runs the step's 4 blocks and arrives on empty[slot] (one arrival per warp). What does the
// handshake cost per step?
template <int N, int kPromote, int kLag, bool kFence>
__global__ void __launch_bounds__(384, 1)
    ring_kernel(int steps, int live, float* out, long long* cycles) {
  constexpr int kStages = 8;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = ptx::align_smem<1024>(smem_raw);
  float* sc = fill_operands(smem, N);
  const uint32_t bars = ptx::smem_addr(sc + 4 * N);  // full[8], empty[8]
  const uint32_t full = bars, empty = bars + 8 * kStages;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      ptx::mbar_init(full + 8 * i, 128);
      ptx::mbar_init(empty + 8 * i, 8);
    }
    ptx::mbar_init_fence();
  }
  __syncthreads();
  const int wg = threadIdx.x / 128;
  const long long c0 = clock64();
  if (wg == 0) {
    int slot = 0, phase = 0, lag_slot = 0, pending = 0;
    for (int st = 0; st < steps; ++st) {
      ptx::mbar_wait(empty + 8 * slot, phase ^ 1);
      if (++pending > kLag) {
        if (kFence) ptx::fence_proxy_async();
        ptx::mbar_arrive(full + 8 * lag_slot);
        lag_slot = lag_slot + 1 == kStages ? 0 : lag_slot + 1;
        --pending;
      }
      if (++slot == kStages) {
        slot = 0;
        phase ^= 1;
      }
    }
    for (; pending > 0; --pending) {
      ptx::mbar_arrive(full + 8 * lag_slot);
      lag_slot = lag_slot + 1 == kStages ? 0 : lag_slot + 1;
    }
    return;
  }
  const int t = threadIdx.x & 3;
  const uint32_t b_addr = ptx::smem_addr(smem);
  const uint32_t sc_addr = ptx::smem_addr(sc) + 16 * t;
  const uint4 a = make_uint4(0, 0, 0, 0);
  constexpr int NA = N / 2;
  float acc[NA], tmp[2][NA];
#pragma unroll
  for (int i = 0; i < NA; ++i) acc[i] = tmp[0][i] = tmp[1][i] = 0.0f;
  int slot = 0, phase = 0;
  for (int st = 0; st < steps; ++st) {
    ptx::mbar_wait(full + 8 * slot, phase);
    Step<N, 2, 4, 1, kPromote, true>::template run<0>(acc, tmp, a, b_addr, sc_addr, live);
    if ((threadIdx.x & 31) == 0) ptx::mbar_arrive(empty + 8 * slot);
    if (++slot == kStages) {
      slot = 0;
      phase ^= 1;
    }
  }
  store_result(acc, out, cycles, 128, c0, clock64());
}

// The slowest CTA's cycle count of the last launch.
long long max_cycles(const long long* cyc, int sms) {
  std::vector<long long> hc(sms);
  CK(cudaMemcpy(hc.data(), cyc, sizeof(long long) * sms, cudaMemcpyDeviceToHost));
  return *std::max_element(hc.begin(), hc.end());
}

template <int N, int kPromote, int kLag, bool kFence>
void run_ring(const char* name, int sms, float* out, long long* cyc) {
  auto* k = ring_kernel<N, kPromote, kLag, kFence>;
  const int smem = smem_bytes(N) + 256;  // + 16 barriers
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int steps = 1024;
  k<<<sms, 384, smem>>>(steps, 0, out, cyc);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  long long best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    k<<<sms, 384, smem>>>(steps, 0, out, cyc);
    CK(cudaDeviceSynchronize());
    const long long mx = max_cycles(cyc, sms);
    if (rep == 0 || mx < best) best = mx;
  }
  const double flop = 2.0 * steps * 4 * 64.0 * N * 32 * 2;  // 2 consumers x 4 blocks per step
  std::printf(
      "%-10s SS N=%3d ring lag=%d fence=%d promote=%d wg=2+1        | %6.0f FLOP/clk/SM = %5.1f%% "
      "of 8192 | %6.0f cycles per step\n",
      name, N, kLag, int(kFence), kPromote, flop / double(best),
      100.0 * flop / double(best) / kPeakFlopPerClk, double(best) / steps);
}

template <int N, int D, int B, int kChain, int kPromote, int kThreads, bool kSS = false>
void run(const char* name, int nwg, int sms, float* out, long long* cyc) {
  auto* k = depth_kernel<N, D, B, kChain, kPromote, kThreads, kSS>;
  const int smem = smem_bytes(N);
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaFuncAttributes attr;
  CK(cudaFuncGetAttributes(&attr, k));
  const int iters = 4096 / (B * kChain);
  k<<<sms, kThreads, smem>>>(iters, nwg, 0, out, cyc);  // warm-up (clocks up)
  CK(cudaGetLastError());
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  float best_ms = 1e30f;
  long long best_cyc = 0;
  for (int rep = 0; rep < 5; ++rep) {
    CK(cudaEventRecord(e0));
    k<<<sms, kThreads, smem>>>(iters, nwg, 0, out, cyc);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    const long long mx = max_cycles(cyc, sms);
    if (ms < best_ms) {
      best_ms = ms;
      best_cyc = mx;
    }
  }
  const double flop_cta = double(nwg) * double(iters) * B * kChain * 64.0 * N * 32 * 2;
  const double per_clk = flop_cta / double(best_cyc);
  const double tflops = flop_cta * sms / (best_ms * 1e-3) * 1e-12;
  const double mhz = double(best_cyc) / (best_ms * 1e-3) * 1e-6;
  std::printf(
      "%-10s %s N=%3d D=%d B=%d chain=%d promote=%d wg=%d regs=%3d spill=%4zu | %6.0f FLOP/clk/SM "
      "= %5.1f%% of 8192 | %7.1f TFLOP/s | ~%4.0f MHz\n",
      name, kSS ? "SS" : "RS", N, D, B, kChain, kPromote, nwg, attr.numRegs, attr.localSizeBytes,
      per_clk, 100.0 * per_clk / kPeakFlopPerClk, tflops, mhz);
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
}

int main() {
  int dev = 0, sms = 0, major = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major != 9) {
    std::printf("SKIPPED: bench_wgmma_fp8_depth needs an SM90 GPU (found major %d)\n", major);
    return 0;
  }
  float* out;
  long long* cyc;
  CK(cudaMalloc(&out, sizeof(float) * sms * 384));
  CK(cudaMalloc(&cyc, sizeof(long long) * sms));
  std::printf("FLOP per clock per SM; the FP8 tensor core's dense peak is 8192 (one CTA per SM)\n");
  // No promotion: 4 k32 wgmmas chained per group (the BF16 kernels' pattern), then one per group.
  run<128, 2, 4, 4, 0, 256>("chain", 2, sms, out, cyc);
  for (int wg = 1; wg <= 2; ++wg) {
    run<96, 1, 4, 1, 0, 256>("skeleton", wg, sms, out, cyc);
    run<96, 2, 4, 1, 0, 256>("skeleton", wg, sms, out, cyc);
  }
  run<64, 2, 4, 1, 0, 256, true>("skeleton", 2, sms, out, cyc);
  // Exact per-32 promotion, tokens on N (swap-AB): scales loaded after / before the wait, none.
  for (int wg = 1; wg <= 2; ++wg) {
    run<96, 2, 4, 1, 1, 256>("promote", wg, sms, out, cyc);
    run<96, 2, 4, 1, 2, 256>("promote", wg, sms, out, cyc);
    run<96, 2, 4, 1, 3, 256>("promote", wg, sms, out, cyc);
  }
  run<96, 2, 8, 1, 2, 256>("promote", 2, sms, out, cyc);
  run<64, 3, 4, 1, 2, 256>("promote", 2, sms, out, cyc);
  run<48, 4, 4, 1, 2, 256>("promote", 2, sms, out, cyc);
  run<64, 2, 4, 1, 2, 384>("promote", 3, sms, out, cyc);
  // Exact per-32 promotion, tokens on M ("rows": two scales per thread per block).
  run<96, 2, 4, 1, 4, 256>("rows", 2, sms, out, cyc);
  run<128, 2, 4, 1, 4, 256>("rows", 2, sms, out, cyc);
  run<64, 2, 4, 1, 4, 256, true>("rows", 2, sms, out, cyc);
  run<128, 2, 4, 1, 4, 256, true>("rows", 2, sms, out, cyc);
  run<64, 2, 4, 1, 4, 384, true>("rows", 3, sms, out, cyc);
  // Coarser promotion (not MX semantics): one per 64 / 128 K.
  run<96, 2, 4, 2, 2, 256>("per-k64", 2, sms, out, cyc);
  run<96, 2, 4, 4, 2, 256>("per-k128", 2, sms, out, cyc);
  run<128, 2, 4, 4, 2, 256>("per-k128", 2, sms, out, cyc);
  // The same steps through the kernels' mbarrier ring (a producer warpgroup that copies nothing).
  run_ring<64, 0, 2, true>("ring", sms, out, cyc);
  run_ring<64, 0, 0, false>("ring", sms, out, cyc);
  run_ring<64, 4, 2, true>("ring rows", sms, out, cyc);
  run_ring<64, 4, 0, false>("ring rows", sms, out, cyc);
  CK(cudaFree(out));
  CK(cudaFree(cyc));
  return 0;
}
