// tests/gpu/sm90_gemm_check.h: the checked runs of the SM90 grouped GEMMs (any kernel: the tiled
// one, the decode one) against a plain CPU computation on the same inputs, shared by
// test_sm90_grouped_gemm.cpp and test_sm90_decode_gemm.cpp (moved here from the former).
//
// CPU side: row-major MXFP4 weights dequantized with formats.h, the same BF16 activations,
// fp64 accumulation rounded once to fp32, then SiTU-GLU (formats.h) and BF16 rounding or MXFP8
// quantization exactly as the reference defines them. Per-element tolerance: one rounding step
// of the output format plus the propagated fp32 accumulation error (1e-4 of the sum of |terms|);
// the first mismatches are printed, with cosine and NRMSE for every case.
// Outputs are poisoned before each launch: rows past the last pair must stay poisoned, checked
// rows must have been written. Every case runs twice (or eagerly once and then three CUDA-graph
// replays) and every run must be bit-identical to the first.
// ChainProblem (at the end): the device buffers and launch parameters of a GEMM1 -> GEMM2 chain,
// for the tests and benches that launch both GEMMs themselves.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gemm2_direct_check.h"
#include "gpu_test_util.h"
#include "mxmoe/common.h"
#include "mxmoe/formats.h"
#include "mxmoe/weight_layout.h"
#include "sm90/decode_gemm.h"
#include "sm90/grouped_gemm.h"
#include "sm90/tile_heuristic.h"

namespace mxmoe::sm90::check {

// CUDA_OK, MXMOE_REQUIRE_SM90 (the loud skip) and DevBuf: gpu_test_util.h.
using test::DevBuf;

// Median of `timed` CUDA-event timings of launch() (after 3 untimed) on the legacy stream,
// each after a write of flush_bytes at flush (the L2 flushed: the weights come from DRAM as in a
// real layer). launch() returns its launch's status; failures are gtest failures and give -1.
template <typename F>
float median_us(F launch, void* flush, size_t flush_bytes, int timed = 15) {
  return test::median_event_us([&](cudaStream_t) { return launch(); }, 0, flush, flush_bytes, 3,
                               timed);
}

// Fast host fill (xorshift) for the timing benches: bytes in [lo, lo + span).
inline void fill_bytes(std::vector<uint8_t>* v, uint64_t seed, int lo, int span) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : *v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    b = static_cast<uint8_t>(lo + (s >> 24) % span);
  }
}

inline int num_sms() {  // 0 (and a test failure) when the query fails
  int n = 0;
  const cudaError_t e = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0);
  if (e != cudaSuccess) ADD_FAILURE() << "cudaDeviceGetAttribute: " << cudaGetErrorString(e);
  return e == cudaSuccess ? n : 0;
}

// The smallest valid GEMM1 / GEMM2 launches (one expert, 64 x 64, eight rows, every pointer into
// one scratch buffer), for the argument-check tests to spoil one field at a time. init() returns
// the scratch's allocation or zeroing error for the caller's CUDA_OK.
struct TinyLaunches {
  DevBuf<uint8_t> any{1 << 16};
  DevBuf<int32_t> off{4};
  Gemm1Params p1;
  Gemm2Params p2;
  cudaError_t init() {
    if (!any.ok() || !off.ok()) return cudaErrorMemoryAllocation;
    const cudaError_t e = cudaMemset(off.get(), 0, 16);
    if (e != cudaSuccess) return e;
    p1.w_packed = any.get();
    p1.w_scales = any.get();
    p1.I = 64;
    p1.K = 64;
    p1.x = reinterpret_cast<const __nv_bfloat16*>(any.get());
    p1.x_stride = 64;
    p1.x_row = off.get();
    p1.beta = reinterpret_cast<const float*>(any.get());
    p1.linear_beta = p1.beta;
    p1.h = reinterpret_cast<__nv_bfloat16*>(any.get() + 4096);
    p1.g.num_experts = 1;
    p1.g.expert_offsets = off.get();
    p1.g.max_rows = 8;
    p2.w_packed = any.get();
    p2.w_scales = any.get();
    p2.H = 64;
    p2.I = 64;
    p2.h = reinterpret_cast<const __nv_bfloat16*>(any.get());
    p2.row_weight = reinterpret_cast<const float*>(any.get());
    p2.y = reinterpret_cast<float*>(any.get() + 8192);
    p2.g = p1.g;
    return cudaSuccess;
  }
};

