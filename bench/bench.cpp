// bench/bench.cpp: `mxmoe bench` (issue 4, item 1): for each selected layout, T, routing, backend
// and router mode, times run_moe and prints one line with the derived rates (report.h), next to
// the in-run ceilings (ceilings.h) and cuBLAS baselines (baseline.h). Method: timing.h.
//
// Order of work: ceilings first (they need 4 GiB that the cases want later), then per layout:
// synthetic weights (workload.h) -> prepare_weights_raw -> per T and routing: baselines, then
// the mxmoe cases. Each case is checked after timing (unless --no-verify): the output of the last
// graph replay must be finite with no all-zero row (every token has >= 1 local expert), and a
// direct (uncaptured) run_moe call must reproduce it bit for bit (run_moe's determinism promise).
// A case that fails (run_moe refusing, a cuBLAS error, a failed check) says FAIL in its line and
// makes the exit status 1; a sticky device fault ends the run after the lines measured so far
// are printed (and written to --csv / --json).
//
// Limitations:
//  1. The full layer (896 experts) stops at T = 4096 unless --tokens is given: at 8192 / 16384 it
//     is a large share of the default run's time on unoptimized kernels.
//  2. Baselines are skipped above --baseline-cap-gb of BF16 weights (the full layer needs 59 GB).
//  3. One device, one stream; the weights of a layout stay resident while its cases run.
#include "bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "args.h"
#include "baseline.h"
#include "blas.h"
#include "ceilings.h"
#include "clocks.h"
#include "device_util.h"
#include "mxmoe/common.h"
#include "mxmoe/moe.h"
#include "options.h"
#include "report.h"
#include "targets.h"
#include "timing.h"
#include "workload.h"

