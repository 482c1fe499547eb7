// tests/gpu/sm90_bench_consumer_chain.cpp: a diagnostic microbenchmark of one consumer's
// per-64-K-step chain (fragment load -> FP4->BF16 expand_fragment -> 4 x wgmma m64nBNk16 -> wait)
// in isolation, over resident data (no global traffic in the timed loop). Kernels and variants:
// sm90_consumer_chain.cu (compiled by nvcc; this file is host C++).
//
// DISABLED_ by default; run with
//   test_sm90_grouped_gemm --gtest_also_run_disabled_tests --gtest_filter='*ConsumerChain*'
// DISABLED_Correctness: first, on the CPU (runs without a GPU, before the SM90 skip): the
//   expected registers two ways, which must agree bit for bit for every element of every
//   register: (1) formats.h's dequantization of the row-major MXFP4 source at the (row, k) that
//   wgmma's register A fragment puts in that register half, and (2) a host model of
//   expand_fragment's fast path on the library's prepacked words (prepack_mxfp4, place_word, the
//   2^(s-1) multiplier). Then on one CTA, 12 steps, every BN and WG: (b)'s expanded registers
//   against them (bit-exact), (a) fed with (b)'s registers against (c), (d), (e) (bit-exact:
//   same wgmmas on the same operands), and (c)'s accumulator tile against a CPU dot product of
//   the dequantized A tile (fp32 accumulation tolerance).
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
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "mxmoe/formats.h"
#include "sm90/grouped_gemm.h"    // prepack_mxfp4
#include "sm90/mxfp4_fragment.h"  // place_word, frag_scale_pos, the tile constants
#include "sm90_gemm_check.h"      // Mx4: row-major MXFP4 and its formats.h dequantization

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
constexpr int kThreads = kWarpgroup;
constexpr int kSrcK = kSlots * kStepK;  // the source matrix: slot sl = its 64-K step sl
const char* const kVariantName[5] = {"a_wgmma_only", "b_expand_only", "c_expand_wgmma_wait1",
                                     "d_expand_next_2deep", "e_lds_expand_wgmma"};

uint64_t xorshift(uint64_t* s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}
uint32_t le_word(const uint8_t* b) {
  return b[0] | b[1] << 8 | b[2] << 16 | static_cast<uint32_t>(b[3]) << 24;
}

struct Inputs {
  check::Mx4 w;             // row-major MXFP4 source [64, kSrcK]
  std::vector<uint32_t> q;  // [kSlots][128][4]: prepack_mxfp4(w), slot sl = w's 64-K step sl
  std::vector<uint32_t> s;  // [kSlots][128]: each thread's scale word (that of its row pair)
  std::vector<uint16_t> b;  // [192][64]
  std::vector<uint32_t> a;  // [128][16] random BF16x2 (timing of variant a)
};
// Random E2M1 codes and scale bytes 118..126 (2^-9..2^-1: E2M1 x scale is exact in BF16, and no
// byte is above 128, so expand_fragment takes its fast path), prepacked by the library. With
// same_slots, every 64-K step of the source is a copy of the first (variant e cycles the slots).
Inputs make_inputs(uint64_t seed, bool same_slots) {
  Inputs in;
  uint64_t st = seed * 0x9E3779B97F4A7C15ull + 7;
  check::Mx4& w = in.w;
  w.rows = kTileM;
  w.k = kSrcK;
  w.packed.resize(kTileM * kSrcK / 2);
  w.scales.resize(kTileM * kSrcK / kMxBlock);
  for (auto& v : w.packed) v = static_cast<uint8_t>(xorshift(&st) >> 13);
  for (auto& v : w.scales) v = static_cast<uint8_t>(118 + (xorshift(&st) >> 20) % 9);
  if (same_slots)
    for (int r = 0; r < kTileM; ++r)
      for (int sl = 1; sl < kSlots; ++sl) {
        uint8_t* pr = &w.packed[static_cast<size_t>(r) * kSrcK / 2];
        uint8_t* sr = &w.scales[static_cast<size_t>(r) * kSrcK / kMxBlock];
        std::copy(pr, pr + kStepK / 2, pr + sl * kStepK / 2);
        std::copy(sr, sr + kStepK / kMxBlock, sr + sl * kStepK / kMxBlock);
      }
  std::vector<uint8_t> pq(prepacked_packed_bytes(kTileM, kSrcK));
  std::vector<uint8_t> ps(prepacked_scale_bytes(kTileM, kSrcK));
  prepack_mxfp4(w.packed.data(), w.scales.data(), kTileM, kSrcK, pq.data(), ps.data());
  // One 64-row tile: fragment (kb, tid) is bytes (kb * 128 + tid) * 16, i.e. [kSlots][128][16 B].
  in.q.resize(pq.size() / 4);
  for (size_t i = 0; i < in.q.size(); ++i) in.q[i] = le_word(&pq[4 * i]);
  // The prepacked scales hold one word per row pair (8 w + g); the kernels' s_in one per thread.
  in.s.resize(kSlots * kThreads);
  for (int sl = 0; sl < kSlots; ++sl)
    for (int tid = 0; tid < kThreads; ++tid) {
      const int wi = tid / 32, g = (tid % 32) / 4;
      in.s[sl * kThreads + tid] = le_word(&ps[frag_scale_pos(16 * wi + g, 2 * sl, kSrcK)]);
    }
  in.b.resize(192 * 64);
  for (auto& v : in.b)
    v = float_to_bf16(static_cast<float>(static_cast<int>((xorshift(&st) >> 20) % 17) - 8) / 8.0f);
  in.a.resize(kThreads * 16);
  for (auto& v : in.a) {
    const uint32_t lo =
        float_to_bf16(static_cast<float>(static_cast<int>((xorshift(&st) >> 20) % 9) - 4) / 4.0f);
    const uint32_t hi =
        float_to_bf16(static_cast<float>(static_cast<int>((xorshift(&st) >> 20) % 9) - 4) / 4.0f);
    v = lo | (hi << 16);
  }
  return in;
}

