// fuzz_config.cpp: libFuzzer harness for parse_config.
//
// Properties: any text either parses into a config that passes validate(), or throws
// mxmoe::Error; and a parsed config survives config_to_json -> parse_config unchanged in every
// field (the writer and the reader agree). Anything else aborts.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "mxmoe/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mxmoe::ModelConfig c;
  try {
    c = mxmoe::parse_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz.json");
  } catch (const mxmoe::Error&) {
    return 0;
  }
  c.validate("fuzz.json");  // must not throw: parse_config validated it
  const mxmoe::ModelConfig b = mxmoe::parse_config(mxmoe::config_to_json(c), "round trip");
  const bool same =
      b.hidden_size == c.hidden_size &&
      b.routed_expert_hidden_size == c.routed_expert_hidden_size &&
      b.moe_intermediate_size == c.moe_intermediate_size && b.num_experts == c.num_experts &&
      b.num_shared_experts == c.num_shared_experts &&
      b.num_experts_per_token == c.num_experts_per_token &&
      b.num_hidden_layers == c.num_hidden_layers &&
      b.first_k_dense_replace == c.first_k_dense_replace &&
      b.intermediate_size == c.intermediate_size && b.num_expert_group == c.num_expert_group &&
      b.topk_group == c.topk_group && b.moe_renormalize == c.moe_renormalize &&
      b.routed_scaling_factor == c.routed_scaling_factor && b.hidden_act == c.hidden_act &&
      b.moe_router_activation_func == c.moe_router_activation_func &&
      b.activation_situ_beta == c.activation_situ_beta &&
      b.activation_situ_linear_beta == c.activation_situ_linear_beta &&
      b.latent_moe_use_norm == c.latent_moe_use_norm && b.rms_norm_eps == c.rms_norm_eps;
  if (!same) std::abort();
  return 0;
}