// A random row-major MXFP4 matrix with scale bytes in [s_lo, s_hi].
struct Mx4 {
  int rows = 0, k = 0;
  std::vector<uint8_t> packed, scales;
  // Element (r, c), dequantized (exact in fp32).
  float value(int r, int c) const {
    return e2m1_to_float(e2m1_get(&packed[static_cast<size_t>(r) * k / 2], c)) *
           ue8m0_to_float(scales[static_cast<size_t>(r) * k / 32 + c / 32]);
  }
};
// Random bytes; scale byte (r, b) of block b of row r from scale(r, b), called in row order.
template <typename F>
Mx4 random_mx4(std::mt19937_64& rng, int rows, int k, F scale) {
  Mx4 m;
  m.rows = rows;
  m.k = k;
  m.packed.resize(static_cast<size_t>(rows) * k / 2);
  m.scales.resize(static_cast<size_t>(rows) * k / 32);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : m.packed) b = static_cast<uint8_t>(byte(rng));
  for (int r = 0; r < rows; ++r)
    for (int b = 0; b < k / 32; ++b)
      m.scales[static_cast<size_t>(r) * k / 32 + b] = static_cast<uint8_t>(scale(r, b));
  return m;
}
inline Mx4 random_mx4(std::mt19937_64& rng, int rows, int k, int s_lo, int s_hi) {
  std::uniform_int_distribution<int> sc(s_lo, s_hi);
  return random_mx4(rng, rows, k, [&](int, int) { return sc(rng); });
}
// Dequantized row r of m.
inline void dequant_row(const Mx4& m, int r, float* out) {
  for (int c = 0; c < m.k; ++c) out[c] = m.value(r, c);
}
// w13 [2I, K] from w1, w3 [I, K] by weight_layout.h's row map (bytes only).
inline Mx4 fuse(const Mx4& w1, const Mx4& w3) {
  Mx4 f;
  f.rows = 2 * w1.rows;
  f.k = w1.k;
  const size_t pb = w1.k / 2, sb = w1.k / 32;
  f.packed.resize(f.rows * pb);
  f.scales.resize(f.rows * sb);
  for (int i = 0; i < w1.rows; ++i) {
    for (int up = 0; up < 2; ++up) {
      const Mx4& src = up ? w3 : w1;
      const int r = w13_row(i, up != 0);
      memcpy(&f.packed[r * pb], &src.packed[i * pb], pb);
      memcpy(&f.scales[r * sb], &src.scales[i * sb], sb);
    }
  }
  return f;
}
inline void prepack_append(const Mx4& m, std::vector<uint8_t>* q, std::vector<uint8_t>* s) {
  const size_t q0 = q->size(), s0 = s->size();
  q->resize(q0 + prepacked_packed_bytes(m.rows, m.k));
  s->resize(s0 + prepacked_scale_bytes(m.rows, m.k));
  prepack_mxfp4(m.packed.data(), m.scales.data(), m.rows, m.k, q->data() + q0, s->data() + s0);
}

inline uint16_t random_bf16(std::mt19937_64& rng, float scale) {
  std::normal_distribution<float> nd(0.0f, scale);
  return float_to_bf16(nd(rng));
}

// One launch captured into a CUDA graph on its own stream, replayed on demand (graph replays
// must give what the eager launch gave).
struct CapturedLaunch {
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CapturedLaunch() = default;
  CapturedLaunch(const CapturedLaunch&) = delete;
  CapturedLaunch& operator=(const CapturedLaunch&) = delete;
  ~CapturedLaunch() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (stream) cudaStreamDestroy(stream);
  }
  template <typename F>
  cudaError_t capture(F launch) {
    cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) return e;
    const cudaError_t launched = launch(stream);
    e = cudaStreamEndCapture(stream, &graph);
    if (launched != cudaSuccess) return launched;
    if (e != cudaSuccess) return e;
    return cudaGraphInstantiate(&exec, graph, 0);
  }
  cudaError_t replay() {
    const cudaError_t e = cudaGraphLaunch(exec, stream);
    return e != cudaSuccess ? e : cudaStreamSynchronize(stream);
  }
};

// Accumulates the comparison of one output element and reports the first mismatches.
struct Compare {
  std::string name;
  double dot = 0, ref2 = 0, got2 = 0, diff2 = 0, max_abs = 0;
  int64_t n = 0, bad = 0, inexact = 0;
  void add(double got, double ref, double tol, const std::string& where) {
    ++n;
    if (!(std::fabs(got - ref) <= tol)) {  // NaN fails
      if (++bad <= 8) {
        printf("  [%s] mismatch at %s: gpu %.9g ref %.9g (tol %.3g)\n", name.c_str(), where.c_str(),
               got, ref, tol);
      }
    }
    if (got != ref) ++inexact;
    dot += got * ref;
    ref2 += ref * ref;
    got2 += got * got;
    diff2 += (got - ref) * (got - ref);
    max_abs = std::max(max_abs, std::fabs(got - ref));
  }
  double cosine() const { return (ref2 == 0 && got2 == 0) ? 1.0 : dot / std::sqrt(ref2 * got2); }
  double nrmse() const { return ref2 == 0 ? std::sqrt(diff2) : std::sqrt(diff2 / ref2); }
  void report_and_check() const {
    printf(
        "  [%s] %lld elements: cosine %.9f  NRMSE %.3e  max|diff| %.3g  not bit-equal %lld "
        "(%.4f%%)  out of tolerance %lld\n",
        name.c_str(), (long long)n, cosine(), nrmse(), max_abs, (long long)inexact,
        n ? 100.0 * inexact / n : 0.0, (long long)bad);
    EXPECT_GT(n, 0) << name;
    EXPECT_EQ(bad, 0) << name;
    EXPECT_GE(cosine(), 0.99999) << name;
    EXPECT_LE(nrmse(), 0.005) << name;
  }
};

