// tests/gpu/sm90_bench_grouped_gemm.cpp: timings of the SM90 grouped GEMMs at Kimi-K3 expert
// shapes (not a correctness test: test_sm90_grouped_gemm.cpp checks the numbers).
//
// DISABLED_ by default; run with
//   test_sm90_grouped_gemm --gtest_also_run_disabled_tests --gtest_filter='*Bench*'
// Layouts: EP16 (56 local experts, I 3072, one local expert per token) and TP8 x EP4 (224 local
// experts, I 384, 4 per token), latent H 3584. Weights are random bytes with scale bytes in
// [118, 126] (the prepacked order is a permutation, so random bytes are random weights either
// way; all scales <= 2^1, so the kernels get small_scales). Each timed launch follows an L2
// flush (a 256 MB memset); median of 15 CUDA-event timings.
// Printed: us, TFLOP/s over real (unpadded) pairs and its share of the 802 TFLOP/s BF16 dense
// rate, GB/s of the weights of the experts hit, and "useful": real rows / rows the token tiles
// pad to (the tile-quantization ceiling on that share).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "sm90/grouped_gemm.h"
#include "sm90/tile_heuristic.h"
#include "sm90_gemm_check.h"

namespace mxmoe::sm90 {
namespace {

// CUDA_OK, DevBuf, ChainProblem, median_us, fill_bytes, num_sms, offsets_of: sm90_gemm_check.h.
using namespace check;

// mxfp8_valued: every activation (x, and h for GEMM2) keeps 3 mantissa bits, as the w4a8
// path's MXFP8 values do (same exponents, so each 32-block stays MXFP8-representable); the MMA
// work is the same, only the operand bits that toggle differ.
void bench(const char* layout, int E, int I, int topk, int T, int tile_n = 0,
           bool mxfp8_valued = false) {
  const int H = 3584;
  std::mt19937_64 rng(T * 131 + E);
  const std::vector<int> rows = uniform_rows(rng, E, topk, T);
  const std::vector<int32_t> off = offsets_of(rows);
  const int pairs = off[E];
  int hit = 0;
  for (int e = 0; e < E; ++e) hit += rows[e] > 0;

  const size_t w13q = prepacked_packed_bytes(2 * I, H), w13s = prepacked_scale_bytes(2 * I, H);
  const size_t w2q = prepacked_packed_bytes(H, I), w2s = prepacked_scale_bytes(H, I);
  std::vector<uint8_t> hq(E * w13q), hs(E * w13s);  // w2: their first bytes (bench_chain_host)
  fill_bytes(&hq, 1, 0, 256);
  fill_bytes(&hs, 2, 118, 9);
  ChainHost host = bench_chain_host(E, I, H, T, off, std::move(hq), std::move(hs));
  std::vector<uint8_t> act(static_cast<size_t>(std::max(T, pairs)) * std::max(H, I) * 2);
  fill_bytes(&act, 3, 0, 256);
  for (size_t i = 1; i < act.size(); i += 2) act[i] = static_cast<uint8_t>(0x3C + (act[i] & 1));
  if (mxfp8_valued)  // the low byte holds the exponent's last bit and mantissa bits 6..0
    for (size_t i = 0; i < act.size(); i += 2) act[i] &= 0xF0;
  // x and h both start as act's first values: under a no-store MXMOE_SM90_WS_TUNE flag GEMM1
  // leaves h as it is, and GEMM2 then still reads finite BF16, not whatever the allocation held.
  host.x.resize(static_cast<size_t>(T) * H);
  host.h.resize(static_cast<size_t>(pairs) * I);
  memcpy(host.x.data(), act.data(), host.x.size() * 2);
  memcpy(host.h.data(), act.data(), host.h.size() * 2);
  ChainProblem prob;
  CUDA_OK(prob.init(host));
  const size_t flush_bytes = 256u << 20;
  DevBuf<uint8_t> flush(flush_bytes);
  const int sms = num_sms();

  Gemm1Params p1 = prob.gemm1(tile_n);
  // The scale bytes (118..126) are all <= 128; MXMOE_BENCH_ANY_SCALES=1 times the path that
  // tests every fragment's scales instead (as for weights with scales above 2^1).
  const bool small = std::getenv("MXMOE_BENCH_ANY_SCALES") == nullptr;
  p1.small_scales = small;
  Gemm2Params p2 = prob.gemm2(tile_n);
  p2.small_scales = small;

  CUDA_OK(launch_gemm1(p1, sms, 0));
  CUDA_OK(launch_gemm2(p2, sms, 0));
  CUDA_OK(cudaDeviceSynchronize());
  const float t1 = median_us([&] { return launch_gemm1(p1, sms, 0); }, flush.get(), flush_bytes);
  Gemm1Params p1m = p1;
  p1m.mxfp8_out = true;
  const float t1m = median_us([&] { return launch_gemm1(p1m, sms, 0); }, flush.get(), flush_bytes);
  const float t2 = median_us([&] { return launch_gemm2(p2, sms, 0); }, flush.get(), flush_bytes);
  // GEMM2 with every row stored to out (out_token: each token owns its one pair), as run_moe
  // does at EP16; only with one pair per token.
  float t2o = 0.0f;
  if (topk == 1) {
    DevBuf<int32_t> d_ot(pairs);
    DevBuf<float> d_out(static_cast<size_t>(T) * H);
    CUDA_OK(d_ot.upload(host.x_row));
    Gemm2Params p2o = p2;
    p2o.out_token = d_ot.get();
    p2o.out = d_out.get();
    p2o.out_stride = H;
    CUDA_OK(launch_gemm2(p2o, sms, 0));
    t2o = median_us([&] { return launch_gemm2(p2o, sms, 0); }, flush.get(), flush_bytes);
  }
  CUDA_OK(cudaGetLastError());
  const double f1 = 2.0 * pairs * 2 * I * H, f2 = 2.0 * pairs * H * I;
  const double b1 = static_cast<double>(hit) * (w13q + w13s),
               b2 = static_cast<double>(hit) * (w2q + w2s);
  // Tile quantization: MMA work the token tiles pad in (the warp-specialized kernel's units,
  // tile_heuristic.h ws_unit_rows, each run at ws_width; below that fixed tiles of tn).
  const int tn = tile_n != 0 ? tile_n : choose_tile_n(pairs, E);
  int64_t padded = 0;
  for (int e = 0; e < E; ++e) {
    const int r = rows[e];
    if (r == 0) continue;
    if (tn < 160) {  // the one-warpgroup kernel: fixed tiles of tn
      padded += static_cast<int64_t>(r + tn - 1) / tn * tn;
      continue;
    }
    const int sz = ws_unit_rows(r, tn), units = ws_unit_count(r, sz);
    padded += static_cast<int64_t>(units - 1) * ws_width(sz) + ws_width(r - (units - 1) * sz);
  }
  const double kBf16Dense = 802.0;  // TFLOP/s, KIMI_K3.md's in-run ceiling on this H200
  printf(
      "BENCH %-8s E=%3d I=%4d T=%5d pairs=%6d hit=%3d tile_n=%3d useful %4.1f%% | gemm1 %8.1f us "
      "%6.1f TFLOP/s (%4.1f%%) %6.0f GB/s | gemm1+mx %8.1f us | gemm2 %8.1f us %6.1f TFLOP/s "
      "(%4.1f%%) %6.0f GB/s | total %8.1f us | gemm2>out %8.1f us\n",
      layout, E, I, T, pairs, hit, tn, 100.0 * pairs / std::max<int64_t>(padded, 1), t1,
      f1 / t1 * 1e-6, f1 / t1 * 1e-4 / kBf16Dense, b1 / t1 * 1e-3, t1m, t2, f2 / t2 * 1e-6,
      f2 / t2 * 1e-4 / kBf16Dense, b2 / t2 * 1e-3, t1 + t2, t2o);
}

TEST(Sm90GroupedGemmBench, DISABLED_KimiShapes) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "SKIPPED: no CUDA device";
  for (int T : {1, 16, 64, 1024, 4096, 8192, 16384}) bench("EP16", 56, 3072, 1, T);
  for (int T : {1, 64, 8192, 16384}) bench("TP8xEP4", 224, 384, 4, T);
}

// The two prefill cases alone, for profilers (scripts/gpu_profile.sh runs ncu on them): EP16 and
// TP8xEP4 at 16384 tokens.
TEST(Sm90GroupedGemmBench, DISABLED_Prefill16384) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "SKIPPED: no CUDA device";
  bench("EP16", 56, 3072, 1, 16384);
  bench("TP8xEP4", 224, 384, 4, 16384);
}

