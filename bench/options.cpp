// bench/options.cpp: flag parsing for `mxmoe bench` (grammar as the CLI's: `--name value`,
// `--name=value`, bare switches; no positional arguments, no flag given twice).
#include "options.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>

#include "args.h"  // mxmoe::cli::UsageError (header-only class)

namespace mxmoe::bench {
namespace {

using cli::UsageError;

const std::vector<std::string> kLayouts = {"ep16", "tp8ep4", "full"};
const std::vector<std::string> kBackends = {"w4a16", "w4a8"};
const std::vector<std::string> kRouting = {"uniform", "skewed"};
const std::vector<std::string> kRouter = {"ids", "gpu"};

std::vector<std::string> split(const std::string& flag, const std::string& v) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = v.find(',', start);
    std::string item =
        v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) throw UsageError("--" + flag + ": empty item in '" + v + "'");
    out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<std::string> choices(const std::string& flag, const std::string& v,
                                 const std::vector<std::string>& allowed) {
  std::vector<std::string> out;
  for (const std::string& s : split(flag, v)) {
    if (std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      throw UsageError("--" + flag + ": unknown value '" + s + "' (one of " + list + ")");
    }
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

int64_t parse_int(const std::string& flag, const std::string& s, int64_t lo, int64_t hi) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
    throw UsageError("--" + flag + ": '" + s + "' is not an integer in " + std::to_string(lo) +
                     ".." + std::to_string(hi));
  return v;
}

double parse_double(const std::string& flag, const std::string& s, double lo, double hi) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v) || v < lo || v > hi)
    throw UsageError("--" + flag + ": '" + s + "' is not a number in [" + std::to_string(lo) +
                     ", " + std::to_string(hi) + "]");
  return v;
}

}  // namespace

const char* usage_text() {
  return "usage: mxmoe bench [flags]\n"
         "Times Kimi-K3's routed-expert MoE (run_moe, CUDA-graph replay, L2 flushed) next to the\n"
         "in-run ceilings (device copy, cuBLAS dense BF16 / FP8 8192^3) and cuBLAS per-expert\n"
         "GEMM baselines on weights dequantized ahead of time.\n"
         "  --layouts L,..   ep16 (56 x I 3072, 1 local expert/token), tp8ep4 (224 x I 384,\n"
         "                   4/token), full (896 x I 3072, 16/token)   [all]\n"
         "  --tokens T,..    token counts [1,8,64,512,4096,8192,16384; full stops at 4096\n"
         "                   unless --tokens is given]\n"
         "  --backends B,..  w4a16, w4a8 [both]\n"
         "  --routing D,..   uniform, skewed (8 hot local experts draw 80% of picks) [both]\n"
         "  --router R,..    ids (top-k ids given) or gpu (router logits, top-k on the GPU) "
         "[both]\n"
         "  --quick          ep16,tp8ep4 x T 1,64,4096 x uniform x ids (explicit flags override)\n"
         "  --reps N         timed replays per case [50 for T<=64, 30 for T<=512, 10 above]\n"
         "  --budget S       seconds of timed replays per case before reps shrink [2; floors:\n"
         "                   20 reps for T<=64, 5 above]\n"
         "  --seed N         weights / inputs / routing seed [1234]\n"
         "  --no-baselines   skip the cuBLAS per-expert baselines\n"
         "  --baseline-cap-gb X  skip baselines whose BF16 weights exceed X GB [16]\n"
         "  --no-verify      skip the output checks (finite, non-zero, graph == direct call)\n"
         "  --warm-l2        no L2 flush before the replays (code and small tensors stay\n"
         "                   cached; weights larger than L2 still stream)\n"
         "  --clocks         sample SM clock, power and throttle reasons (NVML) over every\n"
         "                   timed case: MHz column ('*': a power / thermal limit was\n"
         "                   active), ceiling clocks line, CSV / JSON clock fields\n"
         "  --device N       CUDA device [0]\n"
         "  --csv FILE       also write every line as CSV\n"
         "  --json FILE      also write ceilings and lines as JSON\n"
         "  --help           this text\n";
}

