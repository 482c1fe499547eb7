// tests/gpu/test_situ_device.cpp: the GPU SiTU-GLU (smxx/situ_device.cuh, every GEMM1 epilogue's)
// against the double formula and the host's formats.h situ_glu. (Compiled as CUDA.)
//
//  - situ_glu_dev over the CPU test's grid (tests/formats/test_codecs.cpp: three betas, three
//    linear betas, g in [-60, 60], u in [-120, 120]): < 2e-6 relative (docs/NUMERICS.md), and
//    exactly 0 where the double formula is 0.
//  - edges: signed zeros as the host gives them, saturation, +-inf, NaN, the sigmoid's flush.
//  - situ_glu_fragment (the epilogues' loop): both of its up-half paths (the warp's polynomial-only
//    path and the general one) and the plain loop give situ_glu_dev's bits, element by element.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "../formats/oracle.h"  // situ_double: the double formula
#include "gpu_test_util.h"
#include "mxmoe/formats.h"  // situ_glu, float_bits
#include "smxx/situ_device.cuh"

namespace mxmoe::test {
namespace {

__global__ void situ_eval_kernel(const float* g, const float* u, const float* beta,
                                 const float* lbeta, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = smxx::situ_glu_dev(g[i], u[i], smxx::situ_coeffs(beta[i], lbeta[i]));
}

// One warp per block of 32 lanes x J: each lane's accumulators d[4 J] from src (lane-major),
// its outputs v[2 J] through the fragment loop (mode 0: voting, 1: no vote) and element by
// element (mode 2).
constexpr int kJ = 20;
__global__ void situ_fragment_kernel(const float* src, float beta, float lbeta, int mode,
                                     float* out) {
  const float* d_src = src + (blockIdx.x * 32 + threadIdx.x) * 4 * kJ;
  float d[4 * kJ], v[2 * kJ];
#pragma unroll
  for (int i = 0; i < 4 * kJ; ++i) d[i] = d_src[i];
  const smxx::SituCoeffs c = smxx::situ_coeffs(beta, lbeta);
  if (mode == 0) {
    smxx::situ_glu_fragment<kJ, true>(v, d, c);
  } else if (mode == 1) {
    smxx::situ_glu_fragment<kJ, false>(v, d, c);
  } else {
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      v[2 * j] = smxx::situ_glu_dev(d[4 * j], d[4 * j + 2], c);
      v[2 * j + 1] = smxx::situ_glu_dev(d[4 * j + 1], d[4 * j + 3], c);
    }
  }
  float* o = out + (blockIdx.x * 32 + threadIdx.x) * 2 * kJ;
#pragma unroll
  for (int i = 0; i < 2 * kJ; ++i) o[i] = v[i];
}

// Evaluates situ_glu_dev on the device for every (g[i], u[i], beta[i], lbeta[i]).
void eval_on_device(const std::vector<float>& g, const std::vector<float>& u,
                    const std::vector<float>& beta, const std::vector<float>& lbeta,
                    std::vector<float>* out) {
  const int n = static_cast<int>(g.size());
  DevBuf<float> dg(g), du(u), db(beta), dl(lbeta), dout(g.size());
  ASSERT_TRUE(dg.ok() && du.ok() && db.ok() && dl.ok() && dout.ok()) << "device allocation";
  situ_eval_kernel<<<(n + 255) / 256, 256>>>(dg.get(), du.get(), db.get(), dl.get(), dout.get(), n);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(dout.download(out));
}

TEST(GpuSituDevice, AgreesWithDoubleFormulaOnTheCpuTestsGrid) {
  MXMOE_REQUIRE_SM90();
  std::vector<float> g, u, b, l;
  for (double beta : {4.0, 1.0, 7.5})
    for (double lb : {25.0, 10.0, 3.0})
      for (double gg = -60; gg <= 60; gg += 0.173)
        for (double uu = -120; uu <= 120; uu += 0.91) {
          g.push_back(static_cast<float>(gg));
          u.push_back(static_cast<float>(uu));
          b.push_back(static_cast<float>(beta));
          l.push_back(static_cast<float>(lb));
        }
  std::vector<float> got;
  eval_on_device(g, u, b, l, &got);
  ASSERT_EQ(got.size(), g.size());
  double worst = 0;
  size_t worst_i = 0, zero_mismatch = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double ref = oracle::situ_double(g[i], u[i], b[i], l[i]);
    if (ref == 0) {
      zero_mismatch += got[i] != 0.0f;
      continue;
    }
    const double rel = std::fabs(got[i] - ref) / std::fabs(ref);
    if (rel > worst) worst = rel, worst_i = i;
  }
  std::printf(
      "situ_glu_dev: %zu points, worst relative error %.3g at g %.6g u %.6g beta %g "
      "linear_beta %g\n",
      g.size(), worst, g[worst_i], u[worst_i], b[worst_i], l[worst_i]);
  EXPECT_EQ(zero_mismatch, 0u) << "nonzero where the double formula is 0";
  EXPECT_LT(worst, 2e-6) << "at g " << g[worst_i] << " u " << u[worst_i];
}

