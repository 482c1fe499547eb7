// config.cpp: Kimi-K3 config.json -> ModelConfig, validation, and the Kimi-layout writer.
//
// Fields are read from "text_config" when the root has one (the multimodal checkpoint), else from
// the root. Required: the shape fields and the two activation names, because a default there would
// silently compute a different model. Optional fields take ModelConfig's defaults (Kimi-K3's
// values); a null value counts as absent. DeepSeek/Kimi-K2 spellings (n_routed_experts,
// num_experts_per_tok, n_shared_experts) are accepted as aliases. Unknown fields are ignored.
// Limitations: group-limited routing (num_expert_group > 1) is rejected, since nothing in mxmoe
// implements it; sizes are capped (see validate) so that products of them fit in 64 bits.
#include "mxmoe/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "json_util.h"

namespace mxmoe {
namespace {

using json = nlohmann::json;

class Reader {
 public:
  Reader(const json& obj, const std::string& where) : obj_(obj), where_(where) {}

  // The value under the first present, non-null name; nullptr when none.
  const json* get(std::initializer_list<const char*> names, bool required) const {
    for (const char* n : names) {
      auto it = obj_.find(n);
      if (it != obj_.end() && !it->is_null()) return &*it;
    }
    if (required) throw Error(where_ + ": missing required field '" + *names.begin() + "'");
    return nullptr;
  }
  void read_int(int* out, std::initializer_list<const char*> names, bool required) const {
    const json* v = get(names, required);
    if (!v) return;
    // Integral floats (e.g. 16.0) are rejected too: a config writer that emits them is broken.
    if (!v->is_number_integer())
      throw Error(where_ + ": field '" + *names.begin() + "' must be an integer, got " +
                  detail::brief(*v));
    const int64_t x = v->is_number_unsigned()
                          ? static_cast<int64_t>(std::min<uint64_t>(v->get<uint64_t>(), 1ull << 40))
                          : v->get<int64_t>();
    if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
      throw Error(where_ + ": field '" + *names.begin() +
                  "' is out of range: " + detail::brief(*v));
    *out = static_cast<int>(x);
  }
  void read_double(double* out, const char* name, bool required) const {
    const json* v = get({name}, required);
    if (!v) return;
    if (!v->is_number())
      throw Error(where_ + ": field '" + name + "' must be a number, got " + detail::brief(*v));
    *out = v->get<double>();
  }
  void read_bool(bool* out, const char* name) const {
    const json* v = get({name}, false);
    if (!v) return;
    if (!v->is_boolean())
      throw Error(where_ + ": field '" + name + "' must be true or false, got " +
                  detail::brief(*v));
    *out = v->get<bool>();
  }
  void read_string(std::string* out, const char* name, bool required) const {
    const json* v = get({name}, required);
    if (!v) return;
    if (!v->is_string())
      throw Error(where_ + ": field '" + name + "' must be a string, got " + detail::brief(*v));
    *out = v->get<std::string>();
  }

