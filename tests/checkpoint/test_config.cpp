// test_config.cpp: config.json parsing (nested text_config and top level), required fields,
// bad values naming the field, unknown fields ignored, and config_to_json round trips.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "mxmoe/config.h"
#include "test_util.h"

namespace mxmoe {
namespace {

using json = nlohmann::json;

// Kimi-K3's text_config values as KIMI_K3.md lists them, written by hand (not by config_to_json).
json kimi_text_config() {
  return json::parse(R"({
    "hidden_size": 7168, "routed_expert_hidden_size": 3584, "moe_intermediate_size": 3072,
    "num_experts": 896, "num_shared_experts": 2, "num_experts_per_token": 16,
    "num_hidden_layers": 93, "first_k_dense_replace": 1, "intermediate_size": 33792,
    "moe_router_activation_func": "sigmoid", "num_expert_group": 1, "topk_group": 1,
    "moe_renormalize": true, "routed_scaling_factor": 1.0, "hidden_act": "situ",
    "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
    "latent_moe_use_norm": true, "rms_norm_eps": 1e-05,
    "vocab_size": 163840, "rope_theta": 50000.0, "some_future_field": {"x": [1, 2]}
  })");
}

void expect_kimi(const ModelConfig& c) {
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.routed_expert_hidden_size, 3584);
  EXPECT_EQ(c.moe_intermediate_size, 3072);
  EXPECT_EQ(c.num_experts, 896);
  EXPECT_EQ(c.num_shared_experts, 2);
  EXPECT_EQ(c.num_experts_per_token, 16);
  EXPECT_EQ(c.num_hidden_layers, 93);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_EQ(c.intermediate_size, 33792);
  EXPECT_EQ(c.moe_router_activation_func, "sigmoid");
  EXPECT_TRUE(c.moe_renormalize);
  EXPECT_EQ(c.routed_scaling_factor, 1.0);
  EXPECT_EQ(c.hidden_act, "situ");
  EXPECT_EQ(c.activation_situ_beta, 4.0);
  EXPECT_EQ(c.activation_situ_linear_beta, 25.0);
  EXPECT_TRUE(c.latent_moe_use_norm);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.shared_intermediate_size(), 6144);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_TRUE(c.is_moe_layer(92));
  EXPECT_FALSE(c.is_moe_layer(93));
}

TEST(Config, NestedTextConfig) {
  json root = {{"model_type", "kimi_k3"},
               {"text_config", kimi_text_config()},
               {"vision_config", {{"hidden_size", 1152}}}};
  expect_kimi(parse_config(root.dump(), "config.json"));
}

TEST(Config, TopLevel) { expect_kimi(parse_config(kimi_text_config().dump(), "config.json")); }

TEST(Config, NonDefaultValuesAreRead) {
  json tc = kimi_text_config();
  tc["hidden_size"] = 2048;
  tc["num_experts"] = 64;
  tc["num_experts_per_token"] = 6;
  tc["activation_situ_beta"] = 2.5;
  tc["moe_renormalize"] = false;
  tc["rms_norm_eps"] = 1e-6;
  const ModelConfig c = parse_config(tc.dump(), "c");
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_experts, 64);
  EXPECT_EQ(c.num_experts_per_token, 6);
  EXPECT_EQ(c.activation_situ_beta, 2.5);
  EXPECT_FALSE(c.moe_renormalize);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
}

TEST(Config, DeepSeekStyleAliases) {
  json tc = kimi_text_config();
  tc.erase("num_experts");
  tc.erase("num_experts_per_token");
  tc.erase("num_shared_experts");
  tc["n_routed_experts"] = 128;
  tc["num_experts_per_tok"] = 8;
  tc["n_shared_experts"] = 1;
  const ModelConfig c = parse_config(tc.dump(), "c");
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.num_experts_per_token, 8);
  EXPECT_EQ(c.num_shared_experts, 1);
}

TEST(Config, OptionalFieldsTakeDefaults) {
  json tc = kimi_text_config();
  for (const char* k :
       {"first_k_dense_replace", "intermediate_size", "num_expert_group", "topk_group",
        "moe_renormalize", "routed_scaling_factor", "activation_situ_beta",
        "activation_situ_linear_beta", "latent_moe_use_norm", "rms_norm_eps"})
    tc.erase(k);
  tc["rms_norm_eps"] = nullptr;  // null counts as absent
  expect_kimi(parse_config(tc.dump(), "c"));
}