// (row, k) within the 64 x 64 tile of thread tid's A register 4 j + q, half h (wgmma m64nNk16
// "A in registers", the order mxfp4_fragment.h documents): row 16 w + g + 8 (q & 1),
// k 16 j + 8 (q >> 1) + 2 t + h.
void reg_element(int tid, int reg, int h, int* row, int* k) {
  const int w = tid / 32, g = (tid % 32) / 4, t = tid % 4, j = reg / 4, q = reg % 4;
  *row = 16 * w + g + 8 * (q & 1);
  *k = 16 * j + 8 * (q >> 1) + 2 * t + h;
}

// The expected expansion of slot `slot`, from the row-major source (formats.h's E2M1 x UE8M0,
// exact in fp32): the A tile [64 rows][64 k] and each thread's 16 BF16x2 registers.
void cpu_expand(const Inputs& in, int slot, std::vector<float>* A, std::vector<uint32_t>* regs) {
  A->assign(64 * 64, 0.0f);
  regs->assign(kThreads * 16, 0);
  for (int tid = 0; tid < kThreads; ++tid)
    for (int reg = 0; reg < 16; ++reg)
      for (int h = 0; h < 2; ++h) {
        int row, k;
        reg_element(tid, reg, h, &row, &k);
        const float v = in.w.value(row, kStepK * slot + k);
        (*A)[row * 64 + k] = v;
        (*regs)[tid * 16 + reg] |= static_cast<uint32_t>(float_to_bf16(v)) << (16 * h);
      }
}

// Exact value of a finite BF16 (no fp32 subnormal arithmetic, so no FTZ / DAZ concern).
double bf16_exact(uint16_t b) {
  const int e = (b >> 7) & 0xFF, m = b & 0x7F;
  const double mag = e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 134);
  return (b & 0x8000) ? -mag : mag;
}

// expand_fragment's fast path (no scale byte above 128) on the host, from one thread's
// prepacked words and scale word: place_word's register holds each element as E2M1 x 2^-126
// (magnitude at BF16 bits 6..8, sign at 15), the multiplier is (byte * 0x00800080 + 0x3F003F00)
// (BF16 exponent field byte + 126: 2^(byte - 1) in both halves), and fma.rn.bf16x2(v, m, -0)
// is the exact product (+ -0 keeps the sign of zero). Registers 0 and 2 of word j (row r0) use
// scale byte 2 (j / 2), registers 1 and 3 (row r0 + 8) byte 2 (j / 2) + 1. Returns the number
// of halves whose product was not exact in BF16 (it must be 0).
int device_model(const uint32_t* words, uint32_t s, uint32_t* regs) {
  int inexact = 0;
  for (int j = 0; j < 4; ++j) {
    uint32_t v[4];
    place_word(words[j], v);
    for (int q = 0; q < 4; ++q) {
      const uint32_t byte = (s >> (8 * (2 * (j >> 1) + (q & 1)))) & 0xFFu;
      const uint32_t m = byte * 0x00800080u + 0x3F003F00u;
      uint32_t r = 0;
      for (int h = 0; h < 2; ++h) {
        const double p = bf16_exact(static_cast<uint16_t>(v[q] >> (16 * h))) *
                             bf16_exact(static_cast<uint16_t>(m >> (16 * h))) +
                         -0.0;
        const uint16_t bits = float_to_bf16(static_cast<float>(p));
        inexact += bf16_exact(bits) != p || std::signbit(bf16_exact(bits)) != std::signbit(p);
        r |= static_cast<uint32_t>(bits) << (16 * h);
      }
      regs[4 * j + q] = r;
    }
  }
  return inexact;
}