namespace mxmoe::bench {
namespace {

constexpr int kExitNoDevice = 77;  // CTest's SKIP_RETURN_CODE for the smoke test

// A blocking stream on purpose: the synchronous cudaMemcpy uploads (ours and prepare_weights')
// run on the legacy default stream, which then orders them before the work enqueued on `s`.
struct StreamHolder {
  cudaStream_t s = nullptr;
  StreamHolder() { BENCH_CUDA(cudaStreamCreate(&s)); }
  ~StreamHolder() {
    if (s) cudaStreamDestroy(s);
  }
};

struct WeightsDeleter {
  void operator()(PreparedWeights* w) const { destroy_weights(w); }
};

double flops_of(int64_t pairs, int I) { return 2.0 * pairs * 3.0 * kLatent * I; }

void fill_rates(Row* w, double flops, double bytes, const Ceilings& c) {
  const double sec = w->t.median_us * 1e-6;
  if (sec <= 0) return;
  w->tflops = flops / sec / 1e12;
  w->gbps = bytes / sec / 1e9;
  w->pct_copy = 100.0 * w->gbps / c.copy_gbps;
  w->pct_fp8 = 100.0 * w->tflops / c.fp8_tflops;
  w->pct_bf16 = 100.0 * w->tflops / c.bf16_tflops;
}

// The output checks of bench.cpp's header. `out` holds the last replay's result.
std::string verify_case(const std::function<void(cudaStream_t)>& direct, float* out, int T,
                        cudaStream_t s) {
  const size_t n = static_cast<size_t>(T) * kLatent;
  std::vector<float> a(n), b(n);
  BENCH_CUDA(cudaStreamSynchronize(s));
  BENCH_CUDA(cudaMemcpy(a.data(), out, n * 4, cudaMemcpyDeviceToHost));
  for (int t = 0; t < T; ++t) {
    bool nonzero = false;
    for (int h = 0; h < kLatent; ++h) {
      const float v = a[static_cast<size_t>(t) * kLatent + h];
      if (!std::isfinite(v))
        return "FAIL: non-finite output at token " + std::to_string(t) + ", column " +
               std::to_string(h);
      nonzero = nonzero || v != 0.0f;
    }
    if (!nonzero) return "FAIL: all-zero output row for token " + std::to_string(t);
  }
  // Poison the output so the direct call must write every element again.
  BENCH_CUDA(cudaMemsetAsync(out, 0xFF, n * 4, s));
  direct(s);
  BENCH_CUDA(cudaStreamSynchronize(s));
  BENCH_CUDA(cudaMemcpy(b.data(), out, n * 4, cudaMemcpyDeviceToHost));
  if (std::memcmp(a.data(), b.data(), n * 4) != 0) {
    size_t i = 0;
    while (i < n && std::memcmp(&a[i], &b[i], 4) == 0) ++i;
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "FAIL: graph replay != direct run_moe at token %zu col %zu (%.9g vs %.9g)",
                  i / kLatent, i % kLatent, a[i], b[i]);
    return buf;
  }
  return "ok";
}

struct Context {
  const BenchOptions& o;
  cudaStream_t s;
  Blas& blas;
  L2Flusher* flush;      // null with --warm-l2
  ClockMonitor* clocks;  // null without --clocks (or without NVML)
  Report& rep;
  bool any_fail = false;
};

void run_layout(Context& cx, const Layout& L, const std::vector<int>& tokens) {
  const BenchOptions& o = cx.o;
  const cudaStream_t s = cx.s;
  const Ceilings& ceil = cx.rep.ceilings;
  const int E = L.experts_local, I = L.intermediate, K = kLatent;
  const int maxT = *std::max_element(tokens.begin(), tokens.end());

  std::fprintf(stderr,
               "bench: %s: %d local experts, I=%d: generating weights, prepare_weights_raw\n",
               L.name.c_str(), E, I);
  const WeightPool pool(I, o.seed);
  std::vector<Mxfp4View> w1(E), w3(E), w2(E);
  for (int i = 0; i < E; ++i) {
    w1[i] = pool.w1(i);
    w3[i] = pool.w3(i);
    w2[i] = pool.w2(i);
  }
  PrepareOptions po;
  po.expert_start = 0;
  po.expert_count = E;
  po.device = o.device;
  PreparedWeights* raw = nullptr;
  if (Status st = prepare_weights_raw(w1.data(), w3.data(), w2.data(), kExpertsTotal, po, &raw);
      !st.ok())
    throw Error("bench: " + L.name + ": " + st.message());
  std::unique_ptr<PreparedWeights, WeightsDeleter> pw(raw);

  const size_t ws_bytes = workspace_bytes(pw.get(), maxT, kTopK);
  DevBuf ws(ws_bytes, "the run_moe workspace");
  DevBuf x(static_cast<size_t>(maxT) * K * 2, "the MoE input");
  DevBuf out(static_cast<size_t>(maxT) * K * 4, "the MoE output");
  DevBuf ids(static_cast<size_t>(maxT) * kTopK * 4, "the top-k ids");
  DevBuf wts(static_cast<size_t>(maxT) * kTopK * 4, "the top-k weights");
  const bool want_logits = std::count(o.router.begin(), o.router.end(), "gpu") > 0;
  DevBuf logits(want_logits ? static_cast<size_t>(maxT) * kExpertsTotal * 4 : 0,
                "the router logits");
  fill_bf16(x.as<uint16_t>(), static_cast<size_t>(maxT) * K, o.seed + 99, 2.0f, s);
  BENCH_CUDA(cudaGetLastError());

  std::unique_ptr<Fp8Gemm> fp8;
  std::unique_ptr<Baselines> base;
  if (o.baselines) {
    const double gb = baseline_bf16_weight_bytes(L) / 1e9;
    if (gb > o.baseline_cap_gb) {
      char b[200];
      std::snprintf(b, sizeof b,
                    "%s: cuBLAS baselines skipped: BF16 weights would take %.1f GB > "
                    "--baseline-cap-gb %.1f",
                    L.name.c_str(), gb, o.baseline_cap_gb);
      cx.rep.notes.push_back(b);
    } else {
      const std::vector<std::tuple<int, int, int>> probes = {
          {2 * I, 1, K}, {K, 1, I}, {2 * I, 64, K}, {K, 300, I}};
      try {
        const Fp8Config cfg = choose_fp8_config(cx.blas, probes, /*want_outer_vec=*/true);
        cx.rep.notes.push_back(L.name + ": cuBLAS FP8 baseline uses " + cfg.describe());
        fp8 = std::make_unique<Fp8Gemm>(cx.blas, cfg);
      } catch (const Error& e) {
        cx.rep.notes.push_back(L.name + ": cuBLAS FP8 baseline unavailable: " + e.what());
      }
      const int64_t max_pairs = static_cast<int64_t>(maxT) * L.local_per_token;
      std::fprintf(stderr,
                   "bench: %s: dequantizing %.1f GB (BF16) + %.1f GB (FP8) of baseline weights\n",
                   L.name.c_str(), gb, gb / 2);
      base = std::make_unique<Baselines>(L, pool, cx.blas, fp8.get(), max_pairs, s);
    }
  }

  for (const int T : tokens) {
    TimingPolicy pol = policy_for_tokens(T, o.reps, o.case_budget_s);
    pol.clocks = cx.clocks;
    for (const std::string& dist : o.routing) {
      const Routing r = make_routing(
          L, T, dist == "skewed",
          o.seed * 1000003ull + static_cast<uint64_t>(T) * 7919u + (dist == "skewed" ? 1 : 0));
      BENCH_CUDA(cudaMemcpy(ids.get(), r.ids.data(), r.ids.size() * 4, cudaMemcpyHostToDevice));
      BENCH_CUDA(
          cudaMemcpy(wts.get(), r.weights.data(), r.weights.size() * 4, cudaMemcpyHostToDevice));
      if (want_logits)
        BENCH_CUDA(
            cudaMemcpy(logits.get(), r.logits.data(), r.logits.size() * 4, cudaMemcpyHostToDevice));
      Row proto;
      proto.layout = L.name;
      proto.tokens = T;
      proto.experts_local = E;
      proto.intermediate = I;
      proto.local_per_token = L.local_per_token;
      proto.routing = dist;
      proto.pairs = r.pairs;
      proto.distinct_experts = r.distinct_experts;
      const double flops = flops_of(r.pairs, I);

      double t_bf16 = -1, t_fp8 = -1;
      if (base) {
        // A baseline that fails (cuBLAS refusing a shape) costs its line, not the run; a sticky
        // device fault still ends the run (same rule as the mxmoe cases below).
        enum class Form { kBf16, kBf16Grouped, kFp8, kFp8Grouped };
        auto baseline_row = [&](const char* name) {
          Row w = proto;
          w.backend = name;
          w.router = "-";
          return w;
        };
        // A failed baseline line: its row says why, the run's verdict fails, stderr names it.
        auto mark_failed = [&](Row& w, const char* name, const std::string& why) {
          w.verify = why;
          cx.any_fail = true;
          std::fprintf(stderr, "bench: %s %s T=%d %s: %s\n", L.name.c_str(), name, T, dist.c_str(),
                       why.c_str());
        };
        auto time_baseline = [&](const char* name, Form form) -> double {
          Row w = baseline_row(name);
          const bool fp8_form = form == Form::kFp8 || form == Form::kFp8Grouped;
          try {
            w.t = time_graph(
                [&](cudaStream_t st) {
                  switch (form) {
                    case Form::kBf16:
                      base->enqueue_bf16(r.expert_counts, st);
                      break;
                    case Form::kBf16Grouped:
                      base->enqueue_bf16_grouped(st);
                      break;
                    case Form::kFp8:
                      base->enqueue_fp8(r.expert_counts, st);
                      break;
                    case Form::kFp8Grouped:
                      base->enqueue_fp8_grouped(st);
                      break;
                  }
                },
                s, cx.flush, pol);
            fill_rates(
                &w, flops,
                fp8_form ? base->bytes_fp8(r.expert_counts) : base->bytes_bf16(r.expert_counts),
                ceil);
          } catch (const Error& e) {
            mark_failed(w, name, std::string("FAIL: ") + e.what());
            if (cudaDeviceSynchronize() != cudaSuccess) {
              cx.rep.rows.push_back(w);
              throw;
            }
          }
          cx.rep.rows.push_back(w);
          return w.t.median_us > 0 ? w.t.median_us : -1;
        };
        // A grouped form after its plan (which checks it against the per-expert outputs): timed
        // when ready, a FAIL row when its outputs differ, a note when this cuBLAS refuses it.
        // *best becomes its time when faster: the ratios are against the faster form.
        auto grouped = [&](const char* name, Form form, const std::string& plan, double* best) {
          if (plan.empty()) {
            const double t = time_baseline(name, form);
            if (t > 0 && (*best <= 0 || t < *best)) *best = t;
          } else if (plan.rfind("FAIL", 0) == 0) {
            Row w = baseline_row(name);
            mark_failed(w, name, plan);
            cx.rep.rows.push_back(w);
          } else {
            cx.rep.notes.push_back(L.name + " T=" + std::to_string(T) + " " + dist + ": " + name +
                                   " skipped: " + plan);
          }
        };
        t_bf16 = time_baseline("cublas-bf16", Form::kBf16);
        grouped("cublas-bf16g", Form::kBf16Grouped, base->plan_bf16_grouped(r.expert_counts, s),
                &t_bf16);
        if (base->plan_fp8(r.expert_counts)) {
          t_fp8 = time_baseline("cublas-fp8", Form::kFp8);
          grouped("cublas-fp8g", Form::kFp8Grouped, base->plan_fp8_grouped(r.expert_counts, s),
                  &t_fp8);
        } else if (fp8) {
          cx.rep.notes.push_back(L.name + " T=" + std::to_string(T) + " " + dist +
                                 ": cublasLt has no FP8 algorithm for one expert's shape; FP8 "
                                 "baselines skipped");
        }
      }

      for (const std::string& bname : o.backends) {
        for (const std::string& router : o.router) {
          Row w = proto;
          w.backend = bname;
          w.router = router;
          MoeRunParams p;
          p.num_tokens = T;
          p.top_k = kTopK;
          backend_from_name(bname, &p.backend);
          p.hidden = x.get();
          p.hidden_dtype = InputDType::kBf16;
          if (router == "ids") {
            p.topk_ids = ids.as<int32_t>();
            p.topk_weights = wts.as<float>();
          } else {
            p.router_logits = logits.as<float>();
          }
          p.out = out.as<float>();
          p.workspace = ws.get();
          p.workspace_size = ws_bytes;
          p.max_tokens = maxT;
          const std::string what =
              L.name + " T=" + std::to_string(T) + " " + dist + " " + bname + " router=" + router;
          auto enqueue = [&](cudaStream_t st) {
            const Status q = run_moe(pw.get(), p, st);
            if (!q.ok()) throw Error("bench: run_moe (" + what + "): " + q.message());
          };
          try {
            Graph g(enqueue, s);
            w.t = time_graph(g, s, cx.flush, pol);
            const double bytes = static_cast<double>(r.distinct_experts) * expert_mxfp4_bytes(I) +
                                 static_cast<double>(T) * K * (2 + 4);
            fill_rates(&w, flops, bytes, ceil);
            if (t_bf16 > 0) w.x_bf16 = t_bf16 / w.t.median_us;
            if (t_fp8 > 0) w.x_fp8 = t_fp8 / w.t.median_us;
            if (o.verify) w.verify = verify_case(enqueue, out.as<float>(), T, s);
          } catch (const Error& e) {
            w.verify = std::string("FAIL: ") + e.what();
            // A sticky device fault poisons every later call: stop here, keep what was measured.
            if (cudaDeviceSynchronize() != cudaSuccess) {
              cx.rep.rows.push_back(w);
              throw;
            }
          }
          if (w.verify.rfind("FAIL", 0) == 0) {
            cx.any_fail = true;
            std::fprintf(stderr, "bench: %s: %s\n", what.c_str(), w.verify.c_str());
          }
          std::fprintf(stderr, "bench: %-45s %10.1f us %7.1f TFLOPS %6.0f GB/s %s%s%s\n",
                       what.c_str(), w.t.median_us, w.tflops, w.gbps, w.verify.c_str(),
                       w.t.clocks.samples > 0 ? "; clocks " : "",
                       w.t.clocks.samples > 0 ? describe(w.t.clocks).c_str() : "");
          cx.rep.rows.push_back(w);
        }
      }
    }
  }
}

}  // namespace