// The warp-specialized kernel (tile_n 160, three consumer warpgroups) at the prefill sizes it
// serves (the name is kept for the scripts: two consumers, tile_n 192, were removed).
TEST(Sm90GroupedGemmBench, DISABLED_WsConsumers) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "SKIPPED: no CUDA device";
  for (int T : {8192, 16384}) bench("EP16", 56, 3072, 1, T, 160);
  for (int T : {8192, 16384}) bench("TP8xEP4", 224, 384, 4, T, 160);
  // 73 rows per expert: the one-warpgroup kernel's 128-wide tiles against three consumers.
  for (int tn : {128, 160}) {
    bench("EP16", 56, 3072, 1, 4096, tn);
    bench("TP8xEP4", 224, 384, 4, 4096, tn);
  }
}

// 18 to 55 rows per expert, where the one-warpgroup kernel's 32- and 64-wide tiles meet three
// consumers: EP16 at 1024, 2048 and 3072 tokens, TP8xEP4 at 2048.
TEST(Sm90GroupedGemmBench, DISABLED_MidRows) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "SKIPPED: no CUDA device";
  for (int tn : {32, 64, 160}) {
    for (int T : {1024, 2048, 3072}) bench("EP16", 56, 3072, 1, T, tn);
    bench("TP8xEP4", 224, 384, 4, 2048, tn);
  }
}