// Sorted-pair problem: expert e owns rows [off[e], off[e+1]).
inline std::vector<int32_t> offsets_of(const std::vector<int>& rows) {
  std::vector<int32_t> off(rows.size() + 1, 0);
  for (size_t e = 0; e < rows.size(); ++e) off[e + 1] = off[e] + rows[e];
  return off;
}
// The timing benches' routing: each of T tokens picks `topk` distinct experts of E uniformly;
// rows per expert.
inline std::vector<int> uniform_rows(std::mt19937_64& rng, int E, int topk, int T) {
  std::vector<int> rows(E, 0), perm(E);
  for (int t = 0; t < T; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    for (int j = 0; j < topk; ++j) {
      std::uniform_int_distribution<int> d(j, E - 1);
      std::swap(perm[j], perm[d(rng)]);
      ++rows[perm[j]];
    }
  }
  return rows;
}
// Up to `limit` pair rows of each expert (all when limit <= 0), always its first and last.
inline std::vector<int> sample_rows(std::mt19937_64& rng, int begin, int count, int limit) {
  std::vector<int> r(count);
  std::iota(r.begin(), r.end(), begin);
  if (limit > 0 && count > limit) {
    std::shuffle(r.begin() + 1, r.end() - 1, rng);
    r.resize(limit - 1);
    r.push_back(begin + count - 1);
  }
  return r;
}

// The grouping known before the wait (sm90/decode_gemm.h, DecodeSpec), for the cases below: the
// top-k ids their offsets are the grouping of (GroupedProblem::route_ids), rows[e] ids of local
// expert e (global id kSpecStart + e) and `extra` ids that no local expert owns (-1, 0 and ids
// just outside the local range or far beyond it), shuffled by a generator of its own, so that a
// case's weights and activations are the same with and without it.
constexpr int kSpecStart = 5;
inline std::vector<int32_t> spec_ids_of(const std::vector<int>& rows, int extra, uint64_t seed) {
  std::vector<int32_t> ids;
  for (size_t e = 0; e < rows.size(); ++e)
    ids.insert(ids.end(), rows[e], kSpecStart + static_cast<int32_t>(e));
  const int32_t others[] = {-1, kSpecStart - 1, kSpecStart + static_cast<int32_t>(rows.size()),
                            INT32_MAX, 0};
  for (int i = 0; i < extra; ++i) ids.push_back(others[i % 5]);
  std::mt19937_64 rng(seed ^ 0x5bec1d5ull);
  std::shuffle(ids.begin(), ids.end(), rng);
  return ids;
}
// A case's speculation: hands the ids to the problem and sets the process's mode (the mode it
// found again when it goes out of scope, also on a failed assertion's early return). Mode 0:
// nothing (the runs take the process's default).
struct SpecCase {
  DevBuf<int32_t> ids;
  int mode;
  int saved = decode_spec();
  SpecCase(int mode_, const std::vector<int>& rows, int extra, uint64_t seed, GroupedProblem* g)
      : mode(mode_) {
    if (mode == 0) return;
    const std::vector<int32_t> v = spec_ids_of(rows, extra, seed);
    EXPECT_EQ(ids.upload(v), cudaSuccess) << "spec ids";
    g->route_ids = ids.get();
    g->route_pairs = static_cast<int>(v.size());
    g->route_expert_start = kSpecStart;
  }
  ~SpecCase() { decode_set_spec(saved); }
  // Run 0 without speculation, the others with it: the runs' bit identity is the check.
  void before_run(int run) const {
    if (mode != 0) decode_set_spec(run == 0 ? 0 : mode);
  }
};

// A case's balanced tile stride (decode_set_balance): run 0 without, the others with it on
// every GEMM, so the runs' bit identity checks that balancing moves tiles between clusters
// without changing them; the process's setting comes back when it goes out of scope. false:
// nothing switched (the runs take the process's setting).
struct BalanceCase {
  bool on;
  int saved = decode_balance();
  explicit BalanceCase(bool on_) : on(on_) {}
  ~BalanceCase() { decode_set_balance(saved); }
  void before_run(int run) const {
    if (on) decode_set_balance(run != 0 ? kDecodeBalanceAlways : kDecodeBalanceOff);
  }
};

