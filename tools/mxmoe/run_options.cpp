// tools/mxmoe/run_options.cpp: flags shared by `run` and `check`, and request loading.
#include "run_options.h"

#include <cmath>

#include "io.h"

namespace mxmoe::cli {

std::vector<FlagSpec> run_option_flags() {
  return {
      {"model", true, "DIR             checkpoint directory (config.json + safetensors)"},
      {"layer", true, "L               MoE layer to run (default: the first MoE layer)"},
      {"input", true, "IN.safetensors  hidden_states (+ topk_ids, topk_weights for experts)"},
      {"scope", true, "experts|block   routed experts on latent inputs, or the whole MoE block"},
      {"act", true, "mxfp8|bf16      activation mode (default mxfp8; implied by --backend)"},
      {"backend", true, "w4a8|w4a16      GPU backend (w4a8 <-> mxfp8, w4a16 <-> bf16)"},
      {"ep-start", true, "S               first expert this rank owns (scope experts)"},
      {"ep-count", true, "C               experts this rank owns (default: all from S)"},
      {"beta", true, "B               SiTU beta (default: the config's)"},
      {"linear-beta", true, "LB              SiTU linear_beta (default: the config's)"},
  };
}

RunOptions parse_run_options(const Args& a) {
  RunOptions o;
  o.model = a.require_str("model");
  o.input = a.require_str("input");
  o.layer = a.i32("layer", -1, 0, 1 << 20);
  o.scope = a.choice("scope", "experts", {"experts", "block"}) == "experts" ? Scope::kExperts
                                                                            : Scope::kBlock;
  // The act/backend pairing: each names the same numerics, one for the CPU reference, one for
  // the GPU kernels.
  const bool has_act = a.has("act"), has_backend = a.has("backend");
  const std::string act = a.choice("act", "mxfp8", {"mxfp8", "bf16"});
  const std::string backend = a.choice("backend", "w4a8", {"w4a8", "w4a16"});
  const std::string act_of_backend = backend == "w4a8" ? "mxfp8" : "bf16";
  if (has_act && has_backend && act != act_of_backend)
    throw UsageError("--act " + act + " conflicts with --backend " + backend +
                     " (w4a8 runs mxfp8, "
                     "w4a16 runs bf16)");
  const std::string chosen = has_backend && !has_act ? act_of_backend : act;
  o.act = chosen == "mxfp8" ? ActMode::kMxfp8 : ActMode::kBf16;
  o.backend = chosen == "mxfp8" ? "w4a8" : "w4a16";

  o.ep_start = a.i32("ep-start", 0, 0, 1 << 30);
  o.ep_count = a.i32("ep-count", -1, 1, 1 << 30);
  if (o.scope == Scope::kBlock && (a.has("ep-start") || a.has("ep-count")))
    throw UsageError(
        "--ep-start/--ep-count apply to --scope experts only (the block's RMSNorm "
        "needs every expert's sum)");
  o.has_beta = a.has("beta");
  o.has_linear_beta = a.has("linear-beta");
  o.beta = a.f64("beta", 0.0);
  o.linear_beta = a.f64("linear-beta", 0.0);
  if (o.has_beta && !(o.beta > 0)) throw UsageError("--beta must be positive");
  if (o.has_linear_beta && !(o.linear_beta > 0)) throw UsageError("--linear-beta must be positive");
  return o;
}

LoadedRun load_run(const RunOptions& o) {
  LoadedRun r;
  r.cfg = load_config(o.model + "/config.json");
  const ModelConfig& cfg = r.cfg;
  const int layer = o.layer < 0 ? cfg.first_k_dense_replace : o.layer;
  if (!cfg.is_moe_layer(layer))
    throw Error("--layer " + std::to_string(layer) + " is not a MoE layer of " + o.model +
                " (MoE layers are " + std::to_string(cfg.first_k_dense_replace) + ".." +
                std::to_string(cfg.num_hidden_layers - 1) + ")");
  if (o.ep_start >= cfg.num_experts ||
      (o.ep_count > 0 && int64_t(o.ep_start) + o.ep_count > cfg.num_experts))
    throw Error("--ep-start " + std::to_string(o.ep_start) + " --ep-count " +
                std::to_string(o.ep_count) + " does not fit the " +
                std::to_string(cfg.num_experts) + " experts of " + o.model);

  r.ckpt = Checkpoint::open(o.model);
  r.layer = std::make_unique<MoeLayer>(load_moe_layer(
      *r.ckpt, cfg, layer, o.scope == Scope::kBlock ? LayerScope::kBlock : LayerScope::kExperts));

  RunRequest& q = r.req;
  q.layer = r.layer.get();
  q.scope = o.scope;
  q.act = o.act;
  read_run_input(o.input, cfg, o.scope, &q);
  q.range.start = o.ep_start;
  q.range.count = o.ep_count;
  q.situ = situ_from_config(cfg);
  if (o.has_beta) q.situ.beta = static_cast<float>(o.beta);
  if (o.has_linear_beta) q.situ.linear_beta = static_cast<float>(o.linear_beta);
  return r;
}

}  // namespace mxmoe::cli