TEST(GpuSituDevice, EdgesMatchTheHost) {
  MXMOE_REQUIRE_SM90();
  const float inf = INFINITY;
  // (g, u) pairs where the host's formats.h situ_glu is the specification, bit for bit
  // (signed zeros, saturation, infinities, the sigmoid's flush) or value for value.
  const std::vector<std::pair<float, float>> cases = {
      {0.0f, 5.0f},    {-0.0f, 5.0f},  {3.0f, 0.0f},    {3.0f, -0.0f},    {-0.0f, -0.0f},
      {80.0f, 1e3f},   {80.0f, -1e3f}, {inf, 2.0f},     {2.0f, inf},      {-inf, 2.0f},
      {2.0f, -inf},    {-90.0f, 3.0f}, {-200.0f, 3.0f}, {1e30f, 1e30f},   {44.5f, 89.5f},
      {0.5999f, 2.4f}, {2.4f, 15.0f},  {-2.4f, -15.0f}, {1e-30f, 1e-30f}, {-1e-7f, 3e-7f}};
  std::vector<float> g, u, b(cases.size(), 4.0f), l(cases.size(), 25.0f);
  for (const auto& c : cases) g.push_back(c.first), u.push_back(c.second);
  std::vector<float> got;
  eval_on_device(g, u, b, l, &got);
  ASSERT_EQ(got.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const float want = situ_glu(g[i], u[i], 4.0f, 25.0f);
    if (want == 0.0f || std::isinf(want)) {
      EXPECT_EQ(float_bits(got[i]), float_bits(want)) << "g " << g[i] << " u " << u[i];
    } else {
      EXPECT_NEAR(got[i], want, 2e-6 * std::fabs(want)) << "g " << g[i] << " u " << u[i];
    }
  }
  std::vector<float> nan_out;
  eval_on_device({NAN, 1.0f}, {1.0f, NAN}, {4.0f, 4.0f}, {25.0f, 25.0f}, &nan_out);
  ASSERT_EQ(nan_out.size(), 2u);
  EXPECT_TRUE(std::isnan(nan_out[0]) && std::isnan(nan_out[1]));
}

TEST(GpuSituDevice, FragmentLoopGivesTheElementwiseBitsOnBothPaths) {
  MXMOE_REQUIRE_SM90();
  // Warp 0: every |u| small (the polynomial-only path); warp 1: one lane holds a large u (the
  // general path for the whole warp); warp 2: u exactly at the branch point's neighbourhood
  // (0.6 linear_beta) to check the vote's bound; warps 3-7: random mixes.
  constexpr int kWarps = 8;
  const float lbeta = 25.0f;
  Rng rng(77);
  std::vector<float> src(kWarps * 32 * 4 * kJ);
  for (int w = 0; w < kWarps; ++w)
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4 * kJ; ++i) {
        const bool is_up = (i & 2) != 0;
        float x = static_cast<float>(rng.normal() * (w >= 3 ? 6.0 : 3.0));
        if (is_up && w == 2) x = (rng.below(2) ? 1 : -1) * std::nextafter(15.0f, 0.0f);
        if (is_up && w == 1 && lane == 17 && i == 6) x = -40.0f;
        src[(w * 32 + lane) * 4 * kJ + i] = x;
      }
  DevBuf<float> dsrc(src), dout(kWarps * 32 * 2 * kJ);
  ASSERT_TRUE(dsrc.ok() && dout.ok());
  std::vector<float> out[3];
  for (int mode = 0; mode < 3; ++mode) {
    situ_fragment_kernel<<<kWarps, 32>>>(dsrc.get(), 4.0f, lbeta, mode, dout.get());
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(dout.download(&out[mode]));
  }
  size_t diff_vote = 0, diff_plain = 0;
  for (size_t i = 0; i < out[2].size(); ++i) {
    diff_vote += float_bits(out[0][i]) != float_bits(out[2][i]);
    diff_plain += float_bits(out[1][i]) != float_bits(out[2][i]);
  }
  EXPECT_EQ(diff_vote, 0u) << "voting fragment loop differs from situ_glu_dev";
  EXPECT_EQ(diff_plain, 0u) << "plain fragment loop differs from situ_glu_dev";
  // And against the host formula (the grid test's bar), so the comparison above is not vacuous.
  double worst = 0;
  for (int w = 0; w < kWarps; ++w)
    for (int lane = 0; lane < 32; ++lane)
      for (int j = 0; j < kJ; ++j)
        for (int h = 0; h < 2; ++h) {
          const float* d = &src[(w * 32 + lane) * 4 * kJ];
          const double ref = oracle::situ_double(d[4 * j + h], d[4 * j + 2 + h], 4.0, lbeta);
          const float got = out[0][(w * 32 + lane) * 2 * kJ + 2 * j + h];
          if (ref != 0) worst = std::max(worst, std::fabs(got - ref) / std::fabs(ref));
        }
  EXPECT_LT(worst, 2e-6);
}

}  // namespace
}  // namespace mxmoe::test
