// tests/gpu/test_sm90_grouped_gemm.cpp: the SM90 grouped MoE GEMMs (src/cuda/sm90/) against a
// plain CPU computation on the same inputs.
//
// CPU side: row-major MXFP4 weights dequantized with formats.h, the same BF16 activations,
// fp64 accumulation rounded once to fp32, then SiTU-GLU (formats.h) and BF16 rounding or MXFP8
// quantization exactly as the reference defines them. Per-element tolerance: one rounding step
// of the output format plus the propagated fp32 accumulation error (1e-4 of the sum of |terms|);
// the first mismatches are printed, with cosine and NRMSE for every case.
// Outputs are poisoned before each launch: rows past the last pair must stay poisoned, checked
// rows must have been written. Every case runs twice and must be bit-identical.
// The GPU cases skip loudly without an SM90 device; the prepack round trip runs anywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "mxmoe/common.h"
#include "mxmoe/formats.h"
#include "mxmoe/weight_layout.h"
#include "sm90/grouped_gemm.h"
#include "sm90/mxfp4_fragment.h"
#include "sm90/tile_heuristic.h"
#include "sm90_gemm_check.h"

namespace mxmoe::sm90 {
namespace {

// Mx4 and the case runners: sm90_gemm_check.h (shared with the decode tests); CUDA_OK,
// MXMOE_REQUIRE_SM90 and DevBuf: gpu_test_util.h.
using namespace check;

// ---------------------------------------------------------------------------------------------
TEST(Sm90Prepack, RoundTripIsBitExact) {
  std::mt19937_64 rng(7);
  for (auto [rows, k] : {std::pair{64, 64}, {128, 192}, {192, 3584}}) {
    const Mx4 m = random_mx4(rng, rows, k, 0, 254);
    std::vector<uint8_t> q(prepacked_packed_bytes(rows, k)), s(prepacked_scale_bytes(rows, k));
    ASSERT_EQ(q.size(), m.packed.size());
    ASSERT_EQ(s.size(), m.scales.size());
    prepack_mxfp4(m.packed.data(), m.scales.data(), rows, k, q.data(), s.data());
    EXPECT_NE(q, m.packed) << "prepack should permute";
    std::vector<uint8_t> bq(q.size()), bs(s.size());
    unprepack_mxfp4(q.data(), s.data(), rows, k, bq.data(), bs.data());
    EXPECT_EQ(bq, m.packed) << rows << "x" << k;
    EXPECT_EQ(bs, m.scales) << rows << "x" << k;
  }
}

TEST(Sm90Prepack, FragmentOrderOfOneThread) {
  // Thread 37 (warp 1, g 1, t 1) of tile (0, 0): register 0 of k16 step 0 holds row 17,
  // k 2..3. Register 0's elements keep their bits where the BF16 pair wants them: the even
  // element's mantissa, exponent and sign at word bits 6, 7, 8, 15, the odd one's at 22, 23,
  // 24, 31.
  const int rows = 64, k = 64;
  std::vector<uint8_t> packed(rows * k / 2, 0), scales(rows * k / 32, 127);
  packed[17 * 32 + 1] = 0x5A;  // row 17: k 2 = 0xA (exponent bit 1, sign), k 3 = 0x5
  scales[25 * 2 + 1] = 200;    // row 25 (= 17 + 8), block 1
  std::vector<uint8_t> q(packed.size()), s(scales.size());
  prepack_mxfp4(packed.data(), scales.data(), rows, k, q.data(), s.data());
  const uint32_t word = q[37 * 16] | q[37 * 16 + 1] << 8 | q[37 * 16 + 2] << 16 |
                        static_cast<uint32_t>(q[37 * 16 + 3]) << 24;
  EXPECT_EQ(word, (1u << 7) | (1u << 15) | (1u << 22) | (1u << 24));
  EXPECT_EQ(s[(8 * 1 + 1) * 4 + 2 * 1 + 1], 200);
}

// What the device's expand_fragment computes before its BF16 multiply (place_word, host and
// device code) must put every element of every register where the wgmma / mma.sync A fragment
// expects it: magnitude at BF16 bits 6..8, sign at bit 15 of its half, nothing else set.
TEST(Sm90Prepack, PlacedRegistersHoldTheFragmentElements) {
  std::mt19937_64 rng(11);
  const int rows = 128, k = 192;
  const Mx4 m = random_mx4(rng, rows, k, 100, 150);
  std::vector<uint8_t> q(prepacked_packed_bytes(rows, k)), s(prepacked_scale_bytes(rows, k));
  prepack_mxfp4(m.packed.data(), m.scales.data(), rows, k, q.data(), s.data());
  int checked = 0, wrong = 0;
  for (int mt = 0; mt < rows / kTileM; ++mt) {
    for (int kb = 0; kb < k / kStepK; ++kb) {
      for (int tid = 0; tid < kWarpgroup; ++tid) {
        const int w = tid / 32, g = (tid % 32) / 4, t = tid % 4;
        const size_t frag = (static_cast<size_t>(mt) * (k / kStepK) + kb) * kWarpgroup + tid;
        for (int j = 0; j < 4; ++j) {
          const uint8_t* b = q.data() + frag * kFragBytes + 4 * j;
          const uint32_t x = b[0] | b[1] << 8 | b[2] << 16 | static_cast<uint32_t>(b[3]) << 24;
          uint32_t v[4];
          place_word(x, v);
          for (int r = 0; r < 4; ++r) {
            wrong += (v[r] & ~kPlacedMask) != 0;
            for (int h = 0; h < 2; ++h) {
              const int row = kTileM * mt + 16 * w + g + 8 * (r & 1);
              const int kk = kStepK * kb + 16 * j + 8 * (r >> 1) + 2 * t + h;
              const uint32_t half = v[r] >> (16 * h);
              const uint8_t nib = ((half >> 6) & 7) | (((half >> 15) & 1) << 3);
              wrong += nib != e2m1_get(m.packed.data() + row * (k / 2), kk);
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, rows * k);
  EXPECT_EQ(wrong, 0);
}

// Every (register, half, bit) has its own word bit: the placement is a permutation of 32 bits.
TEST(Sm90Prepack, ElementBitsPermuteTheWord) {
  uint32_t seen = 0;
  int count = 0;
  for (int r = 0; r < 4; ++r)
    for (int h = 0; h < 2; ++h)
      for (int b = 0; b < 4; ++b) {
        const int bit = frag_bit(r, h, b);
        ASSERT_GE(bit, 0);
        ASSERT_LT(bit, 32);
        seen |= 1u << bit;
        ++count;
      }
  EXPECT_EQ(count, 32);
  EXPECT_EQ(seen, 0xFFFFFFFFu);
}

TEST(Sm90Prepack, SmallScalesMeansNoByteAbove128) {
  const std::vector<uint8_t> small = {0, 5, 127, 128, 100}, big = {0, 128, 129, 3};
  EXPECT_TRUE(mxfp4_scales_small(small.data(), small.size()));
  EXPECT_FALSE(mxfp4_scales_small(big.data(), big.size()));
  EXPECT_FALSE(mxfp4_scales_small(big.data() + 2, 1));
  EXPECT_TRUE(mxfp4_scales_small(big.data(), 2));
  EXPECT_TRUE(mxfp4_scales_small(nullptr, 0));
}

TEST(Sm90Prepack, RejectsBadShapes) {
  std::vector<uint8_t> buf(64 * 96);
  EXPECT_THROW(prepack_mxfp4(buf.data(), buf.data(), 32, 64, buf.data(), buf.data()), Error);
  EXPECT_THROW(prepack_mxfp4(buf.data(), buf.data(), 64, 96, buf.data(), buf.data()), Error);
  EXPECT_THROW(unprepack_mxfp4(buf.data(), buf.data(), 64, 0, buf.data(), buf.data()), Error);
}

TEST(Sm90GroupedGemm, RejectsBadArguments) {
  MXMOE_REQUIRE_SM90();
  TinyLaunches tiny;
  CUDA_OK(tiny.init());
  const Gemm1Params p = tiny.p1;
  EXPECT_EQ(launch_gemm1(p, num_sms(), 0), cudaSuccess);
  auto bad1 = [&](auto edit) {
    Gemm1Params q = p;
    edit(q);
    return launch_gemm1(q, num_sms(), 0);
  };
  EXPECT_EQ(bad1([](Gemm1Params& q) { q.K = 96; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad1([](Gemm1Params& q) { q.I = 48; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad1([](Gemm1Params& q) { q.x_stride = 60; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad1([](Gemm1Params& q) { q.x_stride = 68; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad1([](Gemm1Params& q) { q.x = nullptr; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad1([](Gemm1Params& q) { q.beta = nullptr; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad1([](Gemm1Params& q) { q.g.tile_n = 24; }), cudaErrorInvalidValue);
  EXPECT_EQ(bad1([](Gemm1Params& q) { q.g.tile_n = 192; }), cudaErrorInvalidValue);  // removed
  EXPECT_EQ(bad1([](Gemm1Params& q) { q.g.expert_offsets = nullptr; }), cudaErrorInvalidValue);
  const Gemm2Params p2 = tiny.p2;
  EXPECT_EQ(launch_gemm2(p2, num_sms(), 0), cudaSuccess);
  Gemm2Params q2 = p2;
  q2.H = 100;
  EXPECT_EQ(launch_gemm2(q2, num_sms(), 0), cudaErrorInvalidValue);
  q2 = p2;
  q2.I = 32;
  EXPECT_EQ(launch_gemm2(q2, num_sms(), 0), cudaErrorInvalidValue);
  q2 = p2;
  q2.y = nullptr;
  EXPECT_EQ(launch_gemm2(q2, num_sms(), 0), cudaErrorInvalidValue);
  // out_token needs an out that takes 16-byte stores: set, aligned, stride >= H, % 4 == 0.
  q2 = p2;
  q2.out_token = reinterpret_cast<const int32_t*>(tiny.any.get());
  EXPECT_EQ(launch_gemm2(q2, num_sms(), 0), cudaErrorInvalidValue);  // out null
  q2.out = reinterpret_cast<float*>(tiny.any.get() + 4);
  q2.out_stride = 64;
  EXPECT_EQ(launch_gemm2(q2, num_sms(), 0), cudaErrorInvalidValue);  // misaligned
  q2.out = reinterpret_cast<float*>(tiny.any.get());
  q2.out_stride = 66;
  EXPECT_EQ(launch_gemm2(q2, num_sms(), 0), cudaErrorInvalidValue);  // stride % 4
  q2.out_stride = 60;
  EXPECT_EQ(launch_gemm2(q2, num_sms(), 0), cudaErrorInvalidValue);  // stride < H
  CUDA_OK(cudaDeviceSynchronize());
}

// Awkward per-expert row counts: empty experts, 1, 3, 17, 118, 1000 rows.
const std::vector<int> kAwkwardRows = {0, 1, 3, 17, 0, 118, 1000, 2, 0};

class Sm90TileN : public ::testing::TestWithParam<int> {};

TEST_P(Sm90TileN, Gemm1Bf16) {
  MXMOE_REQUIRE_SM90();
  Gemm1Case c;
  c.rows = kAwkwardRows;
  c.tile_n = GetParam();
  c.per_expert_beta = true;
  run_gemm1_case(c);
}
TEST_P(Sm90TileN, Gemm1Mxfp8) {
  MXMOE_REQUIRE_SM90();
  Gemm1Case c;
  c.rows = kAwkwardRows;
  c.tile_n = GetParam();
  c.mxfp8_out = true;
  c.seed = 3;
  run_gemm1_case(c);
}
TEST_P(Sm90TileN, Gemm2) {
  MXMOE_REQUIRE_SM90();
  Gemm2Case c;
  c.rows = kAwkwardRows;
  c.tile_n = GetParam();
  run_gemm2_case(c);
}
// Scales up to 2^1 only (scale bytes 110..128): the launchers get small_scales and every kernel
// runs the expansion without the per-step test for larger scales.
TEST_P(Sm90TileN, SmallScalesGemm1) {
  MXMOE_REQUIRE_SM90();
  Gemm1Case c;
  c.rows = kAwkwardRows;
  c.tile_n = GetParam();
  c.mxfp8_out = GetParam() == 64;
  c.s_lo = 110;
  c.s_hi = 128;
  c.seed = 5;
  run_gemm1_case(c);
}
TEST_P(Sm90TileN, SmallScalesGemm2) {
  MXMOE_REQUIRE_SM90();
  Gemm2Case c;
  c.rows = kAwkwardRows;
  c.tile_n = GetParam();
  c.s_lo = 110;
  c.s_hi = 128;
  c.seed = 6;
  run_gemm2_case(c);
}
INSTANTIATE_TEST_SUITE_P(AllTiles, Sm90TileN, ::testing::Values(0, 16, 32, 64, 128, 160));

// Rows per expert for the warp-specialized kernel's schedule: every width class (1..193 rows),
// experts cut into several units (250, 700), an empty one.
const std::vector<int> kEveryWidthRows = {1,   31,  33,  64,  65,  96,  97, 128,
                                          129, 160, 161, 192, 193, 250, 0,  700};
// A GEMM1 (out, depth: I, K) or GEMM2 (H, I) case of the warp-specialized kernel over those rows.
template <class Case>
Case ws_case(int out, int depth, uint64_t seed) {
  Case c;
  c.rows = kEveryWidthRows;
  c.tile_n = 160;
  c.seed = seed;
  if constexpr (std::is_same_v<Case, Gemm1Case>) {
    c.I = out;
    c.K = depth;
    c.per_expert_beta = true;
  } else {
    c.H = out;
    c.I = depth;
  }
  return c;
}

// The warp-specialized kernel's scheduler (tile_n 160, three consumers): many experts of every
// width class (1..193 rows, so each wgmma N of 32..160 runs, most with partial tiles), hot
// experts cut into several nearly equal units, and weight tile counts that leave consumers
// idle in the CTA's last group (I = 96: 3 tiles of 64 rows for GEMM1, none idle; H = 192 and
// 256 for GEMM2: 3 and 4 tiles, so the last group of 256 has two idle consumers, which keep the
// barrier counts). The consumers run without skew by default; with a skew
// (MXMOE_SM90_WS_TUNE) an idle consumer also passes the hand-off on: these cases passed that
// way while the default skew was 2.
TEST(Sm90WarpSpecialized, EveryWidth) {
  MXMOE_REQUIRE_SM90();
  for (bool mx : {false, true}) {
    Gemm1Case c = ws_case<Gemm1Case>(96, 192, 21 + mx);
    c.mxfp8_out = mx;
    run_gemm1_case(c);
  }
  for (int H : {192, 256}) {
    // K = 320: 5 steps, the weights through the producer's slots; K = 640: 10 steps, through
    // registers (kWsSlotWeightsMaxSteps).
    for (int I : {320, 640}) run_gemm2_case(ws_case<Gemm2Case>(H, I, 23));
    // K = 64: one step per tile, every slot a new tile's.
    run_gemm2_case(ws_case<Gemm2Case>(H, 64, 23));
  }
}

// Every scale byte <= 128: small_scales holds, and with ws_set_small the launches take the
// warp-specialized kernels compiled without the big-scale test (kSmall). Scale bytes drawn from
// 96..128 (both ends of the fast multiplier; a multiplier from the wrong byte or half shows as
// a factor of 2^k), every width class, GEMM1 with either output, GEMM2 through the slots
// (K = 320) and registers (K = 640); both settings against the CPU.
TEST(Sm90WarpSpecialized, SmallScales) {
  MXMOE_REQUIRE_SM90();
  const bool saved = ws_small();
  for (bool small : {false, true}) {
    ws_set_small(small);
    for (bool mx : {false, true}) {
      Gemm1Case c = ws_case<Gemm1Case>(160, 512, 51 + mx);
      c.mxfp8_out = mx;
      c.s_lo = 96;
      c.s_hi = 128;
      run_gemm1_case(c);
    }
    for (int I : {320, 640}) {  // (run_gemm2_case also runs it with an out_token table)
      Gemm2Case c2 = ws_case<Gemm2Case>(256, I, 53 + I);
      c2.s_lo = 96;
      c2.s_hi = 128;
      run_gemm2_case(c2);
    }
  }
  ws_set_small(saved);
}

// GEMM2 started under GEMM1 (Gemm1Params::h_ready): the chain with the per-expert counters must
// give GEMM2's y bit for bit as the chain without them, eagerly and in CUDA graph replays, with h
// poisoned (NaN) before every GEMM1, so a tile of GEMM2 that read its rows before GEMM1 wrote them
// would show. GEMM1 must report the cap it counted at and leave each expert at units x 2I / 64
// finished tiles; a GEMM1 on another kernel (tile_n 128) reports 0 and GEMM2 then waits as
// before. I = 320 (2I / 64 = 10 tiles: the last group of three consumers has one idle; GEMM2 at
// K = 320 takes the slot path: by default GEMM1 then does not count and GEMM2 waits for all of
// it, MXMOE_SM90_WS_OVERLAP=all counts and waits there too) and I = 640 (GEMM2 on the register
// path, started under GEMM1).
TEST(Sm90WarpSpecialized, Gemm2StartsUnderGemm1) {
  MXMOE_REQUIRE_SM90();
  for (int I : {320, 640}) {
    std::mt19937_64 rng(41 + I);
    std::vector<int> rows;
    std::uniform_int_distribution<int> rdist(0, 420);
    for (int e = 0; e < 40; ++e) rows.push_back(e % 9 == 4 ? 0 : rdist(rng));
    const int E = static_cast<int>(rows.size()), K = 512, H = 256;
    const std::vector<int32_t> off = offsets_of(rows);
    const int pairs = off[E], max_rows = pairs + 3, T = pairs / 2 + 1;
    ChainHost host;
    host.E = E, host.I = I, host.K = K, host.H = H, host.max_rows = max_rows;
    for (int e = 0; e < E; ++e) {
      prepack_append(fuse(random_mx4(rng, I, K, 120, 130), random_mx4(rng, I, K, 120, 130)),
                     &host.w13q, &host.w13s);
      prepack_append(random_mx4(rng, H, I, 120, 130), &host.w2q, &host.w2s);
    }
    host.x.resize(static_cast<size_t>(T) * K);
    for (auto& v : host.x) v = random_bf16(rng, 0.05f);
    host.x_row.assign(max_rows, 0);
    std::uniform_int_distribution<int> tok(0, T - 1);
    for (int q = 0; q < pairs; ++q) host.x_row[q] = tok(rng);
    host.off = off;
    host.beta.assign(E, 4.0f);
    host.linear_beta.assign(E, 25.0f);
    host.row_weight.resize(max_rows);
    std::uniform_real_distribution<float> wdist(0.01f, 1.0f);
    for (auto& v : host.row_weight) v = wdist(rng);
    ChainProblem prob;
    CUDA_OK(prob.init(host));
    DevBuf<int32_t> d_ready(E);
    Gemm1Params g1 = prob.gemm1(160);
    Gemm2Params g2 = prob.gemm2(160);

    // One chain on stream s: poison h and y, [zero the counters], GEMM1, GEMM2.
    CountedGemm1 counted;
    auto chain = [&](cudaStream_t s, bool counters) {
      cudaError_t e = cudaMemsetAsync(prob.h.get(), 0xFF, prob.h.size() * 2, s);
      if (e == cudaSuccess) e = cudaMemsetAsync(prob.y.get(), 0xFF, prob.y.size() * 4, s);
      if (e == cudaSuccess && counters) e = cudaMemsetAsync(d_ready.get(), 0, E * 4, s);
      g1.h_ready = counters ? d_ready.get() : nullptr;
      if (e == cudaSuccess) e = launch_gemm1(g1, num_sms(), s, &counted);
      g2.after_gemm1 = counted;
      return e == cudaSuccess ? launch_gemm2(g2, num_sms(), s) : e;
    };
    std::vector<float> y_ref, y;
    CUDA_OK(chain(nullptr, false));
    EXPECT_EQ(counted.cap, 0) << "no counters given, none counted";
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(prob.y.download(&y_ref));
    size_t written = 0;
    for (size_t i = 0; i < static_cast<size_t>(pairs) * H; ++i) written += std::isfinite(y_ref[i]);
    EXPECT_EQ(written, static_cast<size_t>(pairs) * H) << "the plain chain left rows unwritten";

    CUDA_OK(chain(nullptr, true));
    // By default only a GEMM1 whose GEMM2 takes the register path (K = I past
    // kWsSlotWeightsMaxSteps steps) counts.
    const char* mode = std::getenv("MXMOE_SM90_WS_OVERLAP");
    const bool all = mode && (strcmp(mode, "all") == 0 || strcmp(mode, "check") == 0);
    const bool counts =
        (mode == nullptr || strcmp(mode, "0") != 0) && (all || I / 64 > kWsSlotWeightsMaxSteps);
    EXPECT_EQ(counted.cap, counts ? 160 : 0)
        << "GEMM1 on the warp-specialized kernel counts at its cap";
    if (counts) {
      EXPECT_EQ(counted.h_ready, d_ready.get());
    }
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(prob.y.download(&y));
    EXPECT_EQ(0, memcmp(y.data(), y_ref.data(), y.size() * 4)) << "I=" << I << " eager";
    std::vector<int32_t> ready;
    CUDA_OK(d_ready.download(&ready));
    for (int e = 0; e < E; ++e) {
      const int units = rows[e] ? ws_unit_count(rows[e], ws_unit_rows(rows[e], 160)) : 0;
      EXPECT_EQ(ready[e], counts ? units * (2 * I / 64) : 0)
          << "expert " << e << " rows " << rows[e];
    }

    CapturedLaunch graph;
    CUDA_OK(graph.capture([&](cudaStream_t s) { return chain(s, true); }));
    for (int rep = 0; rep < 3; ++rep) {
      CUDA_OK(graph.replay());
      CUDA_OK(prob.y.download(&y));
      EXPECT_EQ(0, memcmp(y.data(), y_ref.data(), y.size() * 4)) << "I=" << I << " replay " << rep;
    }

    g1.g.tile_n = g2.g.tile_n = 128;  // the one-warpgroup kernel: nothing counted
    CUDA_OK(chain(nullptr, true));
    EXPECT_EQ(counted.cap, 0) << "the one-warpgroup kernel does not count";
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(prob.y.download(&y));
    EXPECT_EQ(0, memcmp(y.data(), y_ref.data(), y.size() * 4)) << "I=" << I << " tile_n 128";
  }
}

// The slot path copies the scale words 16 bytes at a time (ws_producer); scales that are only
// 4-byte aligned make the launcher keep GEMM2's weights on the register path at short K, with
// the same results.
TEST(Sm90WarpSpecialized, UnalignedScalesTakeTheRegisterPath) {
  MXMOE_REQUIRE_SM90();
  Gemm2Case c;
  c.rows = {1, 97, 161, 0, 300};
  c.H = 192;
  c.I = 320;
  c.tile_n = 160;
  c.scale_offset = 4;
  c.seed = 29;
  run_gemm2_case(c);
}

TEST(Sm90GroupedGemm, WideScaleRangeAndOddK) {
  // Scale bytes 100..150 exercise the second multiply of scales above 2^1; K = 192 is 3 steps
  // (an odd step count); activations are small so the products stay in range.
  MXMOE_REQUIRE_SM90();
  Gemm2Case c;
  c.rows = {5, 64, 0, 33};
  c.H = 192;
  c.I = 192;
  c.s_lo = 100;
  c.s_hi = 150;
  run_gemm2_case(c);
  Gemm1Case c1;
  c1.rows = {5, 64, 0, 33};
  c1.I = 96;
  c1.K = 192;
  c1.s_lo = 100;
  c1.s_hi = 135;
  run_gemm1_case(c1);
}

TEST(Sm90GroupedGemm, KimiSizesGemm1) {
  MXMOE_REQUIRE_SM90();
  for (bool mx : {false, true}) {
    Gemm1Case c;  // EP16-like: latent 3584, I 3072
    c.rows = {1, 0, 130, 17};
    c.I = 3072;
    c.K = 3584;
    c.mxfp8_out = mx;
    c.sample = 6;
    c.seed = 11 + mx;
    run_gemm1_case(c);
  }
  Gemm1Case c;  // TP8 x EP4 slice: I 384, many experts
  c.rows = {0, 1, 3, 17, 118, 0, 64, 9, 1, 0, 250, 4};
  c.I = 384;
  c.K = 3584;
  c.mxfp8_out = true;
  c.per_expert_beta = true;
  c.sample = 8;
  run_gemm1_case(c);
}

TEST(Sm90GroupedGemm, KimiSizesGemm2) {
  MXMOE_REQUIRE_SM90();
  Gemm2Case c;
  c.rows = {1, 0, 130, 17};
  c.H = 3584;
  c.I = 3072;
  c.sample = 6;
  run_gemm2_case(c);
  Gemm2Case c2;
  c2.rows = {0, 1, 3, 17, 118, 0, 64, 9, 1, 0, 250, 4};
  c2.H = 3584;
  c2.I = 384;
  c2.sample = 8;
  run_gemm2_case(c2);
}

}  // namespace
}  // namespace mxmoe::sm90
