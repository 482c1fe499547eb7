// tests/gpu/test_moe_decode_spec.cpp: run_moe with the grouping known before the wait
// (src/cuda/sm90/decode_gemm.h, DecodeSpec; MXMOE_DECODE_SPEC). At decode sizes with the caller's
// ids, every mode (the decode GEMMs' tile lists from the ids; with or without the first weights
// before pdl::wait; GEMM1 on the bulk ring triggering GEMM2 early; GEMM1 on the bulk ring on its
// own inputs, beside the glue: W4A16 on BF16 rows) must give the bits of mode 0, for both
// backends and both mainloops, with scalar and per-expert SiTU parameters and strided rows,
// eagerly and in a captured graph replayed with new ids (the kernels read the ids before they
// wait: a stale or early read would show as a difference); mode 0 is also held to the CPU
// reference, so the comparison is not between two wrong answers.
// With router logits (route_kimi, then the fused prologue on its ids) the GEMMs read the routed
// ids behind the prologue's ready flag: the same bits again, eagerly and in replays with new
// logits. (The separate-glue path, MXMOE_GLUE=separate, is read once per process: not toggled
// here.)
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "moe_harness.h"
#include "sm90/decode_gemm.h"

namespace mxmoe::test {
namespace {

using sm90::kDecodeSpecEarlyGemm2;
using sm90::kDecodeSpecOwnInputs;
using sm90::kDecodeSpecPreload;
using sm90::kDecodeSpecTiles;
// The modes compared with mode 0 (decode_gemm.h: a bit set).
constexpr int kModes[] = {kDecodeSpecTiles,
                          kDecodeSpecTiles | kDecodeSpecPreload,
                          kDecodeSpecEarlyGemm2,
                          sm90::kDecodeSpecEarlyGemm2OneTile,
                          sm90::kDecodeSpecEarlyGemm2Split,
                          sm90::kDecodeSpecSmall,
                          kDecodeSpecTiles | sm90::kDecodeSpecEarlyGemm2OneTile,
                          kDecodeSpecTiles | kDecodeSpecEarlyGemm2,
                          kDecodeSpecTiles | kDecodeSpecPreload | kDecodeSpecEarlyGemm2,
                          kDecodeSpecTiles | kDecodeSpecEarlyGemm2 | kDecodeSpecOwnInputs,
                          sm90::kDecodeSpecAll};
constexpr int kNumModes = sizeof(kModes) / sizeof(kModes[0]);

// An expert-parallel rank of a small layer: 16 local experts of 64, top-4; GEMM1 has 16 K steps
// and GEMM2 4 (the bulk ring's short-K rule), so both mainloops and several splits run.
constexpr int kE = 64, kH = 1024, kI = 256, kK = 4, kStart = 16, kCount = 16;

// The process's decode knobs back to their rules however a test ends.
struct Knobs {
  int saved_spec = sm90::decode_spec();
  Knobs(int mainloop, int spec) {
    sm90::decode_set_mainloop(mainloop);
    sm90::decode_set_spec(spec);
  }
  ~Knobs() {
    sm90::decode_set_spec(saved_spec);
    sm90::decode_set_mainloop(0);
  }
};

void expect_reference(const GpuLayer& g, const CaseInputs& in, const MoeRun& run,
                      const std::vector<float>& out, const std::string& label) {
  const int T = run.T;
  const std::vector<int> rows = sample_rows(T, 6, 7);
  const ActMode mode = run.p.backend == Backend::kW4A8 ? ActMode::kMxfp8 : ActMode::kBf16;
  SituParams situ = g.syn->situ;
  std::vector<float> b, lb;
  if (run.p.per_expert_beta) {
    EXPECT_EQ(run.beta.download(&b), cudaSuccess);
    EXPECT_EQ(run.lbeta.download(&lb), cudaSuccess);
    situ.per_expert_beta = b.data();
    situ.per_expert_linear_beta = lb.data();
  }
  const auto ref = reference_rows(g.syn->layer, in.x, kH, in.ids, in.weights, kK, rows, mode, situ,
                                  ExpertRange{kStart, kCount});
  std::vector<float> got(rows.size() * kH);
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(&got[i * kH], &out[static_cast<size_t>(rows[i]) * kH], kH * 4);
  const Metrics m = compare(got.data(), ref.data(), got.size());
  report(label, mode == ActMode::kBf16 ? "ref bf16" : "ref mxfp8", m);
  EXPECT_EQ(m.nonfinite, 0u) << label;
  EXPECT_GE(m.cosine, 0.99999) << label;
  EXPECT_LE(m.nrmse, 0.005) << label;
}

TEST(MoeDecodeSpec, EagerModesBitIdentical) {
  MXMOE_REQUIRE_SM90();
  auto g = make_gpu_layer(kE, kH, kI, kK, kStart, kCount, 601);
  ASSERT_TRUE(g);
  int cases = 0, identical = 0;
  // Variants: 0 contiguous rows, scalar SiTU parameters; 1 rows 8 elements apart and
  // per-expert parameters; 2 rows 4 elements apart (no longer 16-byte: own inputs fall back).
  for (int variant = 0; variant < 3; ++variant) {
    for (Backend backend : {Backend::kW4A16, Backend::kW4A8}) {
      for (int mainloop : {0, sm90::kDecodeBulkRing, sm90::kDecodeRegStream}) {
        for (int T : {1, 2, 5, 16, 40}) {
          for (Routing r : {Routing::kLocalHeavy, Routing::kOneExpert}) {
            if (variant > 0 && (mainloop == sm90::kDecodeRegStream || T == 16)) continue;
            const CaseInputs in = make_inputs(*g->syn, T, r, 1000 + T + 100 * variant);
            MoeRun run(*g, T, backend, variant == 0 ? 0 : variant == 1 ? 8 : 4, variant == 1);
            CUDA_OK(run.load(in));
            std::vector<float> out[kNumModes + 1];
            for (int m = 0; m <= kNumModes; ++m) {
              const Knobs knobs(mainloop, m == 0 ? 0 : kModes[m - 1]);
              run.eager(*g, &out[m]);
            }
            char label[160];
            std::snprintf(label, sizeof(label), "spec %s mainloop %d T=%d %s variant %d",
                          backend_name(backend), mainloop, T,
                          r == Routing::kOneExpert ? "one-expert" : "local-heavy", variant);
            for (int m = 1; m <= kNumModes; ++m) {
              const bool same = std::memcmp(out[0].data(), out[m].data(), out[0].size() * 4) == 0;
              EXPECT_TRUE(same) << label << ": mode " << kModes[m - 1] << " differs from mode 0";
              ++cases;
              identical += same ? 1 : 0;
            }
            if (mainloop == 0 || variant > 0) expect_reference(*g, in, run, out[0], label);
          }
        }
      }
    }
  }
  std::printf("[decode spec] eager: %d of %d speculating runs bit-identical to mode 0\n", identical,
              cases);
}

TEST(MoeDecodeSpec, GraphReplayReadsEachReplaysIds) {
  // Captured once under each of four modes (every bit; the early trigger and own inputs
  // without the preload; the one-tile trigger without the ids; the default rule), replayed after
  // new ids and activations were written: each replay equals an eager mode-0 run on the same
  // inputs.
  MXMOE_REQUIRE_SM90();
  auto g = make_gpu_layer(kE, kH, kI, kK, kStart, kCount, 602);
  ASSERT_TRUE(g);
  for (int mode :
       {sm90::kDecodeSpecAll, kModes[kNumModes - 2], kModes[3], sm90::kDecodeSpecSmall}) {
    for (Backend backend : {Backend::kW4A16, Backend::kW4A8}) {
      for (int T : {1, 3, 12}) {  // (T=12: the rule's own-inputs window, 12 rows of 48 ids)
        MoeRun run(*g, T, backend);
        CUDA_OK(run.load(make_inputs(*g->syn, T, Routing::kLocalHeavy, 1)));
        cudaStream_t st;
        CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        {
          const Knobs knobs(0, mode);
          CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
          const Status cs = run_moe(g->w, run.p, st);
          CUDA_OK(cudaStreamEndCapture(st, &graph));
          ASSERT_TRUE(cs.ok()) << cs.message();
        }
        CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
        for (uint64_t seed : {2, 3, 4}) {
          const CaseInputs in =
              make_inputs(*g->syn, T, seed == 3 ? Routing::kOneExpert : Routing::kLocalHeavy, seed);
          CUDA_OK(run.load(in));
          CUDA_OK(cudaMemset(run.out.get(), 0xFF, run.out.size() * 4));
          CUDA_OK(cudaGraphLaunch(exec, st));
          CUDA_OK(cudaStreamSynchronize(st));
          std::vector<float> replay, direct;
          CUDA_OK(run.out.download(&replay));
          {
            const Knobs off(0, 0);  // mode 0
            run.eager(*g, &direct);
          }
          const std::string label = "spec graph mode " + std::to_string(mode) + " " +
                                    backend_name(backend) + " T=" + std::to_string(T) + " seed " +
                                    std::to_string(seed);
          EXPECT_EQ(0, std::memcmp(replay.data(), direct.data(), replay.size() * 4))
              << label << ": the replay differs from an eager mode-0 run";
          expect_reference(*g, in, run, replay, label);
        }
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaStreamDestroy(st);
      }
    }
  }
}

TEST(MoeDecodeSpec, GpuRoutedIdsBehindTheReadyFlag) {
  // GPU routing before the fused prologue (router logits in): where the mode takes ids, the
  // decode GEMMs read the routed ids once the prologue's ready flag is set (run.cpp,
  // routed_spec). Each mode must give mode 0's bits eagerly, and a graph captured under every bit
  // and replayed with new logits must equal eager mode-0 runs (a GEMM that read the ids before
  // the flag would build the last replay's tiles: a difference).
  MXMOE_REQUIRE_SM90();
  auto g = make_gpu_layer(kE, kH, kI, kK, kStart, kCount, 603);
  ASSERT_TRUE(g);
  const int modes[] = {kDecodeSpecTiles, kDecodeSpecTiles | kDecodeSpecPreload,
                       sm90::kDecodeSpecSmall, sm90::kDecodeSpecAll};
  int cases = 0, identical = 0;
  for (Backend backend : {Backend::kW4A16, Backend::kW4A8}) {
    for (int T : {1, 2, 5, 16}) {
      MoeRun run(*g, T, backend);
      DevBuf<float> logits(static_cast<size_t>(T) * kE), bias(kE);
      bind_routing(&run.p, true, logits.get(), bias.get(), run.ids.get(), run.w.get());
      auto load = [&](uint64_t seed, CaseInputs* in) {
        *in = make_inputs(*g->syn, T, Routing::kGpuLogits, seed);
        cudaError_t e = run.load(*in);
        if (e == cudaSuccess) e = logits.upload(in->logits);
        if (e == cudaSuccess) e = bias.upload(in->bias);
        return e;
      };
      // The routed ids and weights the run wrote, for the CPU reference.
      auto routed = [&](CaseInputs* in) {
        CUDA_OK(run.ids.download(&in->ids));
        CUDA_OK(run.w.download(&in->weights));
      };
      const std::string what = std::string(backend_name(backend)) + " T=" + std::to_string(T);
      CaseInputs in;
      CUDA_OK(load(700 + T, &in));
      std::vector<float> base, got;
      {
        const Knobs off(0, 0);
        run.eager(*g, &base);
      }
      routed(&in);
      expect_reference(*g, in, run, base, "gpu-routed spec mode 0 " + what);
      for (int mode : modes) {
        const Knobs knobs(0, mode);
        run.eager(*g, &got);
        const bool same = std::memcmp(base.data(), got.data(), base.size() * 4) == 0;
        EXPECT_TRUE(same) << what << ": mode " << mode << " differs from mode 0";
        ++cases;
        identical += same ? 1 : 0;
      }
      cudaStream_t st;
      CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      {
        const Knobs all(0, sm90::kDecodeSpecAll);
        CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        const Status cs = run_moe(g->w, run.p, st);
        CUDA_OK(cudaStreamEndCapture(st, &graph));
        ASSERT_TRUE(cs.ok()) << cs.message();
      }
      CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
      for (uint64_t seed : {2, 3}) {
        CUDA_OK(load(800 + 10 * T + seed, &in));
        CUDA_OK(cudaMemset(run.out.get(), 0xFF, run.out.size() * 4));
        CUDA_OK(cudaGraphLaunch(exec, st));
        CUDA_OK(cudaStreamSynchronize(st));
        std::vector<float> replay;
        CUDA_OK(run.out.download(&replay));
        routed(&in);
        {
          const Knobs off(0, 0);
          run.eager(*g, &got);
        }
        const std::string label = "gpu-routed spec graph " + what + " seed " + std::to_string(seed);
        const bool same = std::memcmp(replay.data(), got.data(), replay.size() * 4) == 0;
        EXPECT_TRUE(same) << label << ": the replay differs from an eager mode-0 run";
        ++cases;
        identical += same ? 1 : 0;
        expect_reference(*g, in, run, replay, label);
      }
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaStreamDestroy(st);
    }
  }
  std::printf("[decode spec] gpu-routed: %d of %d runs bit-identical to mode 0\n", identical,
              cases);
  EXPECT_EQ(identical, cases);
}

}  // namespace
}  // namespace mxmoe::test
