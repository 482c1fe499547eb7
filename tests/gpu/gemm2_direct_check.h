// tests/gpu/gemm2_direct_check.h: the out_token mode of a GEMM2 launcher (launch_gemm2,
// launch_fp8_gemm2) against its plain run y0 on the same inputs (smxx/gemm2_store.cuh).
//
// About half the pair rows get a distinct out row (a shuffled token; out rows of out_stride =
// H + 4 floats). Those rows must hold y0's bits with -0 turned into +0 (what the combine's +0 + y
// gives) and leave y's row untouched; the other rows must equal y0 bit for bit; every other out
// element (rows no pair names, the 4-float gaps) must stay poisoned.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace mxmoe::sm90::check {

// with_table(p, ot) may add what the launcher needs beside out_token (per-expert flags).
template <class Params, class Launch, class WithTable>
void check_gemm2_direct(Params p, int H, int max_rows, int pairs, const std::vector<float>& y0,
                        std::mt19937_64& rng, const std::string& name, Launch launch,
                        WithTable with_table) {
  const int64_t stride = H + 4;
  const int tokens = pairs + 3;
  std::vector<int32_t> tok(tokens);
  std::iota(tok.begin(), tok.end(), 0);
  std::shuffle(tok.begin(), tok.end(), rng);
  std::vector<int32_t> ot(max_rows, -1);
  for (int r = 0; r < pairs; ++r) ot[r] = (rng() & 1) ? tok[r] : -1;
  const size_t out_n = static_cast<size_t>(tokens) * stride,
               y_n = static_cast<size_t>(max_rows) * H;
  int32_t* d_ot = nullptr;
  float* d_out = nullptr;
  auto ok = [&](cudaError_t e, const char* what) {
    EXPECT_EQ(e, cudaSuccess) << name << ": " << what << ": " << cudaGetErrorString(e);
    return e == cudaSuccess;
  };
  std::vector<float> y(y_n), out(out_n);
  const bool ran =
      ok(cudaMalloc(&d_ot, ot.size() * 4), "cudaMalloc") &&
      ok(cudaMalloc(&d_out, out_n * 4), "cudaMalloc") &&
      ok(cudaMemcpy(d_ot, ot.data(), ot.size() * 4, cudaMemcpyHostToDevice), "upload") &&
      ok(cudaMemset(d_out, 0xFF, out_n * 4), "poison out") &&
      ok(cudaMemset(p.y, 0xFF, y_n * 4), "poison y") &&
      [&] {
        p.out_token = d_ot;
        p.out = d_out;
        p.out_stride = stride;
        with_table(p, ot);
        return ok(launch(p), "launch with out_token");
      }() &&
      ok(cudaDeviceSynchronize(), "sync") &&
      ok(cudaMemcpy(y.data(), p.y, y_n * 4, cudaMemcpyDeviceToHost), "download y") &&
      ok(cudaMemcpy(out.data(), d_out, out_n * 4, cudaMemcpyDeviceToHost), "download out");
  cudaFree(d_ot);
  cudaFree(d_out);
  if (!ran) return;
  auto bits = [](float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return b;
  };
  std::vector<char> named(tokens, 0);
  int bad = 0, direct = 0, neg_zero = 0;
  for (int r = 0; r < max_rows; ++r) {
    const bool to_out = ot[r] >= 0;
    direct += to_out;
    if (to_out) named[ot[r]] = 1;
    for (int n = 0; n < H; ++n) {
      const size_t i = static_cast<size_t>(r) * H + n;
      const uint32_t ref = r < pairs ? bits(y0[i]) : 0xFFFFFFFFu;
      if (to_out) {
        neg_zero += ref == 0x80000000u;
        const uint32_t want = ref == 0x80000000u ? 0u : ref;
        const uint32_t got = bits(out[static_cast<size_t>(ot[r]) * stride + n]);
        if ((got != want || bits(y[i]) != 0xFFFFFFFFu) && ++bad <= 5)
          ADD_FAILURE() << name << ": row " << r << " -> out row " << ot[r] << " n " << n
                        << ": out bits " << got << " want " << want << ", y bits " << bits(y[i]);
      } else if (bits(y[i]) != ref && ++bad <= 5) {
        ADD_FAILURE() << name << ": y row " << r << " n " << n << " differs from the plain run";
      }
    }
  }
  for (int t = 0; t < tokens; ++t)
    for (int64_t n = named[t] ? H : 0; n < stride; ++n)
      if (bits(out[t * stride + n]) != 0xFFFFFFFFu && ++bad <= 5)
        ADD_FAILURE() << name << ": out row " << t << " element " << n << " written";
  EXPECT_EQ(bad, 0) << name;
  std::printf("[direct] %s: %d of %d rows stored to out (%d -0 elements among them)\n",
              name.c_str(), direct, pairs, neg_zero);
}

}  // namespace mxmoe::sm90::check