// ---------------------------------------------------------------------------------------------
struct Gemm1Case {
  std::vector<int> rows;  // per expert
  int I = 128, K = 256;
  bool mxfp8_out = false;
  bool per_expert_beta = false;
  int tile_n = 0;
  int kernel = kGemmAuto;  // GroupedProblem::kernel
  int split_k = 0;         // GroupedProblem::split_k
  bool graph = false;      // runs 2..4 replay one captured CUDA graph
  int runs = 0;            // runs compared bit for bit (0: 2, or 4 with graph)
  int sample = 0;          // checked pairs per expert (0 = all)
  int s_lo = 120, s_hi = 130;
  uint64_t seed = 1;
  int spec = 0;          // DecodeSpec mode of runs 1.. (run 0 runs without; SpecCase)
  bool balance = false;  // runs 1.. with the balanced tile stride (BalanceCase)
};

inline void run_gemm1_case(const Gemm1Case& c) {
  std::mt19937_64 rng(c.seed);
  const int E = static_cast<int>(c.rows.size()), I = c.I, K = c.K;
  const std::vector<int32_t> off = offsets_of(c.rows);
  const int pairs = off[E];
  const int max_rows = pairs + 7;            // slack rows that must stay untouched
  const int T = std::max(1, pairs / 3 + 1);  // tokens; pairs gather them through x_row
  const int64_t x_stride = K + 40;           // a non-contiguous view

  std::vector<Mx4> w13(E);
  std::vector<uint8_t> wq, ws;
  for (int e = 0; e < E; ++e) {
    const Mx4 w1 = random_mx4(rng, I, K, c.s_lo, c.s_hi),
              w3 = random_mx4(rng, I, K, c.s_lo, c.s_hi);
    w13[e] = fuse(w1, w3);
    prepack_append(w13[e], &wq, &ws);
  }
  std::vector<uint16_t> x(static_cast<size_t>(T) * x_stride);
  for (auto& v : x) v = random_bf16(rng, 0.05f);
  std::vector<int32_t> x_row(max_rows, 0);
  std::uniform_int_distribution<int> tok(0, T - 1);
  for (int p = 0; p < pairs; ++p) x_row[p] = tok(rng);
  std::vector<float> beta(E, 4.0f), lbeta(E, 25.0f);
  if (c.per_expert_beta) {
    std::uniform_real_distribution<float> b(1.5f, 6.0f), lb(5.0f, 40.0f);
    for (int e = 0; e < E; ++e) beta[e] = b(rng), lbeta[e] = lb(rng);
  }

  DevBuf<uint8_t> d_wq(wq.size()), d_ws(ws.size());
  DevBuf<uint16_t> d_x(x.size()), d_h(static_cast<size_t>(max_rows) * I);
  DevBuf<int32_t> d_row(x_row.size()), d_off(off.size());
  DevBuf<float> d_beta(E), d_lbeta(E);
  CUDA_OK(d_wq.upload(wq));
  CUDA_OK(d_ws.upload(ws));
  CUDA_OK(d_x.upload(x));
  CUDA_OK(d_row.upload(x_row));
  CUDA_OK(d_off.upload(off));
  CUDA_OK(d_beta.upload(beta));
  CUDA_OK(d_lbeta.upload(lbeta));

  Gemm1Params p;
  p.w_packed = d_wq.get();
  p.w_scales = d_ws.get();
  p.I = I;
  p.K = K;
  p.x = reinterpret_cast<const __nv_bfloat16*>(d_x.get());
  p.x_stride = x_stride;
  p.x_row = d_row.get();
  p.beta = d_beta.get();
  p.linear_beta = d_lbeta.get();
  p.mxfp8_out = c.mxfp8_out;
  p.small_scales = mxfp4_scales_small(ws.data(), ws.size());  // the fast path when it holds
  p.h = reinterpret_cast<__nv_bfloat16*>(d_h.get());
  p.g.num_experts = E;
  p.g.expert_offsets = d_off.get();
  p.g.max_rows = max_rows;
  p.g.tile_n = c.tile_n;
  p.g.kernel = c.kernel;
  p.g.split_k = c.split_k;
  const SpecCase spec(c.spec, c.rows, max_rows - pairs, c.seed, &p.g);
  const BalanceCase balance(c.balance);

  const int runs = c.runs > 0 ? c.runs : c.graph ? 4 : 2;
  std::vector<std::vector<uint16_t>> h(runs);
  CapturedLaunch graph;
  spec.before_run(1);
  balance.before_run(1);
  if (c.graph)
    CUDA_OK(graph.capture([&](cudaStream_t s) { return launch_gemm1(p, num_sms(), s); }));
  for (int run = 0; run < runs; ++run) {
    CUDA_OK(cudaMemset(d_h.get(), 0xFF, d_h.size() * 2));  // poison: BF16 NaN
    CUDA_OK(cudaDeviceSynchronize());
    spec.before_run(run);
    balance.before_run(run);
    CUDA_OK(run > 0 && c.graph ? graph.replay() : launch_gemm1(p, num_sms(), 0));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(d_h.download(&h[run]));
  }
  for (int run = 1; run < runs; ++run) {
    EXPECT_EQ(0, memcmp(h[0].data(), h[run].data(), h[0].size() * 2))
        << "run " << run << " differs";
  }
  for (size_t i = static_cast<size_t>(pairs) * I; i < h[0].size(); ++i) {
    ASSERT_EQ(h[0][i], 0xFFFF) << "row past the last pair written: element " << i;
  }

  char name[200];
  snprintf(name, sizeof(name),
           "gemm1 I=%d K=%d E=%d pairs=%d tile_n=%d %s%s kernel=%d split=%d%s spec=%d%s", I, K, E,
           pairs, c.tile_n != 0 ? c.tile_n : choose_tile_n(max_rows, E),
           c.mxfp8_out ? "mxfp8" : "bf16", c.per_expert_beta ? " per-expert-beta" : "", c.kernel,
           c.split_k, c.graph ? " graph" : "", c.spec, c.balance ? " balance" : "");
  Compare cmp{name};
  std::vector<float> wd(static_cast<size_t>(2) * I * K), xf(K);
  std::vector<double> gate(I), up(I), gsum(I), usum(I);
  std::vector<float> s(I);
  for (int e = 0; e < E; ++e) {
    if (c.rows[e] == 0) continue;
    for (int r = 0; r < 2 * I; ++r) dequant_row(w13[e], r, &wd[static_cast<size_t>(r) * K]);
    for (int prow : sample_rows(rng, off[e], c.rows[e], c.sample)) {
      const uint16_t* xr = &x[static_cast<size_t>(x_row[prow]) * x_stride];
      for (int k = 0; k < K; ++k) xf[k] = bf16_to_float(xr[k]);
      for (int i = 0; i < I; ++i) {
        const float* wg = &wd[static_cast<size_t>(w13_row(i, false)) * K];
        const float* wu = &wd[static_cast<size_t>(w13_row(i, true)) * K];
        double sg = 0, su = 0, ag = 0, au = 0;
        for (int k = 0; k < K; ++k) {
          sg += static_cast<double>(wg[k]) * xf[k];
          su += static_cast<double>(wu[k]) * xf[k];
          ag += std::fabs(static_cast<double>(wg[k]) * xf[k]);
          au += std::fabs(static_cast<double>(wu[k]) * xf[k]);
        }
        gate[i] = static_cast<float>(sg);
        up[i] = static_cast<float>(su);
        gsum[i] = ag;
        usum[i] = au;
        s[i] = situ_glu(static_cast<float>(sg), static_cast<float>(su), beta[e], lbeta[e]);
      }
      for (int blk = 0; blk < I / 32; ++blk) {
        float amax = 0;
        for (int i = 32 * blk; i < 32 * blk + 32; ++i) amax = std::max(amax, std::fabs(s[i]));
        const int E8 = mx_scale_exponent(amax, kE4M3Max);
        for (int i = 32 * blk; i < 32 * blk + 32; ++i) {
          double ref, step;
          if (c.mxfp8_out) {
            ref = ldexp(e4m3_to_float(float_to_e4m3(ldexpf(s[i], -E8))), E8);
            // one E4M3 step at this value, or a subnormal step of a (possibly flipped) scale
            step = std::fabs(ref) * 0.125 + ldexp(1.0, E8 + 1 - 9);
          } else {
            ref = round_bf16(s[i]);
            step = std::fabs(ref) * (1.0 / 128) + 1e-30;
          }
          const float g0 = gate[i], u0 = up[i], eg = 1e-4f * gsum[i], eu = 1e-4f * usum[i];
          const double prop = std::fabs(situ_glu(g0 + eg, u0, beta[e], lbeta[e]) -
                                        situ_glu(g0 - eg, u0, beta[e], lbeta[e])) +
                              std::fabs(situ_glu(g0, u0 + eu, beta[e], lbeta[e]) -
                                        situ_glu(g0, u0 - eu, beta[e], lbeta[e]));
          const double got = bf16_to_float(h[0][static_cast<size_t>(prow) * I + i]);
          cmp.add(got, ref, step + 2 * prop,
                  "pair " + std::to_string(prow) + " (expert " + std::to_string(e) + ") i " +
                      std::to_string(i));
        }
      }
    }
  }
  cmp.report_and_check();
  if (c.mxfp8_out) {
    EXPECT_LE(cmp.inexact, cmp.n / 100) << "more than 1% of E4M3 codes differ from the CPU's";
  }
}

