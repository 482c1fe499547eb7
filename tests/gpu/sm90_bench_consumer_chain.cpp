// tests/gpu/sm90_bench_consumer_chain.cpp: a diagnostic microbenchmark of one consumer's
// per-64-K-step chain (fragment load -> FP4->BF16 expand_fragment -> 4 x wgmma m64nBNk16 -> wait)
// in isolation, over resident data (no global traffic in the timed loop). Kernels and variants:
// sm90_consumer_chain.cu (compiled by nvcc; this file is host C++).
//
// DISABLED_ by default; run with
//   test_sm90_grouped_gemm --gtest_also_run_disabled_tests --gtest_filter='*ConsumerChain*'
// DISABLED_Correctness: on one CTA, 12 steps, every BN and WG: (b)'s expanded registers against a
//   CPU E2M1 x 2^(s-127) decode (bit-exact), (a) fed with (b)'s registers against (c), (d), (e)
//   (bit-exact: same wgmmas on the same operands), and (c)'s accumulator tile against a CPU dot
//   product of the expanded BF16 values (fp32 accumulation tolerance).
// DISABLED_Timings: one CTA per SM, every warpgroup `steps` 64-K steps; prints
//   CHAIN <variant> BN=<n> WG=<w> cycles/step=<c> TFLOP/s=<t>
// cycles/step = SM cycles (clock64 around the loop, mean over CTAs) / (64-K steps the SM
// completed, all its warpgroups); the dense BF16 peak is 2 BN cycles/step per SM (4096 BF16
// FLOP/clk/SM), so one warpgroup's own chain latency per step is cycles/step x WG. TFLOP/s from
// cudaEvents (median of 5 launches after a warm-up), 2 * 64 * BN * 64 FLOP per step (for (b),
// which issues no MMA, the rate the expansion alone would allow).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "gpu_test_util.h"