// What the warp-specialized kernel's epilogues cost, beside the copies and the conversion
// (MXMOE_SM90_WS_TUNE flags, all at the default skew 0; wrong results, timings only): 1024 no
// epilogue stores, 256 no activation copies, 512 no weight conversion. TP8xEP4 (K = 384, where
// GEMM2 writes the most bytes per MMA) at T = 8192 and 16384, EP16 at 16384.
TEST(Sm90GroupedGemmBench, DISABLED_EpilogueStores) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "SKIPPED: no CUDA device";
  for (const char* tune : {"2,8,0", "2,8,1024", "2,8,256", "2,8,512"}) {
    setenv("MXMOE_SM90_WS_TUNE", tune, 1);
    char tp8[32], ep16[32];
    snprintf(tp8, sizeof(tp8), "TP8[%s]", tune);
    snprintf(ep16, sizeof(ep16), "EP16[%s]", tune);
    for (int T : {8192, 16384}) bench(tp8, 224, 384, 4, T);
    bench(ep16, 56, 3072, 1, 16384);
  }
  unsetenv("MXMOE_SM90_WS_TUNE");
}

// The full layer (896 experts, I 3072, 16 per token) at T=4096, 73 rows per expert like EP16
// T=4096, where end to end w4a16 took 14% more than 16 EP16 calls predict and w4a8 did not
// (bench/NOTES.md, thirty-fourth session). Same kernels, so the GEMMs alone, with activations of
// 7 mantissa bits (w4a16's) and of 3 (w4a8's MXFP8 values): if only the second is faster, the
// board's power limit (data-dependent clocks) is the difference, not the schedule. EP16 alongside.
// About 15 GB of device weights and ~16 GB of host buffers.
TEST(Sm90GroupedGemmBench, DISABLED_FullLayerOperandBits) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "SKIPPED: no CUDA device";
  for (bool x8 : {false, true}) {
    bench(x8 ? "FULL[x8]" : "FULL", 896, 3072, 16, 4096, 0, x8);
    bench(x8 ? "EP16[x8]" : "EP16", 56, 3072, 1, 4096, 0, x8);
  }
}

// One decode case alone, for profilers (ncu -k regex:decode_gemm_kernel): TP8xEP4 at 64 tokens,
// where GEMM2 has 6 K steps per tile.
TEST(Sm90GroupedGemmBench, DISABLED_Tp8Ep4Decode64) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "SKIPPED: no CUDA device";
  bench("TP8xEP4", 224, 384, 4, 64);
}

// The warp-specialized kernel's knobs and two diagnostics (grouped_gemm_ws_shape.cuh, `tune`:
// "lag,max_stages,flags"; flags 256 = the producer copies nothing, 512 = no weight conversion:
// wrong results, timings only) at EP16 T=16384, and the one-warpgroup kernel (tile_n 128) there.
TEST(Sm90GroupedGemmBench, DISABLED_WarpSpecializedTune) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "SKIPPED: no CUDA device";
  // flags: 256 no copies, 512 no conversion (diagnostics, wrong results); 2048 no steady steps
  // (exact: the generic step everywhere); (s << 12): consumer c + 1 starts s steps after
  // consumer c (skewed epilogues; the default is kWsDefaultSkew, 0).
  for (const char* tune : {"2,8,0", "2,8,2048", "2,8,256", "2,8,512", "2,8,768"}) {
    setenv("MXMOE_SM90_WS_TUNE", tune, 1);
    char label[32];
    snprintf(label, sizeof(label), "EP16[%s]", tune);
    bench(label, 56, 3072, 1, 16384);
  }
  unsetenv("MXMOE_SM90_WS_TUNE");
  bench("EP16[one-warpgroup 128]", 56, 3072, 1, 16384, 128);
}

}  // namespace
}  // namespace mxmoe::sm90