// ---------------------------------------------------------------------------------------------
struct Gemm2Case {
  std::vector<int> rows;
  int H = 128, I = 256;
  int tile_n = 0;
  int kernel = kGemmAuto;
  int split_k = 0;
  bool graph = false;
  int sample = 0;
  int s_lo = 120, s_hi = 130;
  uint64_t seed = 2;
  bool direct = true;    // also run with an out_token table (check_gemm2_direct)
  int scale_offset = 0;  // bytes: the scales at d_ws + scale_offset (4: not 16-byte aligned)
  int spec = 0;          // as Gemm1Case::spec
  bool balance = false;  // as Gemm1Case::balance
};

inline void run_gemm2_case(const Gemm2Case& c) {
  std::mt19937_64 rng(c.seed);
  const int E = static_cast<int>(c.rows.size()), H = c.H, I = c.I;
  const std::vector<int32_t> off = offsets_of(c.rows);
  const int pairs = off[E];
  const int max_rows = pairs + 5;

  std::vector<Mx4> w2(E);
  std::vector<uint8_t> wq, ws;
  for (int e = 0; e < E; ++e) {
    w2[e] = random_mx4(rng, H, I, c.s_lo, c.s_hi);
    prepack_append(w2[e], &wq, &ws);
  }
  std::vector<uint16_t> h(static_cast<size_t>(max_rows) * I);
  for (auto& v : h) v = random_bf16(rng, 1.0f);
  std::vector<float> rw(max_rows);
  std::uniform_real_distribution<float> wdist(0.01f, 1.0f);
  for (auto& v : rw) v = wdist(rng);
  // Rows 0 and 1 all zero with weights of both signs: one of them gives -0 (the direct mode's
  // corner: out must get +0 there).
  if (pairs >= 2) {
    std::fill(h.begin(), h.begin() + 2 * static_cast<size_t>(I), uint16_t{0});
    rw[0] = -0.5f;
  }

  DevBuf<uint8_t> d_wq(wq.size()), d_ws(ws.size() + c.scale_offset);
  DevBuf<uint16_t> d_h(h.size());
  DevBuf<float> d_rw(rw.size()), d_y(static_cast<size_t>(max_rows) * H);
  DevBuf<int32_t> d_off(off.size());
  CUDA_OK(d_wq.upload(wq));
  CUDA_OK(cudaMemcpy(d_ws.get() + c.scale_offset, ws.data(), ws.size(), cudaMemcpyHostToDevice));
  CUDA_OK(d_h.upload(h));
  CUDA_OK(d_rw.upload(rw));
  CUDA_OK(d_off.upload(off));

  Gemm2Params p;
  p.w_packed = d_wq.get();
  p.w_scales = d_ws.get() + c.scale_offset;
  p.H = H;
  p.I = I;
  p.h = reinterpret_cast<const __nv_bfloat16*>(d_h.get());
  p.row_weight = d_rw.get();
  p.y = d_y.get();
  p.small_scales = mxfp4_scales_small(ws.data(), ws.size());
  p.g.num_experts = E;
  p.g.expert_offsets = d_off.get();
  p.g.max_rows = max_rows;
  p.g.tile_n = c.tile_n;
  p.g.kernel = c.kernel;
  p.g.split_k = c.split_k;
  const SpecCase spec(c.spec, c.rows, max_rows - pairs, c.seed, &p.g);
  const BalanceCase balance(c.balance);

  const int runs = c.graph ? 4 : 2;
  std::vector<std::vector<float>> y(runs);
  CapturedLaunch graph;
  spec.before_run(1);
  balance.before_run(1);
  if (c.graph)
    CUDA_OK(graph.capture([&](cudaStream_t s) { return launch_gemm2(p, num_sms(), s); }));
  for (int run = 0; run < runs; ++run) {
    CUDA_OK(cudaMemset(d_y.get(), 0xFF, d_y.size() * 4));  // poison: fp32 NaN
    CUDA_OK(cudaDeviceSynchronize());
    spec.before_run(run);
    balance.before_run(run);
    CUDA_OK(run > 0 && c.graph ? graph.replay() : launch_gemm2(p, num_sms(), 0));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(d_y.download(&y[run]));
  }
  for (int run = 1; run < runs; ++run) {
    EXPECT_EQ(0, memcmp(y[0].data(), y[run].data(), y[0].size() * 4))
        << "run " << run << " differs";
  }
  for (size_t i = static_cast<size_t>(pairs) * H; i < y[0].size(); ++i) {
    uint32_t bits;
    memcpy(&bits, &y[0][i], 4);
    ASSERT_EQ(bits, 0xFFFFFFFFu) << "row past the last pair written: element " << i;
  }

  char name[180];
  snprintf(name, sizeof(name),
           "gemm2 H=%d I=%d E=%d pairs=%d tile_n=%d kernel=%d split=%d%s spec=%d%s", H, I, E, pairs,
           c.tile_n != 0 ? c.tile_n : choose_tile_n(max_rows, E), c.kernel, c.split_k,
           c.graph ? " graph" : "", c.spec, c.balance ? " balance" : "");
  Compare cmp{name};
  std::vector<float> wd(static_cast<size_t>(H) * I), hf(I);
  for (int e = 0; e < E; ++e) {
    if (c.rows[e] == 0) continue;
    for (int r = 0; r < H; ++r) dequant_row(w2[e], r, &wd[static_cast<size_t>(r) * I]);
    for (int prow : sample_rows(rng, off[e], c.rows[e], c.sample)) {
      for (int k = 0; k < I; ++k) hf[k] = bf16_to_float(h[static_cast<size_t>(prow) * I + k]);
      for (int n = 0; n < H; ++n) {
        const float* wr = &wd[static_cast<size_t>(n) * I];
        double sum = 0, asum = 0;
        for (int k = 0; k < I; ++k) {
          sum += static_cast<double>(wr[k]) * hf[k];
          asum += std::fabs(static_cast<double>(wr[k]) * hf[k]);
        }
        const double ref = rw[prow] * static_cast<float>(sum);
        const double tol = 1e-4 * asum * std::fabs(rw[prow]) + 1e-6 * std::fabs(ref);
        cmp.add(y[0][static_cast<size_t>(prow) * H + n], ref, tol,
                "pair " + std::to_string(prow) + " (expert " + std::to_string(e) + ") n " +
                    std::to_string(n));
      }
    }
  }
  cmp.report_and_check();
  if (c.direct) {
    // The grouping's per-expert flags (odd seeds: none, every tile takes the out-capable path).
    DevBuf<int32_t> d_has(E);
    auto with_flags = [&](Gemm2Params& q, const std::vector<int32_t>& ot) {
      std::vector<int32_t> has(E, 0);
      for (int e = 0; e < E; ++e)
        for (int r = off[e]; r < off[e + 1]; ++r) has[e] |= ot[r] >= 0;
      if (d_has.upload(has) == cudaSuccess && (c.seed & 1) == 0) q.expert_has_out = d_has.get();
    };
    check_gemm2_direct(
        p, H, max_rows, pairs, y[0], rng, name,
        [](const Gemm2Params& q) { return launch_gemm2(q, num_sms(), 0); }, with_flags);
  }
}

