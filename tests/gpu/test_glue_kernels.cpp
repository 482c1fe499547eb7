// tests/gpu/test_glue_kernels.cpp: each smxx glue kernel against the CPU reference on the same
// inputs: quantize vs mx_quant.h (bit for bit), route vs route_kimi, group vs a plain stable sort,
// combine vs a plain slot-ordered fp32 sum.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gpu_test_util.h"
#include "mxmoe/formats.h"
#include "mxmoe/mx_quant.h"
#include "mxmoe/reference.h"
#include "smxx/glue.h"

namespace mxmoe::test {
namespace {

// Input rows with varied block magnitudes: zeros, tiny (E4M3 subnormals after scaling), huge.
std::vector<float> varied_rows(int T, int H, uint64_t seed) {
  Rng r(seed);
  std::vector<float> x(static_cast<size_t>(T) * H);
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < H / 32; ++b) {
      const int kind = r.below(8);
      const float scale = kind == 0 ? 0.0f : kind == 1 ? 1e-30f : kind == 2 ? 3e4f
                                                                             : std::ldexp(1.0f, r.below(20) - 10);
      for (int i = 0; i < 32; ++i) {
        float v = r.normal() * scale;
        if (kind == 3 && i == 5) v = 0.0f;  // a zero inside a block
        if (kind == 4 && i == 7) v = v * 1e-6f;  // far below the block's amax: E4M3 subnormal / 0
        x[static_cast<size_t>(t) * H + b * 32 + i] = v;
      }
    }
  return x;
}

void run_quantize_case(bool f32_input, bool mxfp8) {
  const int T = 37, H = 3584;
  const int64_t stride = H + 96;  // non-contiguous rows (chunked prefill views)
  std::vector<float> x = varied_rows(T, H, 11 + f32_input * 2 + mxfp8);
  if (!f32_input)
    for (auto& v : x) v = round_bf16(v);
  // Strided host image with poison in the gaps.
  std::vector<float> xf(static_cast<size_t>(T) * stride, NAN);
  std::vector<uint16_t> xb(static_cast<size_t>(T) * stride, 0x7FC0);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      xf[t * stride + h] = x[static_cast<size_t>(t) * H + h];
      xb[t * stride + h] = float_to_bf16(x[static_cast<size_t>(t) * H + h]);
    }
  DevBuf<float> dxf;
  DevBuf<uint16_t> dxb, dq(static_cast<size_t>(T) * H);
  if (f32_input) dxf.upload(xf); else dxb.upload(xb);
  CUDA_OK(cudaMemset(dq.get(), 0xFF, dq.size() * 2));
  const void* src = f32_input ? static_cast<const void*>(dxf.get()) : dxb.get();
  CUDA_OK(smxx::launch_quantize_input(src, f32_input, stride, T, H, mxfp8,
                                      reinterpret_cast<__nv_bfloat16*>(dq.get()), nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint16_t> got = dq.download();
  std::vector<float> ref(H);
  int mismatches = 0;
  for (int t = 0; t < T; ++t) {
    const float* row = x.data() + static_cast<size_t>(t) * H;
    if (mxfp8) fake_quantize_mxfp8_row(row, H, ref.data());
    else for (int h = 0; h < H; ++h) ref[h] = round_bf16(row[h]);
    for (int h = 0; h < H; ++h) {
      const uint16_t want = float_to_bf16(ref[h]);
      const uint16_t g = got[static_cast<size_t>(t) * H + h];
      if (g != want && ++mismatches <= 5)
        ADD_FAILURE() << "row " << t << " col " << h << ": got 0x" << std::hex << g
                      << " want 0x" << want << std::dec << " (x = " << row[h] << ")";
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(GpuQuantize, Bf16RowsToMxfp8MatchMxQuantBitForBit) {
  MXMOE_REQUIRE_SM90();
  run_quantize_case(false, true);
}
TEST(GpuQuantize, Fp32RowsToMxfp8MatchMxQuantBitForBit) {
  MXMOE_REQUIRE_SM90();
  run_quantize_case(true, true);
}
TEST(GpuQuantize, Bf16RowsCopyExactly) {
  MXMOE_REQUIRE_SM90();
  run_quantize_case(false, false);
}
TEST(GpuQuantize, Fp32RowsRoundToBf16) {
  MXMOE_REQUIRE_SM90();
  run_quantize_case(true, false);
}

// logit_shift moves every logit (e.g. -120: every sigmoid underflows to 0 and the bias alone
// picks the experts; the weights must then be 0, as route_kimi gives, never NaN).
void run_route_case(int T, int E, int k, bool renorm, float scaling, bool ties, uint64_t seed,
                    float logit_shift = 0.0f) {
  const int64_t stride = E + 8;
  Rng r(seed);
  std::vector<float> logits(static_cast<size_t>(T) * stride, NAN), dense(static_cast<size_t>(T) * E);
  std::vector<float> bias(E);
  for (auto& b : bias) b = ties ? 0.0f : 0.1f * r.normal();
  for (int t = 0; t < T; ++t)
    for (int e = 0; e < E; ++e) {
      // ties: every score equal within a token, so the order must come from the ids alone.
      const float v = logit_shift + (ties ? 0.25f * (t % 3) : 2.0f * r.normal());
      logits[t * stride + e] = v;
      dense[static_cast<size_t>(t) * E + e] = v;
    }
  RoutingConfig rc;
  rc.num_experts = E;
  rc.top_k = k;
  rc.renormalize = renorm;
  rc.scaling_factor = scaling;
  std::vector<int32_t> want_ids(static_cast<size_t>(T) * k);
  std::vector<float> want_w(static_cast<size_t>(T) * k);
  route_kimi(dense.data(), bias.data(), T, rc, want_ids.data(), want_w.data());

  DevBuf<float> dl, db, dw(static_cast<size_t>(T) * k);
  DevBuf<int32_t> di(static_cast<size_t>(T) * k);
  dl.upload(logits);
  db.upload(bias);
  CUDA_OK(smxx::launch_route_kimi(dl.get(), stride, db.get(), T, E, k, renorm, scaling, di.get(),
                                  dw.get(), nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const auto ids = di.download();
  const auto w = dw.download();
  int bad = 0;
  double max_rel = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] != want_ids[i] && ++bad <= 5)
      ADD_FAILURE() << "token " << i / k << " slot " << i % k << ": id " << ids[i] << " want "
                    << want_ids[i];
    if (want_w[i] == 0.0f) {
      if (w[i] != 0.0f && ++bad <= 5)
        ADD_FAILURE() << "token " << i / k << " slot " << i % k << ": weight " << w[i]
                      << " want 0";
      continue;
    }
    max_rel = std::max(max_rel, std::fabs(double(w[i]) - want_w[i]) / std::fabs(want_w[i]));
  }
  EXPECT_EQ(bad, 0);
  // expf on host and device may differ by an ulp or two; the weights are a few fp32 ops away.
  EXPECT_LE(max_rel, 1e-6) << "routing weights differ from route_kimi";
  std::printf("[route] T=%d E=%d k=%d renorm=%d scale=%g ties=%d: ids equal, max rel weight "
              "diff %.3g\n", T, E, k, renorm, scaling, ties, max_rel);
}

TEST(GpuRoute, KimiTop16Of896MatchesRouteKimi) {
  MXMOE_REQUIRE_SM90();
  run_route_case(131, 896, 16, true, 1.0f, false, 5);
}
TEST(GpuRoute, NoRenormalizeWithScaling) {
  MXMOE_REQUIRE_SM90();
  run_route_case(17, 896, 16, false, 2.5f, false, 6);
}
TEST(GpuRoute, TiesGoToTheLowerId) {
  MXMOE_REQUIRE_SM90();
  run_route_case(9, 896, 16, true, 1.0f, true, 7);
}
TEST(GpuRoute, UnderflowedSigmoidsGiveZeroWeightsNotNaN) {
  MXMOE_REQUIRE_SM90();
  run_route_case(5, 896, 16, true, 1.0f, false, 9, -120.0f);
}
TEST(GpuRoute, SmallExpertCountAndWideTopK) {
  MXMOE_REQUIRE_SM90();
  run_route_case(33, 40, 40, true, 1.0f, false, 8);
}

// A plain CPU stable sort of the pairs by local expert: the grouping's specification.
struct Grouping {
  std::vector<int32_t> offsets, x_row, pair_pos;
  std::vector<float> row_weight;
};
Grouping cpu_group(const std::vector<int32_t>& ids, const std::vector<float>& w, int k, int start,
                   int count) {
  Grouping g;
  g.offsets.assign(count + 1, 0);
  g.pair_pos.assign(ids.size(), -1);
  for (int e = 0; e < count; ++e) {
    g.offsets[e] = static_cast<int32_t>(g.x_row.size());
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] == start + e) {
        g.pair_pos[i] = static_cast<int32_t>(g.x_row.size());
        g.x_row.push_back(static_cast<int32_t>(i / k));
        g.row_weight.push_back(w[i]);
      }
  }
  g.offsets[count] = static_cast<int32_t>(g.x_row.size());
  return g;
}

void run_group_case(const std::vector<int32_t>& ids, int T, int k, int start, int count,
                    const char* name) {
  std::vector<float> w(ids.size());
  Rng r(99);
  for (auto& v : w) v = static_cast<float>(r.uniform());
  const Grouping want = cpu_group(ids, w, k, start, count);
  const int P = T * k;
  DevBuf<int32_t> di, scratch(smxx::group_scratch_ints(P, count)), off(count + 1), xr(P), pp(P);
  DevBuf<float> dw, rw(P);
  di.upload(ids);
  dw.upload(w);
  CUDA_OK(cudaMemset(off.get(), 0xFF, (count + 1) * 4));
  CUDA_OK(cudaMemset(pp.get(), 0x7F, P * 4));
  smxx::GroupArgs a;
  a.ids = di.get();
  a.weights = dw.get();
  a.T = T;
  a.k = k;
  a.expert_start = start;
  a.expert_count = count;
  a.scratch = scratch.get();
  a.expert_offsets = off.get();
  a.x_row = xr.get();
  a.row_weight = rw.get();
  a.pair_pos = pp.get();
  const char* failed = nullptr;
  CUDA_OK(smxx::launch_group(a, nullptr, &failed));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(off.download(), want.offsets) << name;
  EXPECT_EQ(pp.download(), want.pair_pos) << name;
  const size_t rows = want.x_row.size();
  EXPECT_EQ(xr.download(rows), want.x_row) << name;
  const auto gw = rw.download(rows);
  EXPECT_EQ(0, std::memcmp(gw.data(), want.row_weight.data(), rows * 4)) << name;
  int empty = 0;
  for (int e = 0; e < count; ++e) empty += want.offsets[e] == want.offsets[e + 1];
  std::printf("[group] %s: T=%d k=%d range [%d, %d): %zu owned pairs, %d empty experts\n", name,
              T, k, start, start + count, rows, empty);
}

TEST(GpuGroup, EpSliceWithMinusOneAndOtherRankIds) {
  MXMOE_REQUIRE_SM90();
  const int T = 1000, k = 16, start = 112, count = 56;
  Rng r(3);
  std::vector<int32_t> ids(static_cast<size_t>(T) * k);
  for (auto& id : ids) {
    const int c = r.below(10);
    id = c == 0 ? -1 : c < 5 ? start + r.below(count) : r.below(896);
  }
  run_group_case(ids, T, k, start, count, "ep56");
}
TEST(GpuGroup, EveryTokenOnOneExpert) {
  MXMOE_REQUIRE_SM90();
  const int T = 5000, k = 4, start = 0, count = 224;
  std::vector<int32_t> ids(static_cast<size_t>(T) * k, -1);
  for (int t = 0; t < T; ++t) ids[static_cast<size_t>(t) * k + (t % k)] = 117;
  run_group_case(ids, T, k, start, count, "one-expert");
}
TEST(GpuGroup, FullLayerSingleTokenAndDuplicates) {
  MXMOE_REQUIRE_SM90();
  std::vector<int32_t> ids = {5, 895, 5, -1, 0, 17, 17, 300};  // duplicate ids stay two pairs
  run_group_case(ids, 1, 8, 0, 896, "full-1");
  std::vector<int32_t> none(3 * 16, -1);
  run_group_case(none, 3, 16, 0, 896, "all-minus-one");
}

TEST(GpuCombine, SlotOrderedSumSkipsMissingPairs) {
  MXMOE_REQUIRE_SM90();
  const int T = 29, k = 16, H = 3584;
  const int64_t out_stride = H + 16;
  Rng r(21);
  std::vector<int32_t> pos(static_cast<size_t>(T) * k);
  int rows = 0;
  for (auto& p : pos) p = r.below(4) == 0 ? -1 : rows++;
  std::vector<float> y(static_cast<size_t>(rows) * H);
  for (auto& v : y) v = r.normal() * std::ldexp(1.0f, r.below(30) - 15);
  DevBuf<float> dy, dout(static_cast<size_t>(T) * out_stride);
  DevBuf<int32_t> dpos;
  dy.upload(y);
  dpos.upload(pos);
  CUDA_OK(cudaMemset(dout.get(), 0xFF, dout.size() * 4));
  CUDA_OK(smxx::launch_combine(dy.get(), H, dpos.get(), T, k, dout.get(), out_stride, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const auto got = dout.download();
  int bad = 0;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      float acc = 0.0f;
      for (int j = 0; j < k; ++j) {
        const int p = pos[static_cast<size_t>(t) * k + j];
        if (p >= 0) acc += y[static_cast<size_t>(p) * H + h];
      }
      const float g = got[t * out_stride + h];
      if (std::memcmp(&g, &acc, 4) != 0 && ++bad <= 5)
        ADD_FAILURE() << "t " << t << " h " << h << ": " << g << " want " << acc;
    }
  EXPECT_EQ(bad, 0);
  // The gap between rows must be untouched (poison 0xFFFFFFFF is a NaN pattern).
  uint32_t gap;
  std::memcpy(&gap, &got[H], 4);
  EXPECT_EQ(gap, 0xFFFFFFFFu);
}

}  // namespace
}  // namespace mxmoe::test
