// tests/gpu/test_glue_prologue.cpp: the fused decode prologue (activation quantization,
// grouping, SiTU fill, on the caller's ids or on route_kimi's run first) against the separate
// glue kernels, every output bit for bit, and its plan's fallback outside its bounds.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "glue_test_util.h"
#include "gpu_test_util.h"
#include "mxmoe/formats.h"
#include "smxx/glue.h"

namespace mxmoe::test {
namespace {

// ---- the fused decode prologue against the separate kernels, every output bit for bit ----
struct PrologueCase {
  const char* name;
  int T, k, E_total, start, count;
  bool gpu_routing, f32_input, mxfp8, per_expert_beta;
  int64_t x_pad;  // hidden_stride - H
};

template <typename T>
void expect_same_bits(const std::vector<T>& a, const std::vector<T>& b, const char* what,
                      const char* name) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0 && ++bad <= 3)
      ADD_FAILURE() << name << " " << what << "[" << i << "] differs";
  EXPECT_EQ(bad, 0u) << name << " " << what;
}
// Both buffers, whole, then expect_same_bits.
template <typename T>
void expect_same_download(const DevBuf<T>& a, const DevBuf<T>& b, const char* what,
                          const char* name) {
  std::vector<T> ha, hb;
  CUDA_OK(a.download(&ha));
  CUDA_OK(b.download(&hb));
  expect_same_bits(ha, hb, what, name);
}