// ---------------------------------------------------------------------------------------------
// A GEMM1 -> GEMM2 chain on the device, for the tests and benches that launch both GEMMs
// themselves (the case runners above build one GEMM each, with their own twists: x_stride,
// scale offsets). ChainHost is the host data; ChainProblem uploads it once and hands out the
// filled launch parameters, so the buffers and the field-by-field set-up are written once.
struct ChainHost {
  int E = 0, I = 0;
  int K = 0;         // GEMM1's depth: x [T, K] (rows K apart), w13 [2I, K]
  int H = 0;         // GEMM2's width: w2 [H, I], y [max_rows, H]
  int max_rows = 0;  // GroupedProblem::max_rows: the rows of x_row, row_weight, h and y
  std::vector<uint8_t> w13q, w13s, w2q, w2s;  // E experts each, prepacked (prepack_append)
  std::vector<uint16_t> x;                    // BF16 tokens
  std::vector<uint16_t> h;          // optional: h's first values before any GEMM1 (else left unset)
  std::vector<int32_t> x_row, off;  // [max_rows] token of each pair row; [E + 1]
  std::vector<float> beta, linear_beta;  // [E]
  std::vector<float> row_weight;         // [max_rows]
};

struct ChainProblem {
  int E = 0, I = 0, K = 0, H = 0, max_rows = 0;
  DevBuf<uint8_t> w13q, w13s, w2q, w2s;
  DevBuf<uint16_t> x, h;
  DevBuf<int32_t> x_row, off;
  DevBuf<float> beta, linear_beta, row_weight, y;

