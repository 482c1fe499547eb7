// bench/test_report.cpp: CPU checks of the report writers (report.h; no GPU, no GoogleTest, as
// test_workload.cpp): the table keeps the columns scripts read (1, 2, 6, 9) in place and check
// last, with the MHz column '-' when not sampled and "<MHz>*" under a power limit; every CSV line
// has the header's field count, clock fields empty when not sampled; JSON has null clocks then.
// Prints every failure; exit 1 if any.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "report.h"
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

Report sample_report() {
  Report r;
  r.device = "test device";
  r.ceilings.copy_gbps = 4000;
  r.ceilings.bf16_tflops = 800;
  r.ceilings.fp8_tflops = 1500;
  r.ceilings.bf16.clocks = summarize({{1980, 650, 0}});
  Row a;
  a.layout = "ep16";
  a.tokens = 64;
  a.experts_local = 56;
  a.intermediate = 3072;
  a.routing = "uniform";
  a.backend = "w4a16";
  a.router = "ids";
  a.pairs = 64;
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
  std::FILE* f = std::tmpfile();
  print_table(r, f);
  std::rewind(f);
  std::string text;
  for (int c; (c = std::fgetc(f)) != EOF;) text += static_cast<char>(c);
  std::fclose(f);
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
  CHECK(a.size() == 18 && a[0] == "ep16" && a[1] == "64" && a[5] == "w4a16" && a[8] == "218.4" &&
            a[16] == "-" && a[17] == "ok",
        "row a: %s", rows[0].c_str());
  CHECK(b.size() > 18 && b[5] == "w4a8" && b[8] == "222.4" && b[16] == "1868*" && b[17] == "FAIL:",
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
  CHECK(j["ceilings"]["fp8_clocks"].is_null() && j["ceilings"]["bf16_clocks"]["samples"] == 1,
        "ceiling clocks: %s", j["ceilings"].dump().c_str());
  std::remove(csv.c_str());
  std::remove(js.c_str());
}

}  // namespace

int main() {
  check_table();
  check_csv_json();
  return test::check_summary("bench report checks passed");
}
