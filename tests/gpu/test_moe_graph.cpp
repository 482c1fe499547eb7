// tests/gpu/test_moe_graph.cpp: run_moe is CUDA-graph capturable (captured once, replayed with
// changed inputs and routings, equal to direct runs bit for bit and to the CPU reference) and
// deterministic (two runs bit-identical).
#include <gtest/gtest.h>

#include <cstring>

#include "moe_harness.h"

namespace mxmoe::test {
namespace {

constexpr int kH = 3584, kK = 16, kE = 896;

TEST(MoeDeterminism, TwoRunsBitIdentical) {
  MXMOE_REQUIRE_SM90();
  auto g = make_gpu_layer(kE, kH, 384, kK, 448, 224, 401);
  ASSERT_TRUE(g);
  CaseOptions c;
  c.name = "determinism";
  c.T = 1000;
  c.sample = 2;
  CaseResult a, b;
  run_case(*g, c, &a);
  run_case(*g, c, &b);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(a.out[i].size(), b.out[i].size());
    EXPECT_EQ(0, std::memcmp(a.out[i].data(), b.out[i].data(), a.out[i].size() * 4))
        << "backend " << i << ": two runs differ";
  }
  std::printf("[determinism] T=1000, both backends: two runs bit-identical: %s\n",
              (std::memcmp(a.out[0].data(), b.out[0].data(), a.out[0].size() * 4) == 0 &&
               std::memcmp(a.out[1].data(), b.out[1].data(), a.out[1].size() * 4) == 0)
                  ? "yes"
                  : "NO");
}

TEST(MoeGraph, CaptureThenReplayWithNewInputsAndRouting) {
  MXMOE_REQUIRE_SM90();
  auto g = make_gpu_layer(kE, kH, 384, kK, 448, 224, 402);
  ASSERT_TRUE(g);
  const SyntheticLayer& s = *g->syn;
  // GPU routing (route_kimi, then the fused prologue on its ids) at every T here. T = 1: the
  // ids behind the prologue's ready flag (the default rule takes ids here: 4 local rows of 224
  // experts at I = 384, sm90::decode_spec_takes_ids); T = 8: no flag (32 rows: over the rule's
  // bytes); T = 128: a larger batch through the same chain.
  for (int T : {1, 8, 128}) {
    for (Backend backend : {Backend::kW4A16, Backend::kW4A8}) {
      for (bool gpu_route : {false, true}) {
        const Routing r = gpu_route ? Routing::kGpuLogits : Routing::kLocalHeavy;
        DevBuf<uint16_t> dx(static_cast<size_t>(T) * kH);
        DevBuf<int32_t> dids(static_cast<size_t>(T) * kK);
        DevBuf<float> dw(static_cast<size_t>(T) * kK), dlog(static_cast<size_t>(T) * kE), dbias(kE);
        DevBuf<float> dout(static_cast<size_t>(T) * kH), dout2(static_cast<size_t>(T) * kH);
        DevBuf<char> ws(workspace_bytes(g->w, T, kK));
        MoeRunParams p;
        p.num_tokens = T;
        p.top_k = kK;
        p.backend = backend;
        p.hidden = dx.get();
        bind_routing(&p, gpu_route, dlog.get(), dbias.get(), dids.get(), dw.get());
        p.out = dout.get();
        p.workspace = ws.get();
        p.workspace_size = ws.size();
        p.max_tokens = T;
        auto load = [&](const CaseInputs& in) {
          cudaError_t e = dx.upload(in.x_bits);
          if (e == cudaSuccess) e = gpu_route ? dlog.upload(in.logits) : dids.upload(in.ids);
          if (e == cudaSuccess) e = gpu_route ? dbias.upload(in.bias) : dw.upload(in.weights);
          return e;
        };
        cudaStream_t st;
        CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        CUDA_OK(load(make_inputs(s, T, r, 1)));
        cudaGraph_t graph;
        CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        const Status cs = run_moe(g->w, p, st);
        CUDA_OK(cudaStreamEndCapture(st, &graph));
        ASSERT_TRUE(cs.ok()) << cs.message();
        cudaGraphExec_t exec;
        CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
        for (uint64_t seed : {2, 3}) {
          CaseInputs in = make_inputs(s, T, r, seed);  // new activations and a new routing
          CUDA_OK(load(in));
          CUDA_OK(cudaMemset(dout.get(), 0xFF, dout.size() * 4));
          CUDA_OK(cudaGraphLaunch(exec, st));
          CUDA_OK(cudaStreamSynchronize(st));
          std::vector<float> replay;
          CUDA_OK(dout.download(&replay));
          if (gpu_route) {
            CUDA_OK(dids.download(&in.ids));
            CUDA_OK(dw.download(&in.weights));
          }
          // A direct run on the same inputs.
          MoeRunParams q = p;
          q.out = dout2.get();
          ASSERT_TRUE(run_moe(g->w, q, st).ok());
          CUDA_OK(cudaStreamSynchronize(st));
          std::vector<float> direct;
          CUDA_OK(dout2.download(&direct));
          EXPECT_EQ(0, std::memcmp(replay.data(), direct.data(), replay.size() * 4))
              << "graph replay differs from a direct run";
          const std::vector<int> rows = sample_rows(T, 4, seed);
          const ActMode mode = backend == Backend::kW4A8 ? ActMode::kMxfp8 : ActMode::kBf16;
          const auto ref = reference_rows(s.layer, in.x, kH, in.ids, in.weights, kK, rows, mode,
                                          s.situ, ExpertRange{448, 224});
          std::vector<float> got(rows.size() * kH);
          for (size_t i = 0; i < rows.size(); ++i)
            std::memcpy(&got[i * kH], &replay[static_cast<size_t>(rows[i]) * kH], kH * 4);
          const Metrics m = compare(got.data(), ref.data(), got.size());
          const std::string label = std::string("graph replay T=") + std::to_string(T) + " " +
                                    backend_name(backend) + (gpu_route ? " gpu-route" : " ids") +
                                    " seed " + std::to_string(seed);
          report(label, mode == ActMode::kBf16 ? "ref bf16" : "ref mxfp8", m);
          EXPECT_GE(m.cosine, 0.99999) << label;
          EXPECT_LE(m.nrmse, 0.005) << label;
        }
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaStreamDestroy(st);
      }
    }
  }
}

}  // namespace
}  // namespace mxmoe::test