  // Checks the host sizes against the shape (a mismatch is a test failure, named) and allocates
  // and uploads everything. Returns the first error, an allocation's included, for the caller's
  // CUDA_OK: a problem that did not reach the device must not be launched or timed.
  cudaError_t init(const ChainHost& c) {
    E = c.E, I = c.I, K = c.K, H = c.H, max_rows = c.max_rows;
    const size_t rows = static_cast<size_t>(max_rows);
    auto need = [](bool ok, const char* what) {
      if (!ok) ADD_FAILURE() << "ChainHost: " << what;
      return ok;
    };
    const bool sizes =
        need(c.w13q.size() == E * prepacked_packed_bytes(2 * I, K) &&
                 c.w13s.size() == E * prepacked_scale_bytes(2 * I, K),
             "w13 is not E prepacked [2I, K]") &&
        need(c.w2q.size() == E * prepacked_packed_bytes(H, I) &&
                 c.w2s.size() == E * prepacked_scale_bytes(H, I),
             "w2 is not E prepacked [H, I]") &&
        need(K > 0 && c.x.size() % K == 0, "x is not rows of K") &&
        need(c.h.size() <= rows * I, "h is longer than max_rows x I") &&
        need(c.x_row.size() == rows && c.row_weight.size() == rows,
             "x_row or row_weight is not max_rows long") &&
        need(c.off.size() == static_cast<size_t>(E) + 1, "off is not E + 1 long") &&
        need(c.beta.size() == static_cast<size_t>(E) && c.linear_beta.size() == c.beta.size(),
             "beta or linear_beta is not E long");
    if (!sizes) return cudaErrorInvalidValue;
    if (const cudaError_t e = h.alloc(rows * I); e != cudaSuccess) return e;
    if (const cudaError_t e = y.alloc(rows * H); e != cudaSuccess) return e;
    cudaError_t e = cudaSuccess;
    auto up = [&e](auto& buf, const auto& v) {
      if (e == cudaSuccess) e = buf.upload(v);
    };
    up(w13q, c.w13q);
    up(w13s, c.w13s);
    up(w2q, c.w2q);
    up(w2s, c.w2s);
    up(x, c.x);
    up(h, c.h);
    up(x_row, c.x_row);
    up(off, c.off);
    up(beta, c.beta);
    up(linear_beta, c.linear_beta);
    up(row_weight, c.row_weight);
    return e;
  }
  GroupedProblem grouping(int tile_n) const {
    GroupedProblem g;
    g.num_experts = E;
    g.expert_offsets = off.get();
    g.max_rows = max_rows;
    g.tile_n = tile_n;
    return g;
  }
  // x -> h; the rest (mxfp8_out, small_scales, h_ready, g.kernel, g.split_k) at its defaults.
  Gemm1Params gemm1(int tile_n) const {
    Gemm1Params p;
    p.w_packed = w13q.get();
    p.w_scales = w13s.get();
    p.I = I;
    p.K = K;
    p.x = reinterpret_cast<const __nv_bfloat16*>(x.get());
    p.x_stride = K;
    p.x_row = x_row.get();
    p.beta = beta.get();
    p.linear_beta = linear_beta.get();
    p.h = reinterpret_cast<__nv_bfloat16*>(h.get());
    p.g = grouping(tile_n);
    return p;
  }
  // h -> y; no out_token, small_scales false.
  Gemm2Params gemm2(int tile_n) const {
    Gemm2Params p;
    p.w_packed = w2q.get();
    p.w_scales = w2s.get();
    p.H = H;
    p.I = I;
    p.h = reinterpret_cast<const __nv_bfloat16*>(h.get());
    p.row_weight = row_weight.get();
    p.y = y.get();
    p.g = grouping(tile_n);
    return p;
  }
};

