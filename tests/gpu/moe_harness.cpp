// tests/gpu/moe_harness.cpp: see moe_harness.h.
#include "moe_harness.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "mxmoe/formats.h"

namespace mxmoe::test {

std::unique_ptr<GpuLayer> make_gpu_layer(int E_total, int H, int I, int k, int start, int count,
                                         uint64_t seed, bool fp8_prefill) {
  auto g = std::make_unique<GpuLayer>();
  g->syn = make_layer(E_total, H, I, k, start, count, seed);
  PrepareOptions o;
  o.expert_start = start;
  o.expert_count = count;
  o.fp8_prefill_weights = fp8_prefill;
  const Status s = prepare_weights(g->syn->layer, o, &g->w);
  if (!s.ok()) {
    ADD_FAILURE() << "prepare_weights: " << s.message();
    return nullptr;
  }
  return g;
}

void bind_routing(MoeRunParams* p, bool gpu_route, const float* logits, const float* bias,
                  int32_t* ids, float* weights) {
  // (The other mode's fields cleared: run_moe takes exactly one.)
  p->router_logits = gpu_route ? logits : nullptr;
  p->correction_bias = gpu_route ? bias : nullptr;
  p->routed_ids_out = gpu_route ? ids : nullptr;
  p->routed_weights_out = gpu_route ? weights : nullptr;
  p->topk_ids = gpu_route ? nullptr : ids;
  p->topk_weights = gpu_route ? nullptr : weights;
}

CaseInputs make_inputs(const SyntheticLayer& s, int T, Routing r, uint64_t seed) {
  const int H = s.layer.cfg.routed_expert_hidden_size, E = s.layer.cfg.num_experts;
  const int k = s.layer.cfg.num_experts_per_token;
  CaseInputs in;
  random_bf16(T * H, seed, 1.0f, &in.x_bits, &in.x);
  Rng g(seed + 17);
  in.ids.assign(static_cast<size_t>(T) * k, -1);
  in.weights.assign(static_cast<size_t>(T) * k, 0.0f);
  if (r == Routing::kGpuLogits) {
    in.logits.resize(static_cast<size_t>(T) * E);
    for (auto& v : in.logits) v = 2.0f * g.normal();
    in.bias.resize(E);
    for (auto& v : in.bias) v = 0.1f * g.normal();
    return in;
  }
  for (int t = 0; t < T; ++t) {
    std::set<int> used;
    double sum = 0;
    for (int j = 0; j < k; ++j) {
      int id = -1;
      if (r == Routing::kOneExpert) {
        id = j == t % k ? s.own_start + 3 : -1;
      } else {
        for (int tries = 0; tries < 100; ++tries) {
          const double u = g.uniform();
          if (r == Routing::kLocalHeavy && u < 1.0 / 16) {
            id = -1;
            break;
          }
          id = (r == Routing::kLocalHeavy && u < 0.5) ? s.own_start + g.below(s.own_count)
                                                      : g.below(E);
          if (!used.count(id)) break;
        }
        if (id >= 0) used.insert(id);
      }
      const float w = static_cast<float>(0.05 + g.uniform());
      in.ids[static_cast<size_t>(t) * k + j] = id;
      in.weights[static_cast<size_t>(t) * k + j] = w;
      sum += w;
    }
    for (int j = 0; j < k; ++j)
      in.weights[static_cast<size_t>(t) * k + j] /= static_cast<float>(sum);
  }
  return in;
}

void run_case(const GpuLayer& gl, const CaseOptions& c, CaseResult* result) {
  const SyntheticLayer& s = *gl.syn;
  const PreparedInfo info = prepared_info(gl.w);
  const int H = info.hidden, E = info.num_experts_total, T = c.T;
  const int k = s.layer.cfg.num_experts_per_token;
  CaseInputs in = make_inputs(s, T, c.routing, c.seed);
  // fp32 input: values off the BF16 grid, so the kernel's rounding is exercised.
  if (c.f32_input)
    for (size_t i = 0; i < in.x.size(); ++i) in.x[i] *= 1.0f + 1.0f / 1024;

  const int64_t xs = H + c.x_pad, os = H + c.out_pad;
  DevBuf<float> dxf, dw, dlog, dbias, dout(static_cast<size_t>(T) * os), dbeta, dlbeta;
  DevBuf<uint16_t> dxb;
  DevBuf<int32_t> dids;
  if (c.f32_input)
    CUDA_OK(dxf.upload(padded_rows(in.x.data(), T, H, xs, static_cast<float>(NAN))));
  else
    CUDA_OK(dxb.upload(padded_rows(in.x_bits.data(), T, H, xs, kBf16Nan)));
  const bool gpu_route = c.routing == Routing::kGpuLogits;
  if (gpu_route) {
    CUDA_OK(dlog.upload(in.logits));
    CUDA_OK(dbias.upload(in.bias));
    CUDA_OK(dids.alloc(static_cast<size_t>(T) * k));
    CUDA_OK(dw.alloc(static_cast<size_t>(T) * k));
  } else {
    CUDA_OK(dids.upload(in.ids));
    CUDA_OK(dw.upload(in.weights));
  }
  std::vector<float> hb(E), hlb(E);
  SituParams situ;
  situ.beta = c.beta;
  situ.linear_beta = c.linear_beta;
  if (c.per_expert_beta) {
    for (int e = 0; e < E; ++e) {
      hb[e] = 1.5f + 0.5f * (e % 7);
      hlb[e] = 8.0f + 4.0f * (e % 5);
    }
    CUDA_OK(dbeta.upload(hb));
    CUDA_OK(dlbeta.upload(hlb));
    situ.per_expert_beta = hb.data();
    situ.per_expert_linear_beta = hlb.data();
  }
  DevBuf<char> ws(workspace_bytes(gl.w, T, k));
  ASSERT_TRUE(ws.ok()) << "workspace allocation";

  MoeRunParams p;
  p.num_tokens = T;
  p.top_k = k;
  p.hidden = c.f32_input ? static_cast<const void*>(dxf.get()) : dxb.get();
  p.hidden_dtype = c.f32_input ? InputDType::kF32 : InputDType::kBf16;
  p.hidden_stride = xs;
  bind_routing(&p, gpu_route, dlog.get(), dbias.get(), dids.get(), dw.get());
  p.beta = c.beta;
  p.linear_beta = c.linear_beta;
  p.per_expert_beta = c.per_expert_beta ? dbeta.get() : nullptr;
  p.per_expert_linear_beta = c.per_expert_beta ? dlbeta.get() : nullptr;
  p.out = dout.get();
  p.out_stride = os;
  p.workspace = ws.get();
  p.workspace_size = ws.size();
  p.max_tokens = T;

  const std::vector<int> rows = sample_rows(T, c.sample, c.seed + 5);
  const ExpertRange range{info.expert_start, info.expert_count};
  std::vector<float> ref_bf16;
  for (Backend b : c.backends) {
    p.backend = b;
    CUDA_OK(cudaMemset(dout.get(), 0xFF, dout.size() * 4));  // NaN poison
    const Status st = run_moe(gl.w, p, nullptr);
    ASSERT_TRUE(st.ok()) << c.name << ": " << st.message();
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> img;
    CUDA_OK(dout.download(&img));
    std::vector<float> out(static_cast<size_t>(T) * H);
    size_t unwritten = 0, gap_written = 0;
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < H; ++h) {
        const float v = img[t * os + h];
        unwritten += !std::isfinite(v);
        out[static_cast<size_t>(t) * H + h] = v;
      }
      for (int64_t h = H; h < os; ++h) gap_written += !std::isnan(img[t * os + h]);
    }
    EXPECT_EQ(unwritten, 0u) << c.name << ": non-finite or unwritten output elements";
    EXPECT_EQ(gap_written, 0u) << c.name << ": wrote between output rows";
    if (gpu_route && b == c.backends.front()) {
      // The GPU's routing against route_kimi, then the reference uses the GPU's choice.
      RoutingConfig rc;
      rc.num_experts = E;
      rc.top_k = k;
      std::vector<int32_t> want_ids(static_cast<size_t>(T) * k);
      std::vector<float> want_w(static_cast<size_t>(T) * k);
      route_kimi(in.logits.data(), in.bias.data(), T, rc, want_ids.data(), want_w.data());
      CUDA_OK(dids.download(&in.ids));
      CUDA_OK(dw.download(&in.weights));
      size_t diff = 0;
      for (size_t i = 0; i < in.ids.size(); ++i) diff += in.ids[i] != want_ids[i];
      EXPECT_EQ(diff, 0u) << c.name << ": GPU routing differs from route_kimi";
      size_t local = 0;
      for (int32_t id : in.ids) local += id >= range.start && id < range.start + range.count;
      std::printf("[route] %s: %zu of %zu pairs owned by this rank, ids == route_kimi: %s\n",
                  c.name.c_str(), local, in.ids.size(), diff == 0 ? "yes" : "NO");
    }
    const ActMode mode = b == Backend::kW4A8 ? ActMode::kMxfp8 : ActMode::kBf16;
    const std::vector<float> ref =
        reference_rows(s.layer, in.x, H, in.ids, in.weights, k, rows, mode, situ, range);
    std::vector<float> got(rows.size() * H);
    for (size_t i = 0; i < rows.size(); ++i)
      std::memcpy(&got[i * H], &out[static_cast<size_t>(rows[i]) * H], H * 4);
    const std::string label = c.name + " " + backend_name(b) + " T=" + std::to_string(T);
    const Metrics m = compare(got.data(), ref.data(), got.size());
    report(label, mode == ActMode::kBf16 ? "ref bf16" : "ref mxfp8", m);
    EXPECT_GE(m.cosine, 0.99999) << label;
    EXPECT_LE(m.nrmse, 0.005) << label;
    if (c.cross_mode_bar && b == Backend::kW4A8) {
      if (ref_bf16.empty())
        ref_bf16 = reference_rows(s.layer, in.x, H, in.ids, in.weights, k, rows, ActMode::kBf16,
                                  situ, range);
      const Metrics x = compare(got.data(), ref_bf16.data(), got.size());
      report(label, "ref bf16", x);
      // What the format itself costs on these inputs: the CPU mxfp8 reference against the CPU
      // bf16 reference. The kernel must add nothing measurable to it.
      const Metrics fmt = compare(ref.data(), ref_bf16.data(), got.size());
      report(label + " (CPU mxfp8)", "ref bf16", fmt);
      EXPECT_GE(x.cosine, fmt.cosine - 1e-5) << label << ": w4a8 kernel adds error to MXFP8's";
      EXPECT_LE(x.nrmse, fmt.nrmse + 1e-3) << label << ": w4a8 kernel adds error to MXFP8's";
      // Issue 3's bar (cosine >= 0.9996, NRMSE <= 2.8%) quotes the SM120 report (0.99962,
      // 2.75%). Those numbers are what the SiTU-output requantization alone costs: the bf16
      // reference there was fed the same MXFP8-quantized expert input (docs/NUMERICS.md,
      // "w4a8 against bf16"). With an independently rounded BF16 input, exact MXFP8 itself
      // measures ~4.7% here (the line above): SiTU amplifies the input's rounding error. So the
      // bar is enforced in the report's setting, and the raw-input gap is printed above.
      std::vector<float> xq(in.x.size());
      quantize_activations(in.x.data(), static_cast<int>(in.x.size() / H), H, ActMode::kMxfp8,
                           xq.data());
      const std::vector<float> ref_bf16_mxin =
          reference_rows(s.layer, xq, H, in.ids, in.weights, k, rows, ActMode::kBf16, situ, range);
      const Metrics bar = compare(got.data(), ref_bf16_mxin.data(), got.size());
      report(label, "ref bf16 (mxfp8 input)", bar);
      EXPECT_GE(bar.cosine, 0.9996) << label << ": issue 3 bar, w4a8 vs bf16 reference";
      EXPECT_LE(bar.nrmse, 0.028) << label << ": issue 3 bar, w4a8 vs bf16 reference";
      std::printf(
          "[issue-bar] %s w4a8 vs bf16 reference on the same MXFP8 input: cosine %.7f "
          "NRMSE %.4f%% -> %s; with a raw BF16 input: cosine %.7f NRMSE %.4f%% (CPU "
          "mxfp8 itself: %.4f%%)\n",
          label.c_str(), bar.cosine, bar.nrmse * 100,
          bar.cosine >= 0.9996 && bar.nrmse <= 0.028 ? "met" : "NOT MET", x.cosine, x.nrmse * 100,
          fmt.nrmse * 100);
    }
    if (mode == ActMode::kBf16 && c.cross_mode_bar) ref_bf16 = ref;
    if (result) result->out[static_cast<int>(b)] = std::move(out);
  }
}