// Expects parse_config to throw with a one-line message containing `where` and `field`.
void expect_error(const json& doc, const std::string& field) {
  try {
    parse_config(doc.dump(), "/models/k3/config.json");
    ADD_FAILURE() << "accepted; expected an error about " << field;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("/models/k3/config.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(field), std::string::npos) << "'" << msg << "' lacks " << field;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(Config, MissingRequiredFields) {
  for (const char* k : {"hidden_size", "routed_expert_hidden_size", "moe_intermediate_size",
                        "num_experts", "num_shared_experts", "num_experts_per_token",
                        "num_hidden_layers", "hidden_act", "moe_router_activation_func"}) {
    json tc = kimi_text_config();
    tc.erase(k);
    expect_error(tc, k);
    expect_error(json{{"text_config", tc}}, k);
  }
}

TEST(Config, BadValues) {
  struct Case {
    const char* field;
    json value;
  };
  const Case cases[] = {
      {"hidden_size", 7000},  // not a multiple of 32
      {"routed_expert_hidden_size", 3583},
      {"moe_intermediate_size", 0},
      {"moe_intermediate_size", -64},
      {"num_experts", 0},
      {"num_experts_per_token", 897},  // top-k > experts
      {"num_experts_per_token", 0},
      {"num_shared_experts", -1},
      {"num_hidden_layers", 0},
      {"first_k_dense_replace", 94},
      {"num_expert_group", 8},  // group-limited routing: unsupported
      {"moe_router_activation_func", "softmax"},
      {"hidden_act", "silu"},
      {"activation_situ_beta", 0.0},
      {"activation_situ_linear_beta", -25.0},
      {"routed_scaling_factor", 0.0},
      {"rms_norm_eps", 0.0},
      {"hidden_size", "7168"},  // wrong JSON types
      {"hidden_size", 7168.5},
      {"num_experts", 1e12},
      {"num_experts", 99999999999},
      {"moe_renormalize", 1},
      {"hidden_act", 3},
      {"activation_situ_beta", "4"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.field) + " = " + c.value.dump());
    json tc = kimi_text_config();
    tc[c.field] = c.value;
    expect_error(tc, c.field);
  }
}

TEST(Config, MalformedDocuments) {
  for (const char* doc : {"", "{", "[]", "42", "{\"text_config\": 5}", "null"}) {
    SCOPED_TRACE(doc);
    EXPECT_THROW(parse_config(doc, "x.json"), Error);
  }
  try {
    load_config("/nonexistent/config.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/config.json"), std::string::npos);
  }
}

TEST(Config, ToJsonRoundTripAndKimiLayout) {
  ModelConfig c = test::small_config();
  c.activation_situ_beta = 3.5;
  c.activation_situ_linear_beta = 20.0;
  c.routed_scaling_factor = 2.5;
  c.moe_renormalize = false;
  const std::string text = config_to_json(c);
  const json doc = json::parse(text);
  ASSERT_TRUE(doc.contains("text_config"));  // Kimi layout: fields nested
  EXPECT_FALSE(doc.contains("hidden_size"));
  EXPECT_EQ(doc["quantization_config"]["quant_method"], "compressed-tensors");
  EXPECT_EQ(doc["quantization_config"]["format"], "mxfp4-pack-quantized");
  EXPECT_EQ(doc["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"], 32);
  const ModelConfig b = parse_config(text, "rt");
  EXPECT_EQ(b.hidden_size, c.hidden_size);
  EXPECT_EQ(b.routed_expert_hidden_size, c.routed_expert_hidden_size);
  EXPECT_EQ(b.moe_intermediate_size, c.moe_intermediate_size);
  EXPECT_EQ(b.num_experts, c.num_experts);
  EXPECT_EQ(b.num_experts_per_token, c.num_experts_per_token);
  EXPECT_EQ(b.num_shared_experts, c.num_shared_experts);
  EXPECT_EQ(b.num_hidden_layers, c.num_hidden_layers);
  EXPECT_EQ(b.first_k_dense_replace, c.first_k_dense_replace);
  EXPECT_EQ(b.activation_situ_beta, 3.5);
  EXPECT_EQ(b.activation_situ_linear_beta, 20.0);
  EXPECT_EQ(b.routed_scaling_factor, 2.5);
  EXPECT_FALSE(b.moe_renormalize);
  EXPECT_EQ(b.rms_norm_eps, c.rms_norm_eps);
}

}  // namespace
}  // namespace mxmoe
