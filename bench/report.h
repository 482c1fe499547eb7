// bench/report.h: one line per (case, backend) and the ways it is written out.
//
// Derived columns (computed in bench.cpp, stated here once):
//   TFLOPS   = 2 x pairs x (3584 x 2I + I x 3584) / t                     (issue 4's definition)
//   GB/s     = (MXFP4 bytes of the distinct local experts touched + T x 3584 x 2 (BF16 x in)
//               + T x 3584 x 4 (fp32 out)) / t; baseline lines count their own bytes instead
//               (dequantized weights of the touched experts + gathered GEMM inputs / outputs)
//   %copy    = GB/s / copy ceiling;  %fp8, %bf16 = TFLOPS / dense ceiling
//   xbf16, xfp8 = baseline median / this median (> 1: mxmoe is faster), same layout, T, routing;
//            each against the faster of its per-expert and grouped baselines (BF16 / FP8).
//   MHz      = median SM clock over the timed replays (--clocks; clocks.h), "-" when not sampled;
//              a trailing '*' marks a case in which a power or thermal limit was active.
// Table (stdout, last), CSV (one header line, one line per row, ceilings repeated per row so the
// file stands alone) and JSON ({device, ceilings, notes, rows, targets}: targets.h).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "ceilings.h"

namespace mxmoe::bench {

struct Row {
  std::string layout;
  int tokens = 0, experts_local = 0, intermediate = 0, local_per_token = 0;
  std::string routing;  // uniform / skewed
  std::string backend;  // w4a16, w4a8, cublas-bf16, cublas-bf16g, cublas-fp8, cublas-fp8g
  std::string router;   // ids / gpu / "-" (baselines)
  int64_t pairs = 0;
  int distinct_experts = 0;
  Timing t;
  double tflops = 0, gbps = 0, pct_copy = 0, pct_fp8 = 0, pct_bf16 = 0;
  double x_bf16 = -1, x_fp8 = -1;  // < 0: no baseline
  std::string verify = "-";        // ok / FAIL: ... / - (not checked)
};

struct Report {
  std::string device;
  Ceilings ceilings;
  std::vector<std::string> notes;
  std::vector<Row> rows;
};

void print_table(const Report& r, std::FILE* f);
void write_csv(const Report& r, const std::string& path);   // throws mxmoe::Error naming the file
void write_json(const Report& r, const std::string& path);  // throws mxmoe::Error naming the file

}  // namespace mxmoe::bench
