// tests/gpu/bench_moe_chain_timeline.cpp: where a real decode step's time goes, kernel by kernel,
// on one clock (bench/NOTES.md D round 36). DISABLED_ by default; diagnostic builds only
// (cmake -DMXMOE_DECODE_TIMELINE=ON: the decode GEMMs, the prologue and the combine stamp each
// CTA's entry, wait done and exit, the GEMMs also their first stage and last mainloop); skips
// loudly elsewhere. Run with --gtest_also_run_disabled_tests --gtest_filter='*ChainTimeline*'.
//
// The whole run_moe (w4a16, the caller's ids, Kimi-K3's real widths: EP16 = 56 local experts of
// 896 with I 3072, TP8xEP4 = 224 with I 384, top-16) captured in one CUDA graph, as an engine
// runs it. Each replay after a 256 MB L2 flush (but the warm run's); the graph's median time over
// 15 replays, then the stamps of 9 more, each in us from the chain's first stamped entry: per
// kernel, the min / median / max over its CTAs, and of each of those the median over the 9 replays.
// The token rows are drawn until the local pairs are the expected count (EP16 1 per token, TP8xEP4
// 4), so T = 1 is the bench's typical step. Each case under four MXMOE_DECODE_SPEC modes and warm
// (kRuns), the prologue's CTA 0 also with its two phases (ids counted: data, offsets written:
// math). Checks: every kernel of the chain stamped, and the timed replays' output equal bit for bit
// to an eager run's.
// Environment (diagnostics, bench/NOTES.md D round 41): MXMOE_CHAIN_TOKENS="EP16:7;TP8xEP4:16"
// picks the layouts and token counts (default T = 1, 2, 8 on both); MXMOE_CHAIN_RULE_ONLY=1 runs
// each case under the rule (flushed) alone, e.g. beside MXMOE_DECODE_SPLIT1 in a second process.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cta_timeline_stats.h"
#include "moe_harness.h"
#include "sm90/decode_gemm.h"
#include "smxx/cta_timeline.h"
#include "smxx/glue.h"

