// bench/test_report.cpp: CPU checks of the report writers (report.h; no GPU, no GoogleTest, as
// test_workload.cpp): the table keeps the columns scripts read (1, 2, 6, 9) in place, the
// distinct experts used in column 18 and check last, with the MHz column '-' when not sampled
// and "<MHz>*" under a power limit; every CSV line has the header's field count, clock fields
// empty when not sampled; JSON has null clocks then; the targets (targets.h) judge the right rows
// against the right bars, a failed check never meets one, and their lines name what is not met.
// Prints every failure; exit 1 if any.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "report.h"
#include "targets.h"
#include "test_check.h"

using namespace mxmoe::bench;

namespace {

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> w;
  for (std::string s; in >> s;) w.push_back(s);
  return w;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

size_t fields(const std::string& csv_line) {
  size_t n = 1;
  for (char c : csv_line) n += c == ',';
  return n;
}

// What print(f) writes to a FILE*, as a string.
template <class Print>
std::string printed(Print print) {
  std::FILE* f = std::tmpfile();
  print(f);
  std::rewind(f);
  std::string text;
  for (int c; (c = std::fgetc(f)) != EOF;) text += static_cast<char>(c);
  std::fclose(f);
  return text;
}

Report sample_report() {
  Report r;
  r.device = "test device";
  r.ceilings.copy_gbps = 4000;
  r.ceilings.bf16_tflops = 800;
  r.ceilings.fp8_tflops = 1500;
  r.ceilings.bf16.clocks = summarize({{1980, 640, 0, true}, {1980, 660, 0, true}}, 1.1);
  Row a;
  a.layout = "ep16";
  a.tokens = 64;
  a.experts_local = 56;
  a.intermediate = 3072;
  a.routing = "uniform";
  a.backend = "w4a16";
  a.router = "ids";
  a.pairs = 64;
  a.distinct_experts = 41;
  a.t.median_us = 218.4;
  a.verify = "ok";
  Row b = a;  // sampled, power-capped, with a check message holding spaces and a comma
  b.backend = "w4a8";
  b.t.median_us = 222.4;
  b.t.clocks = summarize({{1755, 700, kReasonSwPowerCap}, {1980, 690, 0}});
  b.t.clocks.power_w_window = 640.5;
  b.verify = "FAIL: graph replay != direct run_moe, at token 3";
  r.rows = {a, b};
  return r;
}

void check_table() {
  const Report r = sample_report();
  const std::string text = printed([&](std::FILE* f) { print_table(r, f); });
  const std::vector<std::string> lines = lines_of(text);
  std::vector<std::string> rows;
  bool ceiling_clocks = false;
  for (const auto& l : lines) {
    if (l.rfind("ep16 ", 0) == 0) rows.push_back(l);
    ceiling_clocks |=
        l.rfind("ceiling clocks: ", 0) == 0 && l.find("BF16 1980 MHz, 650 W") != std::string::npos;
  }
  CHECK(ceiling_clocks, "no ceiling clocks line with the BF16 clock:\n%s", text.c_str());
  CHECK(rows.size() == 2, "%zu rows:\n%s", rows.size(), text.c_str());
  if (rows.size() != 2) return;
  const auto a = words(rows[0]), b = words(rows[1]);
  CHECK(a.size() == 19 && a[0] == "ep16" && a[1] == "64" && a[5] == "w4a16" && a[8] == "218.4" &&
            a[16] == "-" && a[17] == "41" && a[18] == "ok",
        "row a: %s", rows[0].c_str());
  CHECK(b.size() > 19 && b[5] == "w4a8" && b[8] == "222.4" && b[16] == "1868*" && b[17] == "41" &&
            b[18] == "FAIL:",
        "row b: %s", rows[1].c_str());
}

void check_csv_json() {
  const Report r = sample_report();
  const std::string csv = "test_report_out.csv", js = "test_report_out.json";
  write_csv(r, csv);
  std::ifstream in(csv);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::vector<std::string> lines = lines_of(ss.str());
  CHECK(lines.size() == 3, "%zu CSV lines", lines.size());
  if (lines.size() == 3) {
    const size_t n = fields(lines[0]);
    CHECK(fields(lines[1]) == n && fields(lines[2]) == n, "fields %zu / %zu / %zu", n,
          fields(lines[1]), fields(lines[2]));
    // The unsampled row ends with empty clock fields, then the BF16 ceiling's clock, an empty
    // FP8 one and an empty window power; the sampled row carries its median, reasons and window
    // power.
    const std::string tail = ",1500,,,,,,1980,,";  // fp8_tflops, 5 empty clock fields, ceilings
    CHECK(lines[1].size() > tail.size() &&
              lines[1].compare(lines[1].size() - tail.size(), tail.size(), tail) == 0,
          "row a tail: %s", lines[1].c_str());
    CHECK(lines[2].find(",1867.5,1755,695,0.5,power_cap,1980,,640.5") != std::string::npos,
          "row b: %s", lines[2].c_str());
  }
  write_json(r, js);
  std::ifstream jin(js);
  const nlohmann::json j = nlohmann::json::parse(jin);
  CHECK(j["rows"][0]["clocks"].is_null(), "unsampled clocks not null");
  CHECK(j["rows"][1]["clocks"]["sm_mhz_median"] == 1867.5 &&
            j["rows"][1]["clocks"]["reasons"] == "power_cap" &&
            j["rows"][1]["clocks"]["power_w_window"] == 640.5,
        "sampled clocks: %s", j["rows"][1]["clocks"].dump().c_str());
  CHECK(j["ceilings"]["fp8_clocks"].is_null() && j["ceilings"]["bf16_clocks"]["samples"] == 2 &&
            j["ceilings"]["bf16_clocks"]["window_s"] == 1.1 &&
            j["ceilings"]["bf16_clocks"]["power_w_window"] == 650,
        "ceiling clocks: %s", j["ceilings"].dump().c_str());
  // Both sample rows are decode rows (T = 64): judged, neither at 85% of copy (pct_copy 0).
  CHECK(j["targets"].size() == 2 && j["targets"][0]["group"] == "decode" &&
            j["targets"][0]["met"] == false && j["targets"][1]["bar"] == 85.0,
        "targets: %s", j["targets"].dump().c_str());
  std::remove(csv.c_str());
  std::remove(js.c_str());
}

// A run with decode rows on both sides of 85%, a failed-check row above it, a baseline row and
// EP16 T=16384 rows of both backends (w4a16 at 75.2% of BF16; w4a8 at 72% of FP8 but only 1.5x).
Row row(const char* layout, int tokens, const char* backend, double us, double pct_copy) {
  Row w;
  w.layout = layout;
  w.tokens = tokens;
  w.routing = "uniform";
  w.backend = backend;
  w.router = "ids";
  w.t.median_us = us;
  w.pct_copy = pct_copy;
  w.verify = "ok";
  return w;
}

void check_targets() {
  Report r;
  r.rows.push_back(row("ep16", 64, "w4a16", 200, 86.0));
  r.rows.push_back(row("ep16", 8, "w4a8", 70, 64.3));
  r.rows.push_back(row("tp8ep4", 1, "w4a16", 25, 90.0));
  r.rows.back().verify = "FAIL: output not finite";
  r.rows.push_back(row("ep16", 64, "cublas-bf16", 1000, 82.0));  // a baseline: not judged
  r.rows.push_back(row("ep16", 512, "w4a16", 380, 90.0));        // neither decode nor T=16384
  Row p16 = row("ep16", 16384, "w4a16", 1800, 25.0);
  p16.pct_bf16 = 75.2;
  Row p8 = row("ep16", 16384, "w4a8", 1200, 24.0);
  p8.pct_fp8 = 72.0;
  r.rows.push_back(p16);
  r.rows.push_back(p8);
  Row other = row("tp8ep4", 16384, "w4a16", 1500, 20.0);  // prefill targets are EP16's only
  other.pct_bf16 = 90.0;
  r.rows.push_back(other);

  const std::vector<TargetCheck> c = evaluate_targets(r);
  CHECK(c.size() == 6, "%zu checks", c.size());
  if (c.size() != 6) return;
  CHECK(
      c[0].group == "decode" && c[0].what == "ep16/64/w4a16 %copy" && c[0].met && c[0].bar == 85.0,
      "c0 %s %s", c[0].group.c_str(), c[0].what.c_str());
  CHECK(c[1].what == "ep16/8/w4a8 %copy" && !c[1].met && c[1].value == 64.3, "c1 %s",
        c[1].what.c_str());
  CHECK(c[2].what == "tp8ep4/1/w4a16 %copy" && !c[2].met, "c2: a failed check met a target");
  CHECK(c[3].group == "prefill" && c[3].what == "ep16/16384/w4a16 %bf16" && c[3].met &&
            c[3].bar == 75.0,
        "c3 %s", c[3].what.c_str());
  CHECK(c[4].what == "ep16/16384/w4a8 %fp8" && c[4].met && c[4].bar == 70.0, "c4 %s",
        c[4].what.c_str());
  CHECK(c[5].what == "ep16/16384/w4a8 x w4a16" && !c[5].met && c[5].value == 1.5 && c[5].bar == 1.6,
        "c5 %s %.3f", c[5].what.c_str(), c[5].value);

  const std::string text = printed([&](std::FILE* f) { print_targets(c, f); });
  const std::vector<std::string> lines = lines_of(text);
  CHECK(lines.size() == 3, "%zu lines:\n%s", lines.size(), text.c_str());
  if (lines.size() == 3) {
    CHECK(lines[1].find("decode  1 of 3 met; not: ep16/8/w4a8 %copy 64.3 (>= 85), "
                        "tp8ep4/1/w4a16 %copy 90.0 (>= 85)") != std::string::npos,
          "decode line: %s", lines[1].c_str());
    CHECK(lines[2].find("prefill 2 of 3 met; not: ep16/16384/w4a8 x w4a16 1.50 (>= 1.60)") !=
              std::string::npos,
          "prefill line: %s", lines[2].c_str());
  }
  CHECK(printed([](std::FILE* f) { print_targets({}, f); }).empty(), "lines printed for no checks");
  // Skewed routing and the GPU router are named; a run of only baselines has nothing to judge.
  Report s;
  s.rows.push_back(row("ep16", 1, "w4a16", 25, 24.0));
  s.rows.back().routing = "skewed";
  s.rows.back().router = "gpu";
  s.rows.push_back(row("ep16", 1, "cublas-fp8", 31, 36.0));
  const std::vector<TargetCheck> cs = evaluate_targets(s);
  CHECK(cs.size() == 1 && cs[0].what == "ep16/1/w4a16/skewed/gpu %copy", "skewed/gpu label: %s",
        cs.empty() ? "(none)" : cs[0].what.c_str());
}

}  // namespace

int main() {
  check_table();
  check_csv_json();
  check_targets();
  return test::check_summary("bench report checks passed");
}
