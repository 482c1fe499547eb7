// mxmoe/config.h: the Kimi-K3 model config (the text_config part of config.json).
//
// Sizes are read, never hard-coded: every later layer takes them from here. Field names are
// those of Kimi-K3's public config.json (see KIMI_K3.md); a config that nests them under
// "text_config" (the multimodal checkpoint) and one that has them at the top level both load.
#pragma once

#include <string>

#include "mxmoe/common.h"

namespace mxmoe {

struct ModelConfig {
  int hidden_size = 7168;
  int routed_expert_hidden_size = 3584;  // the latent width the routed experts read and write
  int moe_intermediate_size = 3072;
  int num_experts = 896;
  int num_shared_experts = 2;
  int num_experts_per_token = 16;
  int num_hidden_layers = 93;
  int first_k_dense_replace = 1;  // layers [0, first_k_dense_replace) are dense
  int intermediate_size = 33792;  // dense layers
  int num_expert_group = 1;
  int topk_group = 1;
  std::string moe_router_activation_func = "sigmoid";
  bool moe_renormalize = true;
  double routed_scaling_factor = 1.0;
  std::string hidden_act = "situ";
  double activation_situ_beta = 4.0;
  double activation_situ_linear_beta = 25.0;
  bool latent_moe_use_norm = true;
  double rms_norm_eps = 1e-5;

  int shared_intermediate_size() const { return num_shared_experts * moe_intermediate_size; }
  bool is_moe_layer(int layer) const {
    return layer >= first_k_dense_replace && layer < num_hidden_layers;
  }
  // Throws mxmoe::Error naming the field when a value is out of range or inconsistent
  // (e.g. widths not multiples of 32, top-k > experts, unknown activation).
  void validate(const std::string& where) const;
};

// Parses config.json text (nlohmann::json). `where` names the file in error messages.
ModelConfig parse_config(const std::string& json_text, const std::string& where);
ModelConfig load_config(const std::string& path);  // throws mxmoe::Error
// A config.json in Kimi-K3's layout (fields under "text_config", plus quantization_config).
std::string config_to_json(const ModelConfig& cfg);

}  // namespace mxmoe