 private:
  const json& obj_;
  const std::string& where_;
};

void check(bool ok, const std::string& where, const std::string& what) {
  if (!ok) throw Error(where + ": " + what);
}

}  // namespace

void ModelConfig::validate(const std::string& where) const {
  constexpr int kMaxWidth = 1 << 20;  // keeps rows * cols products far from 64-bit overflow
  auto width = [&](int v, const char* name) {
    check(v > 0 && v <= kMaxWidth && v % 32 == 0, where,
          std::string(name) + " = " + std::to_string(v) +
              " must be a positive multiple of 32 (the MX block) and at most 2^20");
  };
  width(hidden_size, "hidden_size");
  width(routed_expert_hidden_size, "routed_expert_hidden_size");
  width(moe_intermediate_size, "moe_intermediate_size");
  check(intermediate_size >= 0 && intermediate_size <= kMaxWidth, where,
        "intermediate_size = " + std::to_string(intermediate_size) + " is out of range");
  check(num_experts >= 1 && num_experts <= 65536, where,
        "num_experts = " + std::to_string(num_experts) + " must be in [1, 65536]");
  check(num_experts_per_token >= 1 && num_experts_per_token <= num_experts, where,
        "num_experts_per_token = " + std::to_string(num_experts_per_token) +
            " must be in [1, num_experts = " + std::to_string(num_experts) + "]");
  check(num_shared_experts >= 0 && num_shared_experts <= 64, where,
        "num_shared_experts = " + std::to_string(num_shared_experts) + " must be in [0, 64]");
  check(num_hidden_layers >= 1 && num_hidden_layers <= 4096, where,
        "num_hidden_layers = " + std::to_string(num_hidden_layers) + " must be in [1, 4096]");
  check(first_k_dense_replace >= 0 && first_k_dense_replace <= num_hidden_layers, where,
        "first_k_dense_replace = " + std::to_string(first_k_dense_replace) +
            " must be in [0, num_hidden_layers]");
  check(num_expert_group == 1 && topk_group == 1, where,
        "num_expert_group = " + std::to_string(num_expert_group) + ", topk_group = " +
            std::to_string(topk_group) + ": group-limited routing is not supported (need 1, 1)");
  check(moe_router_activation_func == "sigmoid", where,
        "moe_router_activation_func '" + detail::printable(moe_router_activation_func, 40) +
            "' is not supported (Kimi-K3 routes with 'sigmoid')");
  check(hidden_act == "situ", where,
        "hidden_act '" + detail::printable(hidden_act, 40) +
            "' is not supported (Kimi-K3 experts use 'situ')");
  auto positive = [&](double v, const char* name) {
    check(std::isfinite(v) && v > 0, where,
          std::string(name) + " = " + std::to_string(v) + " must be a finite positive number");
  };
  positive(routed_scaling_factor, "routed_scaling_factor");
  positive(activation_situ_beta, "activation_situ_beta");
  positive(activation_situ_linear_beta, "activation_situ_linear_beta");
  positive(rms_norm_eps, "rms_norm_eps");
}

ModelConfig parse_config(const std::string& json_text, const std::string& where) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) throw Error(where + ": not valid JSON");
  if (!root.is_object()) throw Error(where + ": not a JSON object");
  const json* obj = &root;
  auto tc = root.find("text_config");
  if (tc != root.end() && !tc->is_null()) {
    if (!tc->is_object()) throw Error(where + ": text_config is not a JSON object");
    obj = &*tc;
  }
  const std::string w = obj == &root ? where : where + " (text_config)";
  Reader r(*obj, w);
  ModelConfig c;
  r.read_int(&c.hidden_size, {"hidden_size"}, true);
  r.read_int(&c.routed_expert_hidden_size, {"routed_expert_hidden_size"}, true);
  r.read_int(&c.moe_intermediate_size, {"moe_intermediate_size"}, true);
  r.read_int(&c.num_experts, {"num_experts", "n_routed_experts"}, true);
  r.read_int(&c.num_shared_experts, {"num_shared_experts", "n_shared_experts"}, true);
  r.read_int(&c.num_experts_per_token, {"num_experts_per_token", "num_experts_per_tok"}, true);
  r.read_int(&c.num_hidden_layers, {"num_hidden_layers"}, true);
  r.read_int(&c.first_k_dense_replace, {"first_k_dense_replace"}, false);
  r.read_int(&c.intermediate_size, {"intermediate_size"}, false);
  r.read_int(&c.num_expert_group, {"num_expert_group", "n_group"}, false);
  r.read_int(&c.topk_group, {"topk_group"}, false);
  r.read_string(&c.moe_router_activation_func, "moe_router_activation_func", true);
  r.read_bool(&c.moe_renormalize, "moe_renormalize");
  r.read_double(&c.routed_scaling_factor, "routed_scaling_factor", false);
  r.read_string(&c.hidden_act, "hidden_act", true);
  r.read_double(&c.activation_situ_beta, "activation_situ_beta", false);
  r.read_double(&c.activation_situ_linear_beta, "activation_situ_linear_beta", false);
  r.read_bool(&c.latent_moe_use_norm, "latent_moe_use_norm");
  r.read_double(&c.rms_norm_eps, "rms_norm_eps", false);
  c.validate(w);
  return c;
}

ModelConfig load_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(path + ": cannot read");
  return parse_config(ss.str(), path);
}

std::string config_to_json(const ModelConfig& c) {
  json tc = {
      {"model_type", "kimi_k3"},
      {"hidden_size", c.hidden_size},
      {"routed_expert_hidden_size", c.routed_expert_hidden_size},
      {"moe_intermediate_size", c.moe_intermediate_size},
      {"num_experts", c.num_experts},
      {"num_shared_experts", c.num_shared_experts},
      {"num_experts_per_token", c.num_experts_per_token},
      {"num_hidden_layers", c.num_hidden_layers},
      {"first_k_dense_replace", c.first_k_dense_replace},
      {"intermediate_size", c.intermediate_size},
      {"num_expert_group", c.num_expert_group},
      {"topk_group", c.topk_group},
      {"moe_router_activation_func", c.moe_router_activation_func},
      {"moe_renormalize", c.moe_renormalize},
      {"routed_scaling_factor", c.routed_scaling_factor},
      {"hidden_act", c.hidden_act},
      {"activation_situ_beta", c.activation_situ_beta},
      {"activation_situ_linear_beta", c.activation_situ_linear_beta},
      {"latent_moe_use_norm", c.latent_moe_use_norm},
      {"rms_norm_eps", c.rms_norm_eps},
  };
  // compressed-tensors' description of the routed experts: MXFP4 (E2M1, group 32, UE8M0 scales
  // stored as uint8) packed two per byte. Everything else (router, latent projections, norm,
  // shared experts) stays BF16, hence the ignore list.
  json weights = {{"num_bits", 4},
                  {"type", "float"},
                  {"strategy", "group"},
                  {"group_size", 32},
                  {"symmetric", true},
                  {"dynamic", false},
                  {"scale_dtype", "torch.uint8"},
                  {"observer", "minmax"}};
  json qc = {
      {"quant_method", "compressed-tensors"},
      {"format", "mxfp4-pack-quantized"},
      {"quantization_status", "compressed"},
      {"config_groups",
       {{"group_0",
         {{"targets", {"re:.*block_sparse_moe\\.experts\\.\\d+\\.w[123]$"}},
          {"weights", weights},
          {"input_activations", nullptr},
          {"output_activations", nullptr},
          {"format", "mxfp4-pack-quantized"}}}}},
      {"ignore",
       {"lm_head", "re:.*self_attn.*", "re:.*block_sparse_moe\\.gate$",
        "re:.*routed_expert_(down|up)_proj$", "re:.*shared_experts.*", "re:.*mlp\\..*"}},
  };
  json root = {
      {"architectures", {"KimiK3ForConditionalGeneration"}},
      {"model_type", "kimi_k3"},
      {"text_config", tc},
      {"quantization_config", qc},
      {"torch_dtype", "bfloat16"},
  };
  return root.dump(2) + "\n";
}

}  // namespace mxmoe