namespace mxmoe::sm90::chain {

// Same definition as in sm90_consumer_chain.cu.
struct ChainArgs {
  const uint4* q_in;
  const uint32_t* s_in;
  const uint32_t* a_in;
  const uint16_t* b_in;
  int steps;
  int grid;
  float* out;
  long long* clocks;
};
cudaError_t launch_chain(int variant, int bn, int wg, const ChainArgs& p, cudaStream_t stream);

namespace {

constexpr int kSlots = 4;
constexpr int kThreads = 128;
const char* const kVariantName[5] = {"a_wgmma_only", "b_expand_only", "c_expand_wgmma_wait1",
                                     "d_expand_next_2deep", "e_lds_expand_wgmma"};

uint64_t xorshift(uint64_t* s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}
uint16_t bf16_bits(float f) {  // exact for the values used here
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}
float bf16_value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
float e2m1(uint32_t nib, uint32_t e) {
  static const float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = std::ldexp(kMag[nib & 7], static_cast<int>(e) - 127);
  return (nib & 8) ? -m : m;
}

struct Inputs {
  std::vector<uint32_t> q;  // [kSlots][128][4]
  std::vector<uint32_t> s;  // [kSlots][128]
  std::vector<uint16_t> b;  // [192][64]
  std::vector<uint32_t> a;  // [128][16] random BF16x2 (timing of variant a)
};
Inputs make_inputs(uint64_t seed, bool same_slots) {
  Inputs in;
  uint64_t st = seed * 0x9E3779B97F4A7C15ull + 7;
  in.q.resize(kSlots * kThreads * 4);
  in.s.resize(kSlots * kThreads);
  for (auto& w : in.q) w = static_cast<uint32_t>(xorshift(&st) >> 13);
  for (auto& w : in.s) {
    w = 0;
    for (int b = 0; b < 4; ++b) w |= static_cast<uint32_t>(118 + (xorshift(&st) >> 20) % 9) << (8 * b);
  }
  if (same_slots)
    for (int sl = 1; sl < kSlots; ++sl) {
      std::copy(in.q.begin(), in.q.begin() + kThreads * 4, in.q.begin() + sl * kThreads * 4);
      std::copy(in.s.begin(), in.s.begin() + kThreads, in.s.begin() + sl * kThreads);
    }
  in.b.resize(192 * 64);
  for (auto& v : in.b) v = bf16_bits(static_cast<float>(static_cast<int>((xorshift(&st) >> 20) % 17) - 8) / 8.0f);
  in.a.resize(kThreads * 16);
  for (auto& v : in.a) {
    const uint32_t lo = bf16_bits(static_cast<float>(static_cast<int>((xorshift(&st) >> 20) % 9) - 4) / 4.0f);
    const uint32_t hi = bf16_bits(static_cast<float>(static_cast<int>((xorshift(&st) >> 20) % 9) - 4) / 4.0f);
    v = lo | (hi << 16);
  }
  return in;
}

// CPU expansion of slot 0: the A tile [64 rows][64 k] and each thread's 16 registers.
void cpu_expand(const Inputs& in, std::vector<float>* A, std::vector<uint32_t>* regs) {
  A->assign(64 * 64, 0.0f);
  regs->assign(kThreads * 16, 0);
  for (int tid = 0; tid < kThreads; ++tid) {
    const int w = tid / 32, g = (tid % 32) / 4, t = tid % 4;
    const uint32_t s = in.s[tid];
    for (int j = 0; j < 4; ++j)
      for (int r = 0; r < 4; ++r) {
        const uint32_t x = in.q[tid * 4 + j] >> (4 * r);
        const uint32_t e = (s >> (8 * (2 * (j >> 1) + (r & 1)))) & 0xFF;
        const float lo = e2m1(x & 0xF, e), hi = e2m1((x >> 16) & 0xF, e);
        const int row = 16 * w + g + 8 * (r & 1), k = 16 * j + 8 * (r >> 1) + 2 * t;
        (*A)[row * 64 + k] = lo;
        (*A)[row * 64 + k + 1] = hi;
        (*regs)[tid * 16 + 4 * j + r] = bf16_bits(lo) | (static_cast<uint32_t>(bf16_bits(hi)) << 16);
      }
  }
}

struct Dev {
  mxmoe::test::DevBuf<uint32_t> q, s, a, b;
  mxmoe::test::DevBuf<float> out;
  mxmoe::test::DevBuf<long long> clocks;
};
bool upload(const Inputs& in, Dev* d, size_t out_floats, int grid) {
  d->q.alloc(in.q.size());
  d->s.alloc(in.s.size());
  d->a.alloc(in.a.size());
  d->b.alloc(in.b.size() / 2);
  d->out.alloc(out_floats);
  d->clocks.alloc(grid);
  if (!d->q.ok() || !d->s.ok() || !d->a.ok() || !d->b.ok() || !d->out.ok() || !d->clocks.ok())
    return false;
  return cudaMemcpy(d->q.get(), in.q.data(), in.q.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(d->s.get(), in.s.data(), in.s.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(d->a.get(), in.a.data(), in.a.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(d->b.get(), in.b.data(), in.b.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess;
}
ChainArgs args_of(const Dev& d, int steps, int grid, bool debug) {
  ChainArgs p{};
  p.q_in = reinterpret_cast<const uint4*>(d.q.get());
  p.s_in = d.s.get();
  p.a_in = d.a.get();
  p.b_in = reinterpret_cast<const uint16_t*>(d.b.get());
  p.steps = steps;
  p.grid = grid;
  p.out = debug ? d.out.get() : nullptr;
  p.clocks = d.clocks.get();
  return p;
}

TEST(Sm90ConsumerChainBench, DISABLED_Correctness) {
  MXMOE_REQUIRE_SM90();
  const Inputs in = make_inputs(1, /*same_slots=*/true);
  std::vector<float> A;
  std::vector<uint32_t> regs;
  cpu_expand(in, &A, &regs);
  constexpr int kSteps = 12;
  for (int wg = 1; wg <= 2; ++wg) {
    Dev dev;
    ASSERT_TRUE(upload(in, &dev, static_cast<size_t>(wg) * kThreads * 96, 1));
    // (b): the expanded registers, bit for bit.
    ChainArgs p = args_of(dev, kSteps, 1, true);
    CUDA_OK(launch_chain(1, 64, wg, p, 0));
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint32_t> got(static_cast<size_t>(wg) * kThreads * 16);
    CUDA_OK(cudaMemcpy(got.data(), dev.out.get(), got.size() * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) bad += got[i] != regs[i % (kThreads * 16)];
    EXPECT_EQ(bad, 0) << "variant (b) expansion, WG=" << wg;
    // (a) fed with (b)'s registers.
    CUDA_OK(cudaMemcpy(dev.a.get(), got.data(), kThreads * 16 * 4, cudaMemcpyHostToDevice));
    for (int bn : {64, 128, 192}) {
      const size_t n = static_cast<size_t>(wg) * kThreads * (bn / 2);
      std::vector<std::vector<float>> d(5, std::vector<float>(n));
      for (int v : {0, 2, 3, 4}) {
        CUDA_OK(cudaMemset(dev.out.get(), 0xFF, n * 4));
        CUDA_OK(launch_chain(v, bn, wg, p, 0));
        CUDA_OK(cudaDeviceSynchronize());
        CUDA_OK(cudaMemcpy(d[v].data(), dev.out.get(), n * 4, cudaMemcpyDeviceToHost));
      }
      for (int v : {2, 3, 4})
        EXPECT_EQ(std::memcmp(d[v].data(), d[0].data(), n * 4), 0)
            << "variant " << kVariantName[v] << " != (a) on (b)'s registers, BN=" << bn
            << " WG=" << wg;
      // (c) against the CPU: C[row][n] = steps * sum_k A[row][k] B[n][k].
      double worst = 0.0;
      int wrong = 0;
      for (int tid = 0; tid < wg * kThreads; ++tid) {
        const int lt = tid % kThreads, w = lt / 32, g = (lt % 32) / 4, t = lt % 4;
        for (int i = 0; i < bn / 2; ++i) {
          const int row = 16 * w + g + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * t + (i & 1);
          double ref = 0.0, mag = 0.0;
          for (int k = 0; k < 64; ++k) {
            const double term = static_cast<double>(A[row * 64 + k]) * bf16_value(in.b[col * 64 + k]);
            ref += term;
            mag += std::fabs(term);
          }
          ref *= kSteps;
          mag *= kSteps;
          const double err = std::fabs(d[2][static_cast<size_t>(tid) * (bn / 2) + i] - ref);
          worst = std::max(worst, err / (mag + 1e-30));
          wrong += !(err <= 2e-3 * mag + 1e-30);  // a layout error is O(1) of it
        }
      }
      EXPECT_EQ(wrong, 0) << "variant (c) vs CPU dot product, BN=" << bn << " WG=" << wg
                          << " worst err/sum|terms| " << worst;
      std::printf("CHAIN-CHECK BN=%d WG=%d: (b) regs %s, (c)(d)(e)==(a) %s, (c) vs CPU worst "
                  "err/sum|terms| %.2e (%d wrong)\n",
                  bn, wg, bad == 0 ? "exact" : "WRONG",
                  (std::memcmp(d[2].data(), d[0].data(), n * 4) == 0 &&
                   std::memcmp(d[3].data(), d[0].data(), n * 4) == 0 &&
                   std::memcmp(d[4].data(), d[0].data(), n * 4) == 0)
                      ? "bit-exact"
                      : "DIFFER",
                  worst, wrong);
    }
  }
}

TEST(Sm90ConsumerChainBench, DISABLED_Timings) {
  MXMOE_REQUIRE_SM90();
  int dev_id = 0, sms = 0, clock_khz = 0;
  CUDA_OK(cudaGetDevice(&dev_id));
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev_id));
  CUDA_OK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev_id));
  const Inputs in = make_inputs(2, /*same_slots=*/false);
  Dev dev;
  ASSERT_TRUE(upload(in, &dev, 16, sms));
  constexpr int kSteps = 24000;  // a multiple of 12
  std::printf("CHAIN-INFO SMs=%d clock=%d MHz steps/warpgroup=%d; dense BF16 peak = 2*BN "
              "cycles/step/SM (4096 FLOP/clk/SM)\n",
              sms, clock_khz / 1000, kSteps);
  cudaEvent_t e0, e1;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  for (int v = 0; v < 5; ++v)
    for (int bn : {64, 128, 192})
      for (int wg = 1; wg <= 2; ++wg) {
        const ChainArgs p = args_of(dev, kSteps, sms, false);
        CUDA_OK(launch_chain(v, bn, wg, p, 0));  // warm-up
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<float> ms;
        for (int rep = 0; rep < 5; ++rep) {
          CUDA_OK(cudaEventRecord(e0, 0));
          CUDA_OK(launch_chain(v, bn, wg, p, 0));
          CUDA_OK(cudaEventRecord(e1, 0));
          CUDA_OK(cudaEventSynchronize(e1));
          float t = 0.0f;
          CUDA_OK(cudaEventElapsedTime(&t, e0, e1));
          ms.push_back(t);
        }
        std::sort(ms.begin(), ms.end());
        std::vector<long long> clk(sms);
        CUDA_OK(cudaMemcpy(clk.data(), dev.clocks.get(), sms * sizeof(long long),
                           cudaMemcpyDeviceToHost));
        double mean_clk = 0.0;
        for (long long c : clk) mean_clk += static_cast<double>(c) / sms;
        const double cyc = mean_clk / (static_cast<double>(kSteps) * wg);
        const double flop = 2.0 * 64 * bn * 64 * static_cast<double>(kSteps) * wg * sms;
        const double tflops = flop / (ms[2] * 1e-3) / 1e12;  // (b): the ceiling expansion allows
        std::printf("CHAIN %s BN=%d WG=%d cycles/step=%.1f TFLOP/s=%.1f\n", kVariantName[v], bn,
                    wg, cyc, tflops);
      }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

}  // namespace
}  // namespace mxmoe::sm90::chain