void run_prologue_case(const PrologueCase& c) {
  const int H = 3584, T = c.T, k = c.k, P = T * k, El = c.count;
  const int64_t stride = H + c.x_pad;
  Rng r(c.T * 131 + c.k);
  std::vector<float> x = varied_rows(T, H, c.T + 7);
  const StridedRows rows = strided_rows(x, T, H, stride);
  std::vector<float> logits(static_cast<size_t>(T) * c.E_total), bias(c.E_total);
  for (auto& v : logits) v = 2.0f * r.normal();
  for (auto& b : bias) b = 0.1f * r.normal();
  std::vector<int32_t> ids(P);
  std::vector<float> w(P);
  for (int i = 0; i < P; ++i) {
    const int u = r.below(10);
    ids[i] = u == 0 ? -1 : u < 6 ? c.start + r.below(El) : r.below(c.E_total);
    w[i] = static_cast<float>(r.uniform());
  }
  std::vector<float> pb(c.E_total), plb(c.E_total);
  for (int e = 0; e < c.E_total; ++e) {
    pb[e] = 1.0f + 0.01f * e;
    plb[e] = 20.0f + 0.02f * e;
  }
  DevBuf<float> dxf, dlog, dbias, dw, dpb, dplb;
  DevBuf<uint16_t> dxb;
  DevBuf<int32_t> dids;
  CUDA_OK(c.f32_input ? dxf.upload(rows.f32) : dxb.upload(rows.bf16));
  CUDA_OK(dlog.upload(logits));
  CUDA_OK(dbias.upload(bias));
  CUDA_OK(dids.upload(ids));
  CUDA_OK(dw.upload(w));
  CUDA_OK(dpb.upload(pb));
  CUDA_OK(dplb.upload(plb));
  const void* src = c.f32_input ? static_cast<const void*>(dxf.get()) : dxb.get();

  struct Out {
    Out(int T, int H, int P, int El) : xq(static_cast<size_t>(T) * H), rid(P), rw(P), grp(P, El) {}
    DevBuf<uint16_t> xq;
    DevBuf<int32_t> rid;
    DevBuf<float> rw;
    GroupBuffers grp;
  } sep(T, H, P, El), fused(T, H, P, El);
  for (Out* o : {&sep, &fused}) {
    // Same poison in both, so untouched tails compare equal too.
    CUDA_OK(cudaMemset(o->xq.get(), 0xAB, o->xq.size() * 2));
    CUDA_OK(cudaMemset(o->rid.get(), 0xAB, P * 4));
    CUDA_OK(cudaMemset(o->rw.get(), 0xAB, P * 4));
    GroupBuffers& g = o->grp;
    CUDA_OK(cudaMemset(g.off.get(), 0xAB, (El + 1) * 4));
    CUDA_OK(cudaMemset(g.xrow.get(), 0xAB, P * 4));
    CUDA_OK(cudaMemset(g.pos.get(), 0xAB, P * 4));
    CUDA_OK(cudaMemset(g.otok.get(), 0xAB, P * 4));
    CUDA_OK(cudaMemset(g.has.get(), 0xAB, El * 4));
    CUDA_OK(cudaMemset(g.roww.get(), 0xAB, P * 4));
    CUDA_OK(cudaMemset(g.beta.get(), 0xAB, El * 4));
    CUDA_OK(cudaMemset(g.lbeta.get(), 0xAB, El * 4));
    CUDA_OK(cudaMemset(g.ready.get(), 0xAB, El * 4));
  }
  const float* pbp = c.per_expert_beta ? dpb.get() : nullptr;
  const float* plbp = c.per_expert_beta ? dplb.get() : nullptr;
  // Separate kernels.
  CUDA_OK(smxx::launch_quantize_input(src, c.f32_input, stride, T, H, c.mxfp8,
                                      reinterpret_cast<__nv_bfloat16*>(sep.xq.get()), nullptr));
  if (c.gpu_routing)
    CUDA_OK(smxx::launch_route_kimi(dlog.get(), c.E_total, dbias.get(), T, c.E_total, k, true, 1.0f,
                                    sep.rid.get(), sep.rw.get(), nullptr));
  // The SiTU parameters through the grouping's scan, as run_moe.
  const smxx::GroupArgs g = sep.grp.args(c.gpu_routing ? sep.rid.get() : dids.get(),
                                         c.gpu_routing ? sep.rw.get() : dw.get(), T, k, c.start, El,
                                         true, true, pbp, plbp);
  const char* failed = nullptr;
  CUDA_OK(smxx::launch_group(g, nullptr, &failed));
  // Fused.
  const smxx::PrologueShape shape = smxx::prologue_plan(T, k, c.E_total, El, c.gpu_routing);
  ASSERT_TRUE(shape.ok) << c.name;
  smxx::PrologueArgs a;
  a.x = src;
  a.x_is_f32 = c.f32_input;
  a.x_stride = stride;
  a.H = H;
  a.mxfp8 = c.mxfp8;
  a.xq = fused.xq.get();
  EXPECT_EQ(shape.route_first, c.gpu_routing) << c.name;  // the GPU router always runs first
  if (shape.route_first) {
    CUDA_OK(smxx::launch_route_kimi(dlog.get(), c.E_total, dbias.get(), T, c.E_total, k, true, 1.0f,
                                    fused.rid.get(), fused.rw.get(), nullptr));
    a.ids = fused.rid.get();
    a.weights = fused.rw.get();
  } else {
    a.ids = dids.get();
    a.weights = dw.get();
  }
  a.T = T;
  a.k = k;
  a.expert_start = c.start;
  a.expert_count = El;
  a.expert_offsets = fused.grp.off.get();
  a.x_row = fused.grp.xrow.get();
  a.row_weight = fused.grp.roww.get();
  a.pair_pos = fused.grp.pos.get();
  a.out_token = fused.grp.otok.get();
  a.expert_has_out = fused.grp.has.get();
  a.situ = fused.grp.situ_fill(pbp, plbp);
  CUDA_OK(smxx::launch_prologue(a, shape, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  expect_same_download(fused.xq, sep.xq, "xq", c.name);
  expect_same_download(fused.rid, sep.rid, "routed ids", c.name);
  expect_same_download(fused.rw, sep.rw, "routed weights", c.name);
  std::vector<int32_t> off, foff;
  CUDA_OK(sep.grp.off.download(&off));
  CUDA_OK(fused.grp.off.download(&foff));
  expect_same_bits(foff, off, "expert_offsets", c.name);
  expect_same_download(fused.grp.xrow, sep.grp.xrow, "x_row", c.name);
  expect_same_download(fused.grp.roww, sep.grp.roww, "row_weight", c.name);
  expect_same_download(fused.grp.pos, sep.grp.pos, "pair_pos", c.name);
  expect_same_download(fused.grp.otok, sep.grp.otok, "out_token", c.name);
  expect_same_download(fused.grp.has, sep.grp.has, "expert_has_out", c.name);
  expect_same_download(fused.grp.beta, sep.grp.beta, "beta", c.name);
  expect_same_download(fused.grp.lbeta, sep.grp.lbeta, "linear_beta", c.name);
  // The GEMMs' per-expert counters, zeroed by both.
  std::vector<int32_t> fready, sready;
  CUDA_OK(fused.grp.ready.download(&fready));
  CUDA_OK(sep.grp.ready.download(&sready));
  expect_same_bits(fready, std::vector<int32_t>(El, 0), "h_ready (prologue)", c.name);
  expect_same_bits(sready, std::vector<int32_t>(El, 0), "h_ready (group scan)", c.name);
  std::printf(
      "[prologue] %s: T=%d k=%d E=%d local [%d, %d) %s routing: %d owned pairs, "
      "chunks %d, %d quantize CTAs, %zu B smem: identical\n",
      c.name, T, k, c.E_total, c.start, c.start + El, c.gpu_routing ? "GPU" : "caller", off[El],
      shape.chunks, shape.quant_ctas, shape.smem_bytes);
}

TEST(GpuPrologue, MatchesSeparateKernelsBitForBit) {
  MXMOE_REQUIRE_SM90();
  const PrologueCase cases[] = {
      {"ep16-t1-gpu-route-w4a8", 1, 16, 896, 112, 56, true, false, true, false, 0},
      {"ep16-t8-caller-w4a16", 8, 1, 896, 0, 56, false, false, false, false, 64},
      {"full-t64-gpu-route-f32", 64, 16, 896, 0, 896, true, true, true, true, 96},
      {"tp8ep4-t256-caller-4096pairs", 256, 16, 896, 224, 224, false, false, true, false, 0},
      {"ep16-t4096-k1-caller", 4096, 1, 896, 56, 56, false, true, false, true, 8},
      {"wide-k40-gpu-route", 37, 40, 40, 0, 40, true, false, true, false, 0},
      {"t3-unaligned-stride", 3, 16, 896, 112, 56, true, false, true, false, 3},
      {"ep16-t16-gpu-route", 16, 16, 896, 448, 56, true, true, true, false, 0},
      {"e2048-t2-smem-route", 2, 16, 2048, 64, 64, true, false, true, false, 0},
  };
  for (const auto& c : cases) run_prologue_case(c);
}

TEST(GpuPrologue, PlanFallsBackOutsideItsBounds) {
  // Host-only: sizes alone decide (graph-capturable).
  EXPECT_TRUE(smxx::prologue_plan(256, 16, 896, 224, true).ok);
  EXPECT_FALSE(smxx::prologue_plan(257, 16, 896, 224, true).ok);  // 4112 pairs
  EXPECT_FALSE(smxx::prologue_plan(1, 16, 896, 7000, false).ok);  // counters exceed 48 KB
  // GPU routing: route_kimi first at every T (the prologue's header says why), given k <= E.
  for (int T : {1, 8, 16, 17, 64, 256}) {
    EXPECT_TRUE(smxx::prologue_plan(T, 16, 896, 56, true).route_first) << T;
    EXPECT_FALSE(smxx::prologue_plan(T, 16, 896, 56, false).route_first) << T;
  }
  EXPECT_TRUE(smxx::prologue_plan(1, 16, 6144, 56, true).ok);
  EXPECT_FALSE(smxx::prologue_plan(1, 17, 16, 16, true).ok);  // k > E
  // The grouping counters alone size the shared memory: chunks * El + El + 1 words.
  const smxx::PrologueShape one = smxx::prologue_plan(1, 16, 896, 56, true);
  EXPECT_EQ(one.chunks, 1);
  EXPECT_EQ(one.smem_bytes, (56u + 56u + 1u) * 4u);
  // Quantize CTAs: one per token up to 32 (each takes most of an SM; GEMM1's early CTAs need the
  // rest: bench/NOTES.md G round 13), unless MXMOE_PROLOGUE_QUANT_CTAS sets the cap for an A/B.
  if (std::getenv("MXMOE_PROLOGUE_QUANT_CTAS") == nullptr) {
    EXPECT_EQ(smxx::prologue_plan(8, 16, 896, 56, false).quant_ctas, 8);
    EXPECT_EQ(smxx::prologue_plan(32, 16, 896, 56, false).quant_ctas, 32);
    EXPECT_EQ(smxx::prologue_plan(128, 16, 896, 224, false).quant_ctas, 32);
  }
  // route_kimi's per-warp scratch (route.cu).
  EXPECT_EQ(smxx::route_scratch_words(896), smxx::kRouteSelectWords);
  EXPECT_EQ(smxx::route_scratch_words(1501), 1502);  // even: 8-byte aligned per warp
}

}  // namespace
}  // namespace mxmoe::test
