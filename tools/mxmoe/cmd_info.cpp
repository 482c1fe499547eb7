// tools/mxmoe/cmd_info.cpp: `mxmoe info`: what a checkpoint holds.
//
// Prints the config summary, the MoE layers found in the tensor names (tensors, bytes, experts
// per layer), then per layer and matrix (w1 gate, w3 up, w2 down) the statistics of the MXFP4
// scale exponents: their range, the spread (max - min) along each weight row, and the rows whose
// spread exceeds the 14-binade window inside which a row converts to E4M3 exactly with one
// exponent offset (KIMI_K3.md; moe_layer.h: ScaleSpreadStats). The default table aggregates over
// experts and names the worst expert; --per-expert prints every expert.
// Loading a layer validates every expert tensor (shapes, NaN scale bytes), so info doubles as a
// checkpoint check.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <set>

#include "args.h"
#include "commands.h"
#include "mxmoe/moe_layer.h"
#include "timer.h"

namespace mxmoe::cli {

namespace {

const std::vector<FlagSpec> kFlags = {
    {"model", true, "DIR   checkpoint directory"},
    {"layer", true, "L     only this MoE layer's statistics"},
    {"experts", true, "N     statistics of the first N experts only"},
    {"per-expert", false, "      one line per expert and matrix"},
    {"no-stats", false, "      config and tensor summary only"},
};

// Parses "...layers.<L>.block_sparse_moe...[experts.<E>.]..."; false if not a MoE tensor.
bool parse_moe_name(const std::string& name, int* layer, int* expert) {
  const std::string key = "layers.";
  size_t p = name.find(key);
  if (p == std::string::npos || (p > 0 && name[p - 1] != '.')) return false;
  p += key.size();
  size_t q = p;
  while (q < name.size() && isdigit(static_cast<unsigned char>(name[q]))) ++q;
  if (q == p || q - p > 6 || name.compare(q, 18, ".block_sparse_moe.") != 0) return false;
  *layer = std::stoi(name.substr(p, q - p));
  *expert = -1;
  const std::string ek = ".experts.";
  size_t e = name.find(ek, q);
  if (e != std::string::npos) {
    size_t s = e + ek.size(), t = s;
    while (t < name.size() && isdigit(static_cast<unsigned char>(name[t]))) ++t;
    if (t > s && t - s <= 6) *expert = std::stoi(name.substr(s, t - s));
  }
  return true;
}

struct LayerSummary {
  int64_t tensors = 0;
  uint64_t bytes = 0;
  std::set<int> experts;
};

void print_stats_header() {
  std::printf("  %-6s %-6s %7s %10s %11s %11s %12s %12s %s\n", "layer", "matrix", "experts", "rows",
              "exp-min", "exp-max", "spread-max", "spread-mean", "rows>14");
}

void print_stats(const char* who, const char* matrix, int experts, const ScaleSpreadStats& s,
                 const std::string& extra) {
  const double pct = s.rows ? 100.0 * s.rows_outside_window / s.rows : 0.0;
  std::printf("  %-6s %-6s %7d %10lld %11d %11d %12d %12.3f %lld (%.3f%%)%s\n", who, matrix,
              experts, static_cast<long long>(s.rows), s.min_exponent - 127, s.max_exponent - 127,
              s.max_row_spread, s.mean_row_spread, static_cast<long long>(s.rows_outside_window),
              pct, extra.c_str());
}

}  // namespace

int cmd_info(int argc, char** argv) {
  Args a("info", kFlags, argc, argv, 2);
  if (a.help()) {
    std::fputs(Args::usage("info", "summarize a checkpoint and its MXFP4 scale statistics", kFlags)
                   .c_str(),
               stdout);
    return 0;
  }
  const std::string dir = a.require_str("model");
  const int only_layer = a.i32("layer", -1, 0, 1 << 20);
  const int max_experts = a.i32("experts", -1, 1, 1 << 20);
  const bool per_expert = a.has("per-expert");

  const ModelConfig cfg = load_config(dir + "/config.json");
  std::unique_ptr<Checkpoint> ckpt = Checkpoint::open(dir);

  std::printf("checkpoint %s\n", dir.c_str());
  std::printf(
      "config: hidden %d, latent %d, intermediate %d, %d routed experts (top-%d, %s, "
      "renormalize %s, scale %g), %d shared, %d layers (MoE from %d), situ beta %g "
      "linear_beta %g, rms_norm_eps %g\n",
      cfg.hidden_size, cfg.routed_expert_hidden_size, cfg.moe_intermediate_size, cfg.num_experts,
      cfg.num_experts_per_token, cfg.moe_router_activation_func.c_str(),
      cfg.moe_renormalize ? "yes" : "no", cfg.routed_scaling_factor, cfg.num_shared_experts,
      cfg.num_hidden_layers, cfg.first_k_dense_replace, cfg.activation_situ_beta,
      cfg.activation_situ_linear_beta, cfg.rms_norm_eps);

  std::map<int, LayerSummary> layers;
  int64_t other_tensors = 0;
  uint64_t total_bytes = 0;
  const std::vector<const TensorView*> all = ckpt->all();
  for (const TensorView* t : all) {
    total_bytes += t->nbytes;
    int l, e;
    if (!parse_moe_name(t->name, &l, &e)) {
      ++other_tensors;
      continue;
    }
    LayerSummary& s = layers[l];
    ++s.tensors;
    s.bytes += t->nbytes;
    if (e >= 0) s.experts.insert(e);
  }
  std::printf("tensors: %zu (%.1f MiB); %lld outside MoE blocks\n", all.size(),
              total_bytes / 1048576.0, static_cast<long long>(other_tensors));
  std::printf("MoE layers found: %zu\n", layers.size());
  std::printf("  %-6s %8s %12s %8s\n", "layer", "tensors", "MiB", "experts");
  for (const auto& [l, s] : layers)
    std::printf("  %-6d %8lld %12.1f %8zu%s\n", l, static_cast<long long>(s.tensors),
                s.bytes / 1048576.0, s.experts.size(),
                cfg.is_moe_layer(l) ? "" : "  (not a MoE layer per config.json)");
  if (a.has("no-stats")) return 0;
  if (only_layer >= 0 && !layers.count(only_layer))
    throw Error("--layer " + std::to_string(only_layer) + ": no MoE tensors of that layer in " +
                dir);

  std::printf(
      "MXFP4 scale exponents (unbiased; spread = max - min along a weight row; rows>14 "
      "do not fold into E4M3 with one offset per row)\n");
  print_stats_header();
  const char* names[3] = {"w1", "w3", "w2"};
  for (const auto& [l, summary] : layers) {
    if (only_layer >= 0 && l != only_layer) continue;
    if (!cfg.is_moe_layer(l)) continue;
    Timer t;
    const MoeLayer layer = load_moe_layer(*ckpt, cfg, l, LayerScope::kExperts);
    const int n = max_experts < 0 ? cfg.num_experts : std::min(max_experts, cfg.num_experts);
    for (int m = 0; m < 3; ++m) {
      ScaleSpreadStats agg;
      int worst = -1;
      int64_t worst_rows = -1;
      for (int e = 0; e < n; ++e) {
        const ExpertView& x = layer.experts[e];
        const Mxfp4View& v = m == 0 ? x.w1 : m == 1 ? x.w3 : x.w2;
        ScaleSpreadStats one;
        one.add(v);  // one pass over the scales: the layer's totals merge the per-expert ones
        agg.merge(one);
        if (one.rows_outside_window > worst_rows) {
          worst_rows = one.rows_outside_window;
          worst = e;
        }
        if (per_expert) print_stats(("e" + std::to_string(e)).c_str(), names[m], 1, one, "");
      }
      print_stats(std::to_string(l).c_str(), names[m], n, agg,
                  worst >= 0 && worst_rows > 0 ? "  worst expert " + std::to_string(worst) + " (" +
                                                     std::to_string(worst_rows) + " rows)"
                                               : "");
      // The spread histogram says how far past the window the outliers go, which decides the
      // fallback a kernel needs (a second offset per K block, or BF16).
      std::string hist;
      for (int d = 0; d < 256; ++d)
        if (agg.spread_histogram[d])
          hist += " " + std::to_string(d) + ":" + std::to_string(agg.spread_histogram[d]);
      std::printf("  %-6s %-6s rows per spread:%s\n", "", names[m], hist.c_str());
    }
    std::fprintf(stderr, "mxmoe info: layer %d statistics in %.2f s\n", l, t.seconds());
  }
  return 0;
}

}  // namespace mxmoe::cli
