// tests/gpu/bench_glue_chain.cpp: timings of the glue chain alone (no GEMMs), DISABLED_ by default:
// the fused prologue against the separate kernels, the router alone, and the prefill glue.
// Run with --gtest_also_run_disabled_tests --gtest_filter='*GlueBench*'.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <vector>

#include "glue_test_util.h"
#include "gpu_test_util.h"
#include "mxmoe/formats.h"
#include "smxx/glue.h"

namespace mxmoe::test {
namespace {

// ---- timing of the glue chain alone (no GEMMs), fused prologue vs separate kernels ----
// DISABLED_ by default; run with --gtest_also_run_disabled_tests --gtest_filter='*GlueBench*'.
// The chain of run_moe without the two GEMMs, captured in a CUDA graph (PDL edges included),
// each replay after a 256 MB L2 flush, median of 30 replays. Shapes as `mxmoe bench`: k = 16
// of 896 experts, local EP16 = 56 (I 3072) or TP8xEP4 = 224; BF16 input, w4a8 quantization.
// What both glue benches time with: the flush buffer and a non-blocking stream.
struct GlueBenchRig {
  static constexpr size_t kFlushBytes = 256u << 20;
  DevBuf<uint8_t> flush{kFlushBytes};
  cudaStream_t s = nullptr;
  GlueBenchRig() { cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); }
  ~GlueBenchRig() { cudaStreamDestroy(s); }
  GlueBenchRig(const GlueBenchRig&) = delete;
  GlueBenchRig& operator=(const GlueBenchRig&) = delete;
  bool ok() const { return s != nullptr && flush.get() != nullptr; }
  // One CUDA graph of enqueue's launches, median of 30 replays after an L2 flush of kFlushBytes
  // (flushed) or with none (warm).
  float time_us(const std::function<cudaError_t(cudaStream_t)>& enqueue,
                bool flushed = true) const {
    return median_graph_us(enqueue, s, flush.get(), flushed ? kFlushBytes : 0, 5, 30);
  }
};

TEST(GpuGlueBench, DISABLED_FusedVsSeparateChain) {
  MXMOE_REQUIRE_SM90();
  const int H = 3584, k = 16, Et = 896;
  const GlueBenchRig rig;
  ASSERT_TRUE(rig.ok());
  const cudaStream_t s = rig.s;
  for (int El : {56, 224})
    for (int T : {1, 8, 64})
      for (bool gpu_route : {false, true}) {
        const int P = T * k;
        Rng r(T + El);
        std::vector<uint16_t> xb(static_cast<size_t>(T) * H);
        for (auto& v : xb) v = float_to_bf16(r.normal());
        std::vector<float> logits(static_cast<size_t>(T) * Et), w(P);
        for (auto& v : logits) v = 2.0f * r.normal();
        std::vector<int32_t> ids(P);
        for (int i = 0; i < P; ++i) {
          ids[i] = r.below(Et);
          w[i] = static_cast<float>(r.uniform());
        }
        DevBuf<uint16_t> dx, xq(static_cast<size_t>(T) * H);
        DevBuf<float> dlog, dw, rw(P), y(static_cast<size_t>(P) * H),
            out(static_cast<size_t>(T) * H);
        DevBuf<int32_t> dids, rid(P);
        GroupBuffers grp(P, El);
        CUDA_OK(dx.upload(xb));
        CUDA_OK(dlog.upload(logits));
        CUDA_OK(dids.upload(ids));
        CUDA_OK(dw.upload(w));
        CUDA_OK(cudaMemset(y.get(), 0, y.size() * 4));
        const int32_t* use_ids = gpu_route ? rid.get() : dids.get();
        const float* use_w = gpu_route ? rw.get() : dw.get();
        auto separate = [&](cudaStream_t st) {
          cudaError_t e = smxx::launch_quantize_input(
              dx.get(), false, H, T, H, true, reinterpret_cast<__nv_bfloat16*>(xq.get()), st);
          if (e == cudaSuccess && gpu_route)
            e = smxx::launch_route_kimi(dlog.get(), Et, nullptr, T, Et, k, true, 1.0f, rid.get(),
                                        rw.get(), st);
          smxx::GroupArgs g = grp.args(use_ids, use_w, T, k, 0, El, false, true);
          g.situ.h_ready = nullptr;  // the fused chain below does not zero the counters either
          const char* failed = nullptr;
          if (e == cudaSuccess) e = smxx::launch_group(g, st, &failed);
          if (e == cudaSuccess)
            e = smxx::launch_combine(y.get(), H, grp.pos.get(), T, k, out.get(), H, false, st);
          return e;
        };
        const smxx::PrologueShape shape = smxx::prologue_plan(T, k, Et, El, gpu_route);
        ASSERT_TRUE(shape.ok);
        auto fused = [&](cudaStream_t st) {
          smxx::PrologueArgs a;
          a.x = dx.get();
          a.x_stride = H;
          a.H = H;
          a.mxfp8 = true;
          a.xq = xq.get();
          cudaError_t e = cudaSuccess;
          if (shape.route_first)
            e = smxx::launch_route_kimi(dlog.get(), Et, nullptr, T, Et, k, true, 1.0f, rid.get(),
                                        rw.get(), st);
          a.ids = use_ids;  // route_kimi's above with the GPU router
          a.weights = use_w;
          a.T = T;
          a.k = k;
          a.expert_count = El;
          a.expert_offsets = grp.off.get();
          a.x_row = grp.xrow.get();
          a.row_weight = grp.roww.get();
          a.pair_pos = grp.pos.get();
          a.situ = grp.situ_fill();
          a.situ.h_ready = nullptr;  // as the separate chain above
          if (e == cudaSuccess) e = smxx::launch_prologue(a, shape, st);
          if (e == cudaSuccess)
            e = smxx::launch_combine(y.get(), H, grp.pos.get(), T, k, out.get(), H, false, st);
          return e;
        };
        const float ts = rig.time_us(separate);
        const float tf = rig.time_us(fused);
        ASSERT_TRUE(ts > 0 && tf > 0);
        CUDA_OK(cudaStreamSynchronize(s));
        CUDA_OK(cudaGetLastError());
        std::printf(
            "GLUEBENCH local=%3d T=%3d router=%-4s | separate %6.2f us | fused %6.2f us | "
            "saved %6.2f us\n",
            El, T, gpu_route ? "gpu" : "ids", ts, tf, ts - tf);
      }
}

// The GPU router alone at decode sizes (bench/NOTES.md, next steps after D round 21: with router
// logits the chain costs 17-20 us more than with ids at T <= 8, while one warp's k rounds should
// take a few us). Graph replays of launch_route_kimi over 896 experts, after an L2 flush and
// warm, for k = 1 / 4 / 16 and both key stores: if the time hardly moves with k, the rounds are
// not the cost; if it moves with the flush, the logits' and bias' DRAM reads are. A graph of one
// 4-byte memset is the floor (launch + graph overhead).
TEST(GpuGlueBench, DISABLED_RouteAlone) {
  MXMOE_REQUIRE_SM90();
  const int Et = 896;
  const GlueBenchRig rig;
  ASSERT_TRUE(rig.ok());
  const cudaStream_t s = rig.s;
  DevBuf<int32_t> rid(8 * 16);
  DevBuf<float> rw(8 * 16), dlog, dbias;
  auto floor_node = [&](cudaStream_t st) { return cudaMemsetAsync(rid.get(), 0, 4, st); };
  const float floor_flushed = rig.time_us(floor_node), floor_warm = rig.time_us(floor_node, false);
  ASSERT_TRUE(floor_flushed > 0 && floor_warm > 0);
  std::printf("ROUTEBENCH floor (one memset node) | flushed %6.2f us | warm %6.2f us\n",
              floor_flushed, floor_warm);
  for (int T : {1, 8}) {
    Rng r(T);
    std::vector<float> logits(static_cast<size_t>(T) * Et), bias(Et);
    for (auto& v : logits) v = 2.0f * r.normal();
    for (auto& v : bias) v = 0.1f * r.normal();
    CUDA_OK(dlog.upload(logits));
    CUDA_OK(dbias.upload(bias));
    for (int k : {1, 4, 16})
      for (int reg : {smxx::kRouteRegMax, 0}) {
        auto route = [&](cudaStream_t st) {
          return smxx::launch_route_kimi(dlog.get(), Et, dbias.get(), T, Et, k, true, 2.5f,
                                         rid.get(), rw.get(), st, reg);
        };
        const float flushed = rig.time_us(route);
        const float warm = rig.time_us(route, false);
        ASSERT_TRUE(flushed > 0 && warm > 0);
        CUDA_OK(cudaStreamSynchronize(s));
        CUDA_OK(cudaGetLastError());
        std::printf("ROUTEBENCH T=%d E=%d k=%2d keys=%-9s | flushed %6.2f us | warm %6.2f us\n", T,
                    Et, k, reg ? "registers" : "shared", flushed, warm);
      }
  }
}

// The glue at prefill sizes, each kernel alone and the w4a16 chain (group, whose scan also
// writes the SiTU parameters, -> combine), as run_moe launches them outside the fused
// prologue; graph replays after an L2 flush (GlueBenchRig::time_us). Routing as `mxmoe bench`'s
// uniform layouts: each token L distinct local ids among El and 16 - L foreign ones, in
// shuffled slots: EP16 El = 56, L = 1 (every token owns one local pair: the grouping marks out
// rows and the combine skips them, as run_moe's direct stores do), TP8xEP4 El = 224, L = 4
// (every token summed by the combine).
// "quantize" is the W4A8 path's BF16 -> MXFP8 copy of x (the W4A16 path reads x in place).
TEST(GpuGlueBench, DISABLED_PrefillGlue) {
  MXMOE_REQUIRE_SM90();
  const int H = 3584, k = 16, Et = 896;
  const GlueBenchRig rig;
  ASSERT_TRUE(rig.ok());
  const cudaStream_t s = rig.s;
  for (auto [El, L] : {std::pair{56, 1}, {224, 4}})
    for (int T : {4096, 16384}) {
      const int P = T * k;
      Rng r(T * 3 + El);
      std::vector<int32_t> ids(P);
      std::vector<float> w(P);
      for (int t = 0; t < T; ++t) {
        int32_t* row = &ids[static_cast<size_t>(t) * k];
        int n = 0;
        while (n < k) {
          const int e = n < L ? r.below(El) : El + r.below(Et - El);
          if (std::find(row, row + n, e) == row + n) row[n++] = e;
        }
        for (int j = k - 1; j > 0; --j) std::swap(row[j], row[r.below(j + 1)]);
      }
      for (auto& v : w) v = static_cast<float>(0.1 + r.uniform());
      std::vector<uint16_t> xb(static_cast<size_t>(T) * H);
      for (auto& v : xb) v = float_to_bf16(static_cast<float>(r.uniform() - 0.5));
      const bool direct = L == 1;
      DevBuf<uint16_t> dx, xq(static_cast<size_t>(T) * H);
      DevBuf<float> dw, y(static_cast<size_t>(T) * L * H), out(static_cast<size_t>(T) * H);
      DevBuf<int32_t> dids;
      GroupBuffers grp(P, El);
      CUDA_OK(dx.upload(xb));
      CUDA_OK(dids.upload(ids));
      CUDA_OK(dw.upload(w));
      CUDA_OK(cudaMemset(y.get(), 0, y.size() * 4));
      const smxx::GroupArgs g = grp.args(dids.get(), dw.get(), T, k, 0, El, direct, true);
      auto group = [&](cudaStream_t st) {
        const char* failed = nullptr;
        return smxx::launch_group(g, st, &failed);
      };
      auto combine = [&](cudaStream_t st) {
        return smxx::launch_combine(y.get(), H, grp.pos.get(), T, k, out.get(), H, direct, st);
      };
      auto quantize = [&](cudaStream_t st) {
        return smxx::launch_quantize_input(dx.get(), false, H, T, H, true,
                                           reinterpret_cast<__nv_bfloat16*>(xq.get()), st);
      };
      CUDA_OK(group(s));  // pair_pos for the combine's timing alone
      CUDA_OK(cudaStreamSynchronize(s));
      const float tg = rig.time_us(group);
      const float tc = rig.time_us(combine);
      const float tq = rig.time_us(quantize);
      const float tall = rig.time_us([&](cudaStream_t st) {
        const cudaError_t e = group(st);
        return e == cudaSuccess ? combine(st) : e;
      });
      ASSERT_TRUE(tg > 0 && tc > 0 && tq > 0 && tall > 0);
      CUDA_OK(cudaStreamSynchronize(s));
      CUDA_OK(cudaGetLastError());
      std::printf(
          "GLUEBENCH prefill local=%3d per-token=%d T=%5d | group (+ SiTU fill) %7.2f us "
          "| combine %7.2f us | chain %7.2f us | quantize (w4a8) %7.2f us\n",
          El, L, T, tg, tc, tall, tq);
    }
}

}  // namespace
}  // namespace mxmoe::test