// The timing benches' chain (sm90_bench_grouped_gemm.cpp, test_sm90_decode_gemm.cpp), H = K:
// the caller's random w13 bytes, and GEMM2's w2 their first bytes (w13 is twice as large; any
// bytes are weights); pair p reads token p % T; beta 4, linear_beta 25, row weights 1; exactly
// the pairs' rows (no slack). x and h stay the caller's to fill.
inline ChainHost bench_chain_host(int E, int I, int K, int T, const std::vector<int32_t>& off,
                                  std::vector<uint8_t> w13q, std::vector<uint8_t> w13s) {
  ChainHost c;
  c.E = E, c.I = I, c.K = K, c.H = K;
  c.max_rows = off[E];
  // min: too few w13 bytes then fail init's size check instead of being read past.
  const size_t w2q = std::min(w13q.size(), E * prepacked_packed_bytes(K, I));
  const size_t w2s = std::min(w13s.size(), E * prepacked_scale_bytes(K, I));
  c.w2q.assign(w13q.begin(), w13q.begin() + w2q);
  c.w2s.assign(w13s.begin(), w13s.begin() + w2s);
  c.w13q = std::move(w13q);
  c.w13s = std::move(w13s);
  c.x_row.resize(c.max_rows);
  for (int p = 0; p < c.max_rows; ++p) c.x_row[p] = p % T;
  c.off = off;
  c.beta.assign(E, 4.0f);
  c.linear_beta.assign(E, 25.0f);
  c.row_weight.assign(c.max_rows, 1.0f);
  return c;
}

}  // namespace mxmoe::sm90::check
