// bench/report.cpp: table, CSV and JSON output (see report.h).
#include "report.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mxmoe/common.h"
#include "targets.h"

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

std::string mhz(const ClockStats& c) {
  if (c.samples == 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.0f%s", c.sm_mhz_median,
                (c.reasons_seen & kReasonsLimiting) ? "*" : "");
  return b;
}

nlohmann::json clocks_json(const ClockStats& c) {
  if (c.samples == 0) return nullptr;
  nlohmann::json j = {{"samples", c.samples},
                      {"window_s", c.window_s},
                      {"sm_mhz_median", c.sm_mhz_median},
                      {"sm_mhz_min", c.sm_mhz_min},
                      {"sm_mhz_max", c.sm_mhz_max},
                      {"limited_frac", c.limited_frac},
                      {"reasons", describe_reasons(c.reasons_seen)}};
  j["power_w_median"] = c.power_w_median >= 0 ? nlohmann::json(c.power_w_median) : nullptr;
  j["power_w_window"] = c.power_w_window >= 0 ? nlohmann::json(c.power_w_window) : nullptr;
  return j;
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
  if (c.copy.clocks.samples > 0 || c.bf16.clocks.samples > 0 || c.fp8.clocks.samples > 0)
    std::fprintf(f, "ceiling clocks: copy %s; BF16 %s; FP8 %s\n", describe(c.copy.clocks).c_str(),
                 describe(c.bf16.clocks).c_str(), describe(c.fp8.clocks).c_str());
  for (const auto& n : r.notes) std::fprintf(f, "note: %s\n", n.c_str());
  // Columns 1-17 keep their places (scripts/ab_tables.sh reads 1, 2, 6 and 9); check stays last
  // because it may hold spaces. used: the distinct local experts the draw reached (a decode row's
  // time steps with them: bench/NOTES.md D round 41).
  std::fprintf(f,
               "%-7s %6s %4s %5s %-8s %-12s %-4s %7s %10s %7s %7s %6s %5s %5s %7s %7s %5s %4s %s\n",
               "layout", "T", "E", "I", "routing", "backend", "rtr", "pairs", "median_us", "TFLOPS",
               "GB/s", "%copy", "%fp8", "%bf16", "xbf16", "xfp8", "MHz", "used", "check");
  for (const Row& w : r.rows)
    std::fprintf(f,
                 "%-7s %6d %4d %5d %-8s %-12s %-4s %7lld %10.1f %7.1f %7.0f %6.1f %5.1f %5.1f %7s "
                 "%7s %5s %4d %s\n",
                 w.layout.c_str(), w.tokens, w.experts_local, w.intermediate, w.routing.c_str(),
                 w.backend.c_str(), w.router.c_str(), static_cast<long long>(w.pairs),
                 w.t.median_us, w.tflops, w.gbps, w.pct_copy, w.pct_fp8, w.pct_bf16,
                 ratio(w.x_bf16).c_str(), ratio(w.x_fp8).c_str(), mhz(w.t.clocks).c_str(),
                 w.distinct_experts, w.verify.c_str());
}

void write_csv(const Report& r, const std::string& path) {
  std::ofstream f = open_out(path, "CSV");
  f << "layout,tokens,experts_local,intermediate,local_per_token,routing,backend,router,pairs,"
       "distinct_experts,median_us,min_us,max_us,reps,tflops,gbps,pct_copy,pct_fp8,pct_bf16,"
       "x_cublas_bf16,x_cublas_fp8,check,copy_gbps,bf16_tflops,fp8_tflops,sm_mhz,sm_mhz_min,"
       "power_w,limited_frac,clock_reasons,bf16_sm_mhz,fp8_sm_mhz,power_w_window\n";
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
    f << ',' << check << ',' << c.copy_gbps << ',' << c.bf16_tflops << ',' << c.fp8_tflops;
    // Clock columns stay empty when not sampled (--clocks not given, or no NVML).
    const ClockStats& k = w.t.clocks;
    const bool sampled = k.samples > 0;
    auto cell = [&f](bool have, const auto& v) {
      f << ',';
      if (have) f << v;
    };
    cell(sampled, k.sm_mhz_median);
    cell(sampled, k.sm_mhz_min);
    cell(sampled && k.power_w_median >= 0, k.power_w_median);
    cell(sampled, k.limited_frac);
    cell(sampled, describe_reasons(k.reasons_seen));
    cell(c.bf16.clocks.samples > 0, c.bf16.clocks.sm_mhz_median);
    cell(c.fp8.clocks.samples > 0, c.fp8.clocks.sm_mhz_median);
    cell(sampled && k.power_w_window >= 0, k.power_w_window);
    f << '\n';
  }
  if (!f) throw Error("bench: write error on CSV file " + path);
}

void write_json(const Report& r, const std::string& path) {
  using nlohmann::json;
  const Ceilings& c = r.ceilings;
  json j;
  j["device"] = r.device;
  j["ceilings"] = {{"copy_gbps", c.copy_gbps},
                   {"copy_us", c.copy.median_us},
                   {"copy_kernel_gbps", c.copy_kernel_gbps},
                   {"copy_engine_gbps", c.copy_engine_gbps},
                   {"bf16_tflops", c.bf16_tflops},
                   {"bf16_us", c.bf16.median_us},
                   {"fp8_tflops", c.fp8_tflops},
                   {"fp8_us", c.fp8.median_us},
                   {"fp8_config", c.fp8_config},
                   {"copy_clocks", clocks_json(c.copy.clocks)},
                   {"bf16_clocks", clocks_json(c.bf16.clocks)},
                   {"fp8_clocks", clocks_json(c.fp8.clocks)}};
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
    o["clocks"] = clocks_json(w.t.clocks);
    rows.push_back(std::move(o));
  }
  j["rows"] = std::move(rows);
  json targets = json::array();
  for (const TargetCheck& c : evaluate_targets(r))
    targets.push_back(
        {{"group", c.group}, {"what", c.what}, {"value", c.value}, {"bar", c.bar}, {"met", c.met}});
  j["targets"] = std::move(targets);
  std::ofstream f = open_out(path, "JSON");
  f << j.dump(1) << '\n';
  if (!f) throw Error("bench: write error on JSON file " + path);
}

}  // namespace mxmoe::bench