int run_bench(int argc, char** argv) {
  const BenchOptions o = parse_options(argc, argv, 2);
  if (o.help) {
    std::fputs(usage_text(), stdout);
    return 0;
  }
  int ndev = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&ndev); e != cudaSuccess || ndev == 0) {
    std::fprintf(stderr, "mxmoe: error: bench: no CUDA device (%s)\n",
                 e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    return kExitNoDevice;
  }
  if (o.device >= ndev)
    throw cli::UsageError("--device " + std::to_string(o.device) + ": only " +
                          std::to_string(ndev) + " CUDA device(s)");
  BENCH_CUDA(cudaSetDevice(o.device));
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, o.device));
  if (prop.major != 9 || prop.minor != 0)
    throw Error("bench: device " + std::to_string(o.device) + " (" + prop.name + ") is sm_" +
                std::to_string(prop.major) + std::to_string(prop.minor) +
                "; mxmoe's kernels run on sm_90a only");

  StreamHolder sh;
  Blas blas(sh.s);
  L2Flusher flush(o.device);
  Report rep;
  char dev[400];
  std::snprintf(dev, sizeof dev, "%.255s (sm_%d%d, %d SMs, L2 %d MiB, %.0f GiB)", prop.name,
                prop.major, prop.minor, prop.multiProcessorCount, prop.l2CacheSize >> 20,
                prop.totalGlobalMem / 1073741824.0);
  rep.device = dev;
  std::fprintf(stderr, "bench: %s\n", dev);
  // --clocks: NVML opened once for the run; sampled every 0.5 ms (a decode case's replays and
  // flushes take a few ms in all, a prefill case's tens).
  std::unique_ptr<NvmlClocks> nvml;
  std::unique_ptr<ClockMonitor> clocks;
  if (o.clocks) {
    char bus[64] = {};
    std::string why;
    if (const cudaError_t e = cudaDeviceGetPCIBusId(bus, sizeof bus, o.device); e != cudaSuccess)
      why = std::string("cudaDeviceGetPCIBusId: ") + cudaGetErrorString(e);
    else
      nvml = NvmlClocks::open(bus, &why);
    if (nvml) {
      NvmlClocks* src = nvml.get();
      clocks = std::make_unique<ClockMonitor>([src](ClockSample* c) { return src->sample(c); },
                                              std::chrono::microseconds(500));
    } else {
      rep.notes.push_back("clocks: not sampled: " + why);
      std::fprintf(stderr, "bench: --clocks: not sampled: %s\n", why.c_str());
    }
  }
  rep.ceilings = measure_ceilings(blas, sh.s, o.case_budget_s, clocks.get());

  char note[300];
  if (o.flush_l2) {
    std::snprintf(note, sizeof note,
                  "timing: one CUDA graph per case, 2 warm-up replays, %zu MiB memset before every "
                  "replay (L2 flush, untimed), CUDA events per replay, median (reps in CSV/JSON)",
                  flush.bytes() >> 20);
  } else {
    std::snprintf(note, sizeof note,
                  "timing: one CUDA graph per case, 2 warm-up replays, no L2 flush (--warm-l2: "
                  "code and small tensors stay cached), CUDA events per replay, median (reps in "
                  "CSV/JSON)");
  }
  rep.notes.push_back(note);
  rep.notes.push_back(
      "routing: 16 global ids per token, exactly 1 (ep16) / 4 (tp8ep4) / 16 (full) of them local; "
      "skewed: 8 hot local experts draw 80% of the local picks; rtr=gpu: router logits [T, 896] "
      "built so the GPU top-16 picks the same ids as rtr=ids; used: the distinct local experts "
      "the draw reached (the weights streamed; decode time steps with them)");
  rep.notes.push_back(
      "cublas-*: GEMM1 + GEMM2 on weights dequantized ahead of time, per expert (cublas-bf16, "
      "cublas-fp8) or grouped by equal pair counts (cublas-bf16g: one "
      "cublasGemmGroupedBatchedEx call per GEMM; cublas-fp8g: one pointer-array cublasLt "
      "matmul per group and GEMM, then a kernel applying the scales; each checked against its "
      "per-expert form's outputs); GEMMs only (no gather, SiTU, quantize or combine): a lower "
      "bound of a cuBLAS MoE; xbf16 / xfp8 = baseline time / mxmoe time, against the faster "
      "form of each");

  if (clocks) {
    const double limit_w = nvml->power_limit_w();
    char limit[64] = "not reported";
    if (limit_w >= 0) std::snprintf(limit, sizeof limit, "%.0f W", limit_w);
    rep.notes.push_back(
        "clocks: NVML every 0.5 ms over each case's timed replays (flushes included); MHz = median "
        "SM clock, '*' = a power or thermal limit was active in some sample; W (windows >= 1 s "
        "only) = the window's mean instantaneous board power ('avg': NVML's 1-s running "
        "average); board power limit " +
        std::string(limit));
  }
  Context cx{o, sh.s, blas, o.flush_l2 ? &flush : nullptr, clocks.get(), rep};
  std::exception_ptr failure;
  try {
    for (const std::string& name : o.layouts) {
      const Layout L = layout_by_name(name);
      std::vector<int> tokens = o.tokens;
      if (L.name == "full" && !o.tokens_given) {
        const auto big =
            std::remove_if(tokens.begin(), tokens.end(), [](int t) { return t >= 8192; });
        if (big != tokens.end())
          rep.notes.push_back("full: T >= 8192 skipped by default (pass --tokens to run them)");
        tokens.erase(big, tokens.end());
      }
      if (tokens.empty()) continue;
      run_layout(cx, L, tokens);
    }
  } catch (const Error&) {
    failure = std::current_exception();  // print what was measured, then report the error
  }
  print_table(rep, stdout);
  print_targets(evaluate_targets(rep), stdout);
  std::fflush(stdout);
  if (!o.csv.empty()) write_csv(rep, o.csv);
  if (!o.json.empty()) write_json(rep, o.json);
  if (failure) std::rethrow_exception(failure);
  return cx.any_fail ? 1 : 0;
}

}  // namespace mxmoe::bench