BenchOptions parse_options(int argc, char** argv, int first) {
  // name -> takes a value
  const std::vector<std::pair<std::string, bool>> specs = {{"layouts", true},
                                                           {"tokens", true},
                                                           {"backends", true},
                                                           {"routing", true},
                                                           {"router", true},
                                                           {"quick", false},
                                                           {"reps", true},
                                                           {"budget", true},
                                                           {"seed", true},
                                                           {"no-baselines", false},
                                                           {"baseline-cap-gb", true},
                                                           {"no-verify", false},
                                                           {"warm-l2", false},
                                                           {"clocks", false},
                                                           {"device", true},
                                                           {"csv", true},
                                                           {"json", true},
                                                           {"help", false}};
  BenchOptions o;
  std::set<std::string> seen;
  std::vector<std::pair<std::string, std::string>> given;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + a + "'");
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it =
        std::find_if(specs.begin(), specs.end(), [&](const auto& s) { return s.first == name; });
    if (it == specs.end()) throw UsageError("unknown flag --" + name);
    if (!seen.insert(name).second) throw UsageError("--" + name + " given twice");
    if (it->second && !has_value) {
      if (i + 1 >= argc) throw UsageError("--" + name + " needs a value");
      value = argv[++i];
    } else if (!it->second && has_value) {
      throw UsageError("--" + name + " takes no value");
    }
    given.emplace_back(name, value);
  }

  o.layouts = kLayouts;
  o.tokens = {1, 8, 64, 512, 4096, 8192, 16384};
  o.backends = kBackends;
  o.routing = kRouting;
  o.router = kRouter;
  if (seen.count("quick")) {
    o.quick = true;
    o.layouts = {"ep16", "tp8ep4"};
    o.tokens = {1, 64, 4096};
    o.routing = {"uniform"};
    o.router = {"ids"};
    o.case_budget_s = 1.0;
  }
  for (const auto& [name, v] : given) {
    if (name == "layouts")
      o.layouts = choices(name, v, kLayouts);
    else if (name == "backends")
      o.backends = choices(name, v, kBackends);
    else if (name == "routing")
      o.routing = choices(name, v, kRouting);
    else if (name == "router")
      o.router = choices(name, v, kRouter);
    else if (name == "tokens") {
      o.tokens.clear();
      for (const std::string& s : split(name, v)) {
        const int t = static_cast<int>(parse_int(name, s, 1, 1 << 20));
        if (std::find(o.tokens.begin(), o.tokens.end(), t) == o.tokens.end()) o.tokens.push_back(t);
      }
      o.tokens_given = true;
    } else if (name == "reps")
      o.reps = static_cast<int>(parse_int(name, v, 1, 100000));
    else if (name == "budget")
      o.case_budget_s = parse_double(name, v, 0.0, 3600.0);
    else if (name == "seed")
      o.seed = static_cast<uint64_t>(parse_int(name, v, 0, INT64_MAX));
    else if (name == "no-baselines")
      o.baselines = false;
    else if (name == "baseline-cap-gb")
      o.baseline_cap_gb = parse_double(name, v, 0.0, 1e6);
    else if (name == "no-verify")
      o.verify = false;
    else if (name == "warm-l2")
      o.flush_l2 = false;
    else if (name == "clocks")
      o.clocks = true;
    else if (name == "device")
      o.device = static_cast<int>(parse_int(name, v, 0, 1023));
    else if (name == "csv")
      o.csv = v;
    else if (name == "json")
      o.json = v;
    else if (name == "help")
      o.help = true;
    if ((name == "csv" || name == "json") && v.empty())
      throw UsageError("--" + name + ": empty file name");
  }
  std::sort(o.tokens.begin(), o.tokens.end());
  return o;
}

}  // namespace mxmoe::bench