// The CPU-only consistency check of the expected registers (see the file comment). Returns a
// description of the first failure, or an empty string.
std::string check_cpu_model(const Inputs& in) {
  char buf[256];
  for (size_t i = 0; i < in.s.size(); ++i)
    for (int b = 0; b < 4; ++b)
      if (((in.s[i] >> (8 * b)) & 0xFFu) > 128u) return "a scale byte above 128 (no fast path)";
  for (int slot = 0; slot < kSlots; ++slot) {
    std::vector<float> A;
    std::vector<uint32_t> regs;
    cpu_expand(in, slot, &A, &regs);
    std::vector<int> seen(64 * 64, 0);
    int inexact = 0, differ = 0, first = -1;
    for (int tid = 0; tid < kThreads; ++tid) {
      uint32_t model[16];
      inexact += device_model(&in.q[(static_cast<size_t>(slot) * kThreads + tid) * 4],
                              in.s[slot * kThreads + tid], model);
      for (int reg = 0; reg < 16; ++reg) {
        const uint32_t want = regs[tid * 16 + reg];
        for (int h = 0; h < 2; ++h) {
          int row, k;
          reg_element(tid, reg, h, &row, &k);
          ++seen[row * 64 + k];
          const float v = A[row * 64 + k];
          inexact += bf16_to_float(static_cast<uint16_t>(want >> (16 * h))) != v;
        }
        if (model[reg] != want && differ++ == 0) first = tid * 16 + reg;
      }
    }
    const int covered = static_cast<int>(std::count(seen.begin(), seen.end(), 1));
    if (covered != 64 * 64 || inexact != 0 || differ != 0) {
      std::snprintf(buf, sizeof(buf),
                    "slot %d: %d of 4096 tile elements covered once, %d inexact, %d of 2048 "
                    "registers differ (first: thread %d register %d)",
                    slot, covered, inexact, differ, first / 16, first % 16);
      return buf;
    }
  }
  return "";
}

struct Dev {
  mxmoe::test::DevBuf<uint32_t> q, s, a, b;
  mxmoe::test::DevBuf<float> out;
  mxmoe::test::DevBuf<long long> clocks;
};
bool upload(const Inputs& in, Dev* d, size_t out_floats, int grid) {
  const bool allocated =
      d->q.alloc(in.q.size()) == cudaSuccess && d->s.alloc(in.s.size()) == cudaSuccess &&
      d->a.alloc(in.a.size()) == cudaSuccess && d->b.alloc(in.b.size() / 2) == cudaSuccess &&
      d->out.alloc(out_floats) == cudaSuccess && d->clocks.alloc(grid) == cudaSuccess;
  if (!allocated) return false;
  return cudaMemcpy(d->q.get(), in.q.data(), in.q.size() * 4, cudaMemcpyHostToDevice) ==
             cudaSuccess &&
         cudaMemcpy(d->s.get(), in.s.data(), in.s.size() * 4, cudaMemcpyHostToDevice) ==
             cudaSuccess &&
         cudaMemcpy(d->a.get(), in.a.data(), in.a.size() * 4, cudaMemcpyHostToDevice) ==
             cudaSuccess &&
         cudaMemcpy(d->b.get(), in.b.data(), in.b.size() * 2, cudaMemcpyHostToDevice) ==
             cudaSuccess;
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
  const Inputs in = make_inputs(1, /*same_slots=*/true);
  // CPU: formats.h's decode and the host model of expand_fragment on the prepacked fragments
  // agree bit for bit (before the skip: this part needs no GPU).
  const std::string cpu = check_cpu_model(in);
  ASSERT_TRUE(cpu.empty()) << "expected registers: formats.h decode != expand_fragment model, "
                           << cpu;
  for (int sl = 1; sl < kSlots; ++sl) {  // variant (e) reads every slot: all equal to slot 0
    const auto q0 = in.q.begin(), s0 = in.s.begin();
    ASSERT_TRUE(std::equal(q0, q0 + kThreads * 4, q0 + sl * kThreads * 4)) << "slot " << sl;
    ASSERT_TRUE(std::equal(s0, s0 + kThreads, s0 + sl * kThreads)) << "slot " << sl;
  }
  std::printf(
      "CHAIN-CPU: %d slots x 2048 registers: formats.h decode == expand_fragment model "
      "(bit-exact)\n",
      kSlots);
  MXMOE_REQUIRE_SM90();
  std::vector<float> A;
  std::vector<uint32_t> regs;
  cpu_expand(in, 0, &A, &regs);
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
            const double term =
                static_cast<double>(A[row * 64 + k]) * bf16_to_float(in.b[col * 64 + k]);
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
      std::printf(
          "CHAIN-CHECK BN=%d WG=%d: (b) regs %s, (c)(d)(e)==(a) %s, (c) vs CPU worst "
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
  std::printf(
      "CHAIN-INFO SMs=%d clock=%d MHz steps/warpgroup=%d; dense BF16 peak = 2*BN "
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
        std::printf("CHAIN %s BN=%d WG=%d cycles/step=%.1f TFLOP/s=%.1f\n", kVariantName[v], bn, wg,
                    cyc, tflops);
      }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

}  // namespace
}  // namespace mxmoe::sm90::chain
