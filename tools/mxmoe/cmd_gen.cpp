// tools/mxmoe/cmd_gen.cpp: `mxmoe gen`: a synthetic checkpoint in Kimi-K3's exact on-disk format
// (mxmoe/synthetic.h). Defaults are Kimi-K3's real shapes and one MoE layer (layer 1); every
// width is selectable so that tests and demos can run small.
#include <algorithm>
#include <cstdio>

#include "args.h"
#include "commands.h"
#include "mxmoe/synthetic.h"
#include "timer.h"

namespace mxmoe::cli {

namespace {

const std::vector<FlagSpec> kFlags = {
    {"out", true, "DIR           output directory (created; same-named files replaced)"},
    {"layers", true, "N             MoE layers to write, from layer 1 (default 1)"},
    {"experts", true, "E             routed experts per layer (default 896)"},
    {"topk", true, "K             experts per token (default 16, or E if E < 16)"},
    {"hidden", true, "H             hidden_size (default 7168)"},
    {"latent", true, "L             routed_expert_hidden_size (default 3584)"},
    {"intermediate", true, "I             moe_intermediate_size (default 3072)"},
    {"shared-experts", true, "S             num_shared_experts (default 2)"},
    {"seed", true, "S             RNG seed (default 1); same flags + seed = same bytes"},
    {"shard-mb", true, "MB            max data per shard in MiB (default 4096)"},
    {"scale-base", true, "D             centre of the row scale exponents (default -8)"},
    {"scale-jitter", true, "J             per-block scale exponent jitter (default 2)"},
    {"wide-row-fraction", true, "F  rows with one block far below their base (default 0.001)"},
    {"wide-row-spread", true, "B             binades those blocks sit below (default 17)"},
    {"quiet", false, "              no progress lines"},
};

}  // namespace

int cmd_gen(int argc, char** argv) {
  Args a("gen", kFlags, argc, argv, 2);
  if (a.help()) {
    std::fputs(Args::usage("gen", "write a synthetic Kimi-K3 checkpoint", kFlags).c_str(), stdout);
    return 0;
  }
  SyntheticOptions o;
  o.out_dir = a.require_str("out");
  ModelConfig& c = o.cfg;
  o.num_layers = a.i32("layers", 1, 1, 1000);
  c.num_experts = a.i32("experts", c.num_experts, 1, 1 << 16);
  // Only an explicit --topk may exceed the experts (and is then rejected by the config check);
  // a smaller --experts alone brings the default top-16 down with it.
  c.num_experts_per_token =
      a.i32("topk", std::min(c.num_experts_per_token, c.num_experts), 1, 1 << 16);
  c.hidden_size = a.i32("hidden", c.hidden_size, 1, 1 << 20);
  c.routed_expert_hidden_size = a.i32("latent", c.routed_expert_hidden_size, 1, 1 << 20);
  c.moe_intermediate_size = a.i32("intermediate", c.moe_intermediate_size, 1, 1 << 20);
  c.num_shared_experts = a.i32("shared-experts", c.num_shared_experts, 0, 64);
  o.seed = a.u64("seed", o.seed);
  o.shard_bytes = static_cast<size_t>(a.i64("shard-mb", 4096, 1, int64_t(1) << 30)) << 20;
  o.scale_base_offset = a.i32("scale-base", o.scale_base_offset, -100, 100);
  o.scale_jitter = a.i32("scale-jitter", o.scale_jitter, 0, 64);
  o.wide_row_fraction = a.f64("wide-row-fraction", o.wide_row_fraction);
  if (o.wide_row_fraction < 0 || o.wide_row_fraction > 1)
    throw UsageError("flag --wide-row-fraction must be in [0, 1]");
  o.wide_row_spread = a.i32("wide-row-spread", o.wide_row_spread, 0, 100);
  o.progress = !a.has("quiet");
  c.num_hidden_layers = c.first_k_dense_replace + o.num_layers;
  c.validate("mxmoe gen flags");  // names the field, before any file is touched

  Timer t;
  const uint64_t bytes = write_synthetic_checkpoint(o);
  std::printf(
      "%s: %.1f MiB in %.1f s; %d MoE layer(s) from layer %d, %d experts (top-%d), "
      "hidden %d, latent %d, intermediate %d, seed %llu\n",
      o.out_dir.c_str(), bytes / 1048576.0, t.seconds(), o.num_layers, c.first_k_dense_replace,
      c.num_experts, c.num_experts_per_token, c.hidden_size, c.routed_expert_hidden_size,
      c.moe_intermediate_size, static_cast<unsigned long long>(o.seed));
  return 0;
}

}  // namespace mxmoe::cli