namespace mxmoe::test {
namespace {

using namespace cta_timeline;  // kTl*

constexpr int kH = 3584, kK = 16, kE = 896;
constexpr int kReplays = 9;
constexpr size_t kFlushBytes = 256u << 20;
// The runs of each case: MXMOE_DECODE_SPEC modes (sm90/decode_gemm.h) after an L2 flush: the
// rule; none; the rule's pair (tiles from the ids, early trigger) with GEMM1's first weights
// before its wait; the pair with GEMM1 on its own inputs (its wait moved to its exit); then the
// rule warm (no flush: what the flush costs each phase, code fetch included: bench/NOTES.md D
// round 37).
struct ChainRun {
  int spec;
  bool flushed;
};
constexpr ChainRun kRuns[] = {
    {sm90::kDecodeSpecDefault, true},
    {sm90::kDecodeSpecOff, true},
    {sm90::kDecodeSpecTiles | sm90::kDecodeSpecPreload | sm90::kDecodeSpecEarlyGemm2, true},
    {sm90::kDecodeSpecTiles | sm90::kDecodeSpecEarlyGemm2 | sm90::kDecodeSpecOwnInputs, true},
    {sm90::kDecodeSpecDefault, false}};

// The token counts of `layout` in MXMOE_CHAIN_TOKENS ("EP16:7,8;TP8xEP4:16"), else 1, 2, 8.
std::vector<int> chain_tokens(const std::string& layout) {
  const char* env = std::getenv("MXMOE_CHAIN_TOKENS");
  if (env == nullptr) return {1, 2, 8};
  std::vector<int> out;
  const std::string all = env;
  size_t at = 0;
  while (at < all.size()) {
    size_t end = all.find(';', at);
    if (end == std::string::npos) end = all.size();
    const std::string item = all.substr(at, end - at);
    const size_t colon = item.find(':');
    if (colon != std::string::npos && item.substr(0, colon) == layout) {
      size_t p = colon + 1;
      while (p < item.size()) {
        size_t q = item.find(',', p);
        if (q == std::string::npos) q = item.size();
        out.push_back(std::atoi(item.substr(p, q - p).c_str()));
        p = q + 1;
      }
    }
    at = end + 1;
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? -1 : v[v.size() / 2];
}

// Caller ids of T tokens whose local pairs number T * per_token (the first seed from `seed` on
// that draws it), so the step has the typical expert count of the layout; also the distinct
// local experts that draw reaches.
CaseInputs typical_inputs(const SyntheticLayer& s, int T, int per_token, uint64_t seed,
                          int* local_pairs, int* distinct_experts) {
  for (uint64_t sd = seed;; ++sd) {
    CaseInputs in = make_inputs(s, T, Routing::kUniform, sd);
    std::vector<int> local;
    for (int id : in.ids)
      if (id >= s.own_start && id < s.own_start + s.own_count) local.push_back(id);
    if (static_cast<int>(local.size()) == T * per_token || sd >= seed + 10000) {
      *local_pairs = static_cast<int>(local.size());
      std::sort(local.begin(), local.end());
      *distinct_experts = static_cast<int>(std::unique(local.begin(), local.end()) - local.begin());
      return in;
    }
  }
}

TEST(MoeChainBench, DISABLED_ChainTimeline) {
  MXMOE_REQUIRE_SM90();
  std::vector<uint64_t> gemms, prologue, combine;
  if (sm90::decode_timeline_read(&gemms) == cudaErrorNotSupported ||
      smxx::prologue_timeline_read(&prologue) == cudaErrorNotSupported)
    GTEST_SKIP() << "not a MXMOE_DECODE_TIMELINE build (test NOT run)";
  struct Layout {
    const char* name;
    int I, start, count, per_token;
  };
  const int saved_spec = sm90::decode_spec();
  DevBuf<uint8_t> flush(kFlushBytes);
  ASSERT_TRUE(flush.ok());
  cudaStream_t st = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const bool rule_only = std::getenv("MXMOE_CHAIN_RULE_ONLY") != nullptr;
  for (const Layout& l : {Layout{"EP16", 3072, 112, 56, 1}, Layout{"TP8xEP4", 384, 448, 224, 4}}) {
    const std::vector<int> tokens = chain_tokens(l.name);
    if (tokens.empty()) continue;
    for (int T : tokens) ASSERT_GT(T, 0) << "MXMOE_CHAIN_TOKENS";
    auto g = make_gpu_layer(kE, kH, l.I, kK, l.start, l.count, 901);
    ASSERT_TRUE(g);
    for (int T : tokens)
      for (const ChainRun& run : kRuns) {
        if (rule_only && &run != &kRuns[0]) continue;
        const int spec = run.spec;
        const size_t flush_bytes = run.flushed ? kFlushBytes : 0;
        int local = 0, distinct = 0;
        const CaseInputs in = typical_inputs(*g->syn, T, l.per_token, 7 + T, &local, &distinct);
        MoeRun mr(*g, T, Backend::kW4A16);
        ASSERT_TRUE(mr.ok());
        CUDA_OK(mr.load(in));
        const MoeRunParams& p = mr.p;
        sm90::decode_set_spec(spec);  // (graph capture fixes the launches it picks)
        auto enqueue = [&](cudaStream_t s) {
          const Status r = run_moe(g->w, p, s);
          return r.ok() ? cudaSuccess : cudaErrorUnknown;
        };
        std::vector<float> eager, replayed;
        CUDA_OK(enqueue(st));
        CUDA_OK(cudaStreamSynchronize(st));
        CUDA_OK(mr.out.download(&eager));
        const float med = median_graph_us(enqueue, st, flush.get(), flush_bytes, 3, 15);
        ASSERT_GT(med, 0.0f);

        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        const cudaError_t captured = enqueue(st);
        CUDA_OK(cudaStreamEndCapture(st, &graph));
        CUDA_OK(captured);
        CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
        // The same graph timed as `mxmoe bench` times it (bench/timing.cpp): the replays queued
        // back to back, each behind its flush, one host sync at the end (D round 41: the bench
        // read ~10 us above this test's synced median at EP16 T=8).
        const float piped = median_pipelined_graph_us(exec, st, flush.get(), flush_bytes, 40);
        ASSERT_GT(piped, 0.0f);
        // [replay][kernel][event][min, median, max]
        const char* names[] = {"prologue (group)", "prologue (rows)", "GEMM1", "GEMM2", "combine"};
        std::vector<KernelSpan> spans[5];
        for (int rep = 0; rep < kReplays; ++rep) {
          if (run.flushed) CUDA_OK(cudaMemsetAsync(flush.get(), rep & 1, kFlushBytes, st));
          CUDA_OK(sm90::decode_timeline_reset(st));
          CUDA_OK(smxx::prologue_timeline_reset(st));
          CUDA_OK(smxx::combine_timeline_reset(st));
          CUDA_OK(cudaGraphLaunch(exec, st));
          CUDA_OK(cudaStreamSynchronize(st));
          CUDA_OK(sm90::decode_timeline_read(&gemms));
          CUDA_OK(smxx::prologue_timeline_read(&prologue));
          CUDA_OK(smxx::combine_timeline_read(&combine));
          const int per_gemm = sm90::decode::kTimelineCtas;
          const KernelRecords kernels[5] = {{names[0], &prologue, 0, 1},
                                            {names[1], &prologue, 1, smxx::kGlueTimelineCtas - 1},
                                            {names[2], &gemms, 0, per_gemm},
                                            {names[3], &gemms, per_gemm, per_gemm},
                                            {names[4], &combine, 0, smxx::kGlueTimelineCtas}};
          uint64_t t0 = ~0ull;
          for (const KernelRecords& k : kernels)
            for (int c = k.first_cta; c < k.first_cta + k.ctas; ++c) {
              const uint64_t v = (*k.rec)[static_cast<size_t>(c) * kTlFields + kTlStart];
              if (v != 0) t0 = std::min(t0, v);
            }
          for (int k = 0; k < 5; ++k) {
            spans[k].push_back(span_of(kernels[k], t0));
            EXPECT_GT(spans[k].back().ctas, 0)
                << l.name << " T=" << T << ": " << names[k] << " stamped no CTA";
          }
        }
        CUDA_OK(mr.out.download(&replayed));
        EXPECT_EQ(0, std::memcmp(replayed.data(), eager.data(), eager.size() * 4))
            << l.name << " T=" << T << ": the replays' output differs from the eager run's";
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);

        std::printf(
            "CHAIN %s T=%d w4a16 spec %d (%d local pairs, %d experts): graph median %.1f us "
            "(%s, 15; queued back to back %.1f); stamps in us from the first entry, min/med/max "
            "over CTAs, median of %d replays\n",
            l.name, T, spec, local, distinct, med, run.flushed ? "flushed" : "warm", piped,
            kReplays);
        for (int k = 0; k < 5; ++k) {
          std::string line;
          char b[96];
          std::vector<double> ctas;
          for (const KernelSpan& s : spans[k]) ctas.push_back(s.ctas);
          std::snprintf(b, sizeof(b), "CHAIN   %-16s ctas %4.0f", names[k], median(ctas));
          line = b;
          for (int e = 0; e < kNumTimelineEvents; ++e) {
            double m[3];
            for (int q = 0; q < 3; ++q) {
              std::vector<double> v;
              for (const KernelSpan& s : spans[k]) v.push_back(s.v[e][q]);
              m[q] = median(v);
            }
            if (m[1] < 0) continue;
            std::snprintf(b, sizeof(b), " | %s %5.2f/%5.2f/%5.2f", kTimelineEventNames[e], m[0],
                          m[1], m[2]);
            line += b;
          }
          std::printf("%s\n", line.c_str());
        }
      }
  }
  sm90::decode_set_spec(saved_spec);
  CUDA_OK(cudaStreamDestroy(st));
}

}  // namespace
}  // namespace mxmoe::test
