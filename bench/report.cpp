// bench/report.cpp: table, CSV and JSON output (see report.h).
#include "report.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mxmoe/common.h"

namespace mxmoe::bench {
namespace {

std::string ratio(double x) {
  if (x < 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.2fx", x);
  return b;
}

std::ofstream open_out(const std::string& path, const char* what) {
  std::ofstream f(path);
  if (!f)
    throw Error(std::string("bench: cannot write ") + what + " file " + path + ": " +
                std::strerror(errno));
  return f;
}

}  // namespace

void print_table(const Report& r, std::FILE* f) {
  const Ceilings& c = r.ceilings;
  std::fprintf(f, "\nmxmoe bench on %s\n", r.device.c_str());
  std::fprintf(f,
               "ceilings: copy %.0f GB/s (SM kernel %.0f, cudaMemcpyAsync %.0f), BF16 dense %.0f "
               "TFLOP/s, FP8 dense %.0f TFLOP/s (%s)\n",
               c.copy_gbps, c.copy_kernel_gbps, c.copy_engine_gbps, c.bf16_tflops, c.fp8_tflops,
               c.fp8_config.c_str());
  for (const auto& n : r.notes) std::fprintf(f, "note: %s\n", n.c_str());
  std::fprintf(f, "%-7s %6s %4s %5s %-8s %-11s %-4s %7s %10s %7s %7s %6s %5s %5s %7s %7s %s\n",
               "layout", "T", "E", "I", "routing", "backend", "rtr", "pairs", "median_us", "TFLOPS",
               "GB/s", "%copy", "%fp8", "%bf16", "xbf16", "xfp8", "check");
  for (const Row& w : r.rows)
    std::fprintf(
        f,
        "%-7s %6d %4d %5d %-8s %-11s %-4s %7lld %10.1f %7.1f %7.0f %6.1f %5.1f %5.1f %7s %7s %s\n",
        w.layout.c_str(), w.tokens, w.experts_local, w.intermediate, w.routing.c_str(),
        w.backend.c_str(), w.router.c_str(), static_cast<long long>(w.pairs), w.t.median_us,
        w.tflops, w.gbps, w.pct_copy, w.pct_fp8, w.pct_bf16, ratio(w.x_bf16).c_str(),
        ratio(w.x_fp8).c_str(), w.verify.c_str());
}

void write_csv(const Report& r, const std::string& path) {
  std::ofstream f = open_out(path, "CSV");
  f << "layout,tokens,experts_local,intermediate,local_per_token,routing,backend,router,pairs,"
       "distinct_experts,median_us,min_us,max_us,reps,tflops,gbps,pct_copy,pct_fp8,pct_bf16,"
       "x_cublas_bf16,x_cublas_fp8,check,copy_gbps,bf16_tflops,fp8_tflops\n";
  const Ceilings& c = r.ceilings;
  for (const Row& w : r.rows) {
    std::string check = w.verify;
    for (char& ch : check)
      if (ch == ',' || ch == '"') ch = ';';
    f << w.layout << ',' << w.tokens << ',' << w.experts_local << ',' << w.intermediate << ','
      << w.local_per_token << ',' << w.routing << ',' << w.backend << ',' << w.router << ','
      << w.pairs << ',' << w.distinct_experts << ',' << w.t.median_us << ',' << w.t.min_us << ','
      << w.t.max_us << ',' << w.t.reps << ',' << w.tflops << ',' << w.gbps << ',' << w.pct_copy
      << ',' << w.pct_fp8 << ',' << w.pct_bf16 << ',';
    if (w.x_bf16 >= 0) f << w.x_bf16;
    f << ',';
    if (w.x_fp8 >= 0) f << w.x_fp8;
    f << ',' << check << ',' << c.copy_gbps << ',' << c.bf16_tflops << ',' << c.fp8_tflops << '\n';
  }
  if (!f) throw Error("bench: write error on CSV file " + path);
}

void write_json(const Report& r, const std::string& path) {
  using nlohmann::json;
  const Ceilings& c = r.ceilings;
  json j;
  j["device"] = r.device;
  j["ceilings"] = {{"copy_gbps", c.copy_gbps},     {"copy_us", c.copy.median_us},
                   {"copy_kernel_gbps", c.copy_kernel_gbps},
                   {"copy_engine_gbps", c.copy_engine_gbps},
                   {"bf16_tflops", c.bf16_tflops}, {"bf16_us", c.bf16.median_us},
                   {"fp8_tflops", c.fp8_tflops},   {"fp8_us", c.fp8.median_us},
                   {"fp8_config", c.fp8_config}};
  j["notes"] = r.notes;
  json rows = json::array();
  for (const Row& w : r.rows) {
    json o = {{"layout", w.layout},
              {"tokens", w.tokens},
              {"experts_local", w.experts_local},
              {"intermediate", w.intermediate},
              {"local_per_token", w.local_per_token},
              {"routing", w.routing},
              {"backend", w.backend},
              {"router", w.router},
              {"pairs", w.pairs},
              {"distinct_experts", w.distinct_experts},
              {"median_us", w.t.median_us},
              {"min_us", w.t.min_us},
              {"max_us", w.t.max_us},
              {"reps", w.t.reps},
              {"tflops", w.tflops},
              {"gbps", w.gbps},
              {"pct_copy", w.pct_copy},
              {"pct_fp8", w.pct_fp8},
              {"pct_bf16", w.pct_bf16},
              {"check", w.verify}};
    o["x_cublas_bf16"] = w.x_bf16 >= 0 ? json(w.x_bf16) : json(nullptr);
    o["x_cublas_fp8"] = w.x_fp8 >= 0 ? json(w.x_fp8) : json(nullptr);
    rows.push_back(std::move(o));
  }
  j["rows"] = std::move(rows);
  std::ofstream f = open_out(path, "JSON");
  f << j.dump(1) << '\n';
  if (!f) throw Error("bench: write error on JSON file " + path);
}

}  // namespace mxmoe::bench
