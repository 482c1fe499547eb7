// bench/ceilings.h: the device's own limits, measured in the same run as the cases.
//   copy: kCopyBytes device to device, bytes read + bytes written / t, the faster of a 16-byte SM
//         copy kernel and cudaMemcpyAsync (a copy-engine memcpy node in a graph: ~2.7 TB/s on
//         an H200, well under what SM loads reach, so it alone would flatter every %copy).
//   BF16: cublasGemmEx 8192^3, BF16 in / out, fp32 compute; 2 * 8192^3 / t.
//   FP8:  cublasLt 8192^3, E4M3 x E4M3 -> BF16, per-tensor scales, fast accumulation where offered.
// Random operands (values change the power draw and so the clocks; zeros would flatter).
#pragma once

#include <string>

#include "blas.h"
#include "timing.h"

namespace mxmoe::bench {

constexpr size_t kCopyBytes = size_t{2} << 30;  // 2 GiB each way
constexpr int kDenseN = 8192;

struct Ceilings {
  double copy_gbps = 0, bf16_tflops = 0, fp8_tflops = 0;
  double copy_engine_gbps = 0, copy_kernel_gbps = 0;  // the two copies; copy_gbps is the max
  Timing copy, bf16, fp8;
  std::string fp8_config;
};

// clocks (optional): sampled over each ceiling's timed replays (Timing::clocks).
Ceilings measure_ceilings(Blas& blas, cudaStream_t s, double budget_s,
                          ClockMonitor* clocks = nullptr);

}  // namespace mxmoe::bench
