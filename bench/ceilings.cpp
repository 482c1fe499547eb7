// bench/ceilings.cpp: the in-run ceilings (see ceilings.h). Buffers are freed on return so the
// cases get the whole memory.
#include "ceilings.h"

#include <cstdio>

namespace mxmoe::bench {

Ceilings measure_ceilings(Blas& blas, cudaStream_t s, double budget_s, ClockMonitor* clocks) {
  Ceilings c;
  TimingPolicy pol;
  pol.clocks = clocks;
  pol.reps = 20;
  pol.min_reps = 10;
  pol.budget_s = budget_s;
  // The same 20 replays (~15-30 ms) with or without --clocks, so no watts (clocks.h): timed for
  // a second, the dense GEMMs reach the board's power limit and run slower (thirty-eighth
  // session, H100: BF16 795 -> 725-732 TFLOP/s at a median 1455-1470 MHz, FP8 1474 -> ~1295),
  // while the cases' short windows keep full clocks, which would inflate every ratio.
  {
    DevBuf src(kCopyBytes, "the copy-ceiling source"), dst(kCopyBytes, "the copy-ceiling target");
    BENCH_CUDA(cudaMemsetAsync(src.get(), 1, kCopyBytes, s));
    const Timing engine = time_graph(
        [&](cudaStream_t st) {
          BENCH_CUDA(
              cudaMemcpyAsync(dst.get(), src.get(), kCopyBytes, cudaMemcpyDeviceToDevice, st));
        },
        s, nullptr, pol);
    int dev = 0, sms = 0;
    BENCH_CUDA(cudaGetDevice(&dev));
    BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const Timing kernel = time_graph(
        [&](cudaStream_t st) {
          copy_kernel(dst.get(), src.get(), kCopyBytes, sms, st);
          BENCH_CUDA(cudaGetLastError());
        },
        s, nullptr, pol);
    auto gbps = [](const Timing& t) { return 2.0 * kCopyBytes / (t.median_us * 1e-6) / 1e9; };
    c.copy_engine_gbps = gbps(engine);
    c.copy_kernel_gbps = gbps(kernel);
    c.copy = c.copy_kernel_gbps >= c.copy_engine_gbps ? kernel : engine;
    c.copy_gbps = gbps(c.copy);
    std::fprintf(stderr,
                 "bench: copy ceiling %.0f GB/s (2 x %zu MiB: SM copy kernel %.0f GB/s, "
                 "cudaMemcpyAsync %.0f GB/s; clocks %s)\n",
                 c.copy_gbps, kCopyBytes >> 20, c.copy_kernel_gbps, c.copy_engine_gbps,
                 describe(c.copy.clocks).c_str());
  }
  const size_t n = kDenseN;
  const double flops = 2.0 * n * n * n;
  {
    DevBuf a(n * n * 2, "dense BF16 A"), b(n * n * 2, "dense BF16 B"), d(n * n * 2, "dense BF16 D");
    fill_bf16(a.as<uint16_t>(), n * n, 11, 1.0f, s);
    fill_bf16(b.as<uint16_t>(), n * n, 12, 1.0f, s);
    BENCH_CUDA(cudaGetLastError());
    c.bf16 =
        time_graph([&](cudaStream_t st) { blas.gemm_bf16(n, n, n, a.get(), b.get(), d.get(), st); },
                   s, nullptr, pol);
    c.bf16_tflops = flops / (c.bf16.median_us * 1e-6) / 1e12;
    std::fprintf(stderr, "bench: BF16 dense ceiling %.0f TFLOP/s (%.1f us for 8192^3; clocks %s)\n",
                 c.bf16_tflops, c.bf16.median_us, describe(c.bf16.clocks).c_str());
  }
  {
    DevBuf a(n * n, "dense FP8 A"), b(n * n, "dense FP8 B"), d(n * n * 2, "dense FP8 D"),
        one(sizeof(float), "FP8 scale");
    fill_e4m3(a.as<uint8_t>(), n * n, 13, 4.0f, s);
    fill_e4m3(b.as<uint8_t>(), n * n, 14, 4.0f, s);
    fill_f32(one.as<float>(), 1, 1.0f, s);
    BENCH_CUDA(cudaGetLastError());
    const int N = static_cast<int>(n);
    const Fp8Config cfg = choose_fp8_config(blas, {{N, N, N}}, /*want_outer_vec=*/false);
    Fp8Gemm g(blas, cfg);
    g.plan(N, N, N);
    c.fp8_config = cfg.describe();
    c.fp8 = time_graph(
        [&](cudaStream_t st) {
          g.run(N, N, N, a.as<uint8_t>(), one.as<float>(), b.as<uint8_t>(), one.as<float>(),
                d.get(), st);
        },
        s, nullptr, pol);
    c.fp8_tflops = flops / (c.fp8.median_us * 1e-6) / 1e12;
    std::fprintf(
        stderr, "bench: FP8 dense ceiling %.0f TFLOP/s (%.1f us for 8192^3; %s; clocks %s)\n",
        c.fp8_tflops, c.fp8.median_us, c.fp8_config.c_str(), describe(c.fp8.clocks).c_str());
  }
  return c;
}

}  // namespace mxmoe::bench