MoeRun::MoeRun(const GpuLayer& g, int T_, Backend backend, int x_pad, bool per_expert)
    : T(T_),
      H(g.syn->layer.cfg.routed_expert_hidden_size),
      k(g.syn->layer.cfg.num_experts_per_token),
      xs(H + x_pad),
      x(static_cast<size_t>(T_) * xs),
      ids(static_cast<size_t>(T_) * k),
      w(static_cast<size_t>(T_) * k),
      out(static_cast<size_t>(T_) * H),
      ws(workspace_bytes(g.w, T_, k)) {
  p.num_tokens = T;
  p.top_k = k;
  p.backend = backend;
  p.hidden = x.get();
  p.hidden_stride = xs;
  p.topk_ids = ids.get();
  p.topk_weights = w.get();
  p.out = out.get();
  p.workspace = ws.get();
  p.workspace_size = ws.size();
  p.max_tokens = T;
  if (per_expert) {  // by global id, as moe.h asks
    const int E = g.syn->layer.cfg.num_experts;
    std::vector<float> b(E), lb(E);
    for (int e = 0; e < E; ++e) {
      b[e] = 1.5f + 0.5f * (e % 7);
      lb[e] = 8.0f + 4.0f * (e % 5);
    }
    EXPECT_EQ(beta.upload(b), cudaSuccess);
    EXPECT_EQ(lbeta.upload(lb), cudaSuccess);
    p.per_expert_beta = beta.get();
    p.per_expert_linear_beta = lbeta.get();
  }
}

cudaError_t MoeRun::load(const CaseInputs& in) {
  cudaError_t e = x.upload(padded_rows(in.x_bits.data(), T, H, xs, kBf16Nan));
  if (e == cudaSuccess) e = ids.upload(in.ids);
  if (e == cudaSuccess) e = w.upload(in.weights);
  return e;
}

void MoeRun::eager(const GpuLayer& g, std::vector<float>* o) {
  CUDA_OK(cudaMemset(out.get(), 0xFF, out.size() * 4));
  const Status s = run_moe(g.w, p, nullptr);
  ASSERT_TRUE(s.ok()) << s.message();
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(out.download(o));
}

}  // namespace mxmoe::test
