// test_synthetic.cpp: the synthetic checkpoint writer: the directory layout (config, index,
// shards named model-0000N-of-0000M, shard size cap, experts kept whole and shuffled), determinism
// from the seed, and value statistics (scale exponents, wide rows, dense weights).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "mxmoe/formats.h"
#include "mxmoe/moe_layer.h"
#include "mxmoe/synthetic.h"
#include "test_util.h"

namespace mxmoe {
namespace {

using json = nlohmann::json;
using test::ScratchDir;

SyntheticOptions small_options(const std::string& dir) {
  SyntheticOptions o;
  o.out_dir = dir;
  o.cfg = test::small_config();
  o.num_layers = 2;
  o.seed = 11;
  o.progress = false;
  return o;
}

TEST(Synthetic, LayoutIndexAndShards) {
  ScratchDir d;
  SyntheticOptions o = small_options(d.path());
  o.cfg.num_hidden_layers = 50;  // overridden: the config must describe the layers written
  o.cfg.num_experts = 20;
  o.shard_bytes = 30000;
  const uint64_t total = write_synthetic_checkpoint(o);

  const ModelConfig cfg = load_config(d.file("config.json"));
  EXPECT_EQ(cfg.num_hidden_layers, 3);
  EXPECT_EQ(cfg.num_experts, 20);
  const json idx = json::parse(test::read_file(d.file("model.safetensors.index.json")));
  EXPECT_EQ(idx["metadata"]["total_size"].get<uint64_t>(), total);
  const json& wm = idx["weight_map"];

  std::set<std::string> shards;
  for (auto it = wm.begin(); it != wm.end(); ++it) shards.insert(it.value().get<std::string>());
  ASSERT_GE(shards.size(), 3u);
  size_t n = 0;
  char expect[64];
  for (const std::string& s : shards) {
    std::snprintf(expect, sizeof expect, "model-%05zu-of-%05zu.safetensors", ++n, shards.size());
    EXPECT_EQ(s, expect);
  }

  auto ck = Checkpoint::open(d.path());
  // Tensors per MoE layer: 20 experts x 6 + 8 block tensors; nothing else.
  EXPECT_EQ(ck->all().size(), size_t(2 * (20 * 6 + 8)));
  EXPECT_EQ(wm.size(), ck->all().size());
  uint64_t sum = 0;
  std::map<std::string, uint64_t> shard_bytes;
  for (const TensorView* t : ck->all()) {
    sum += t->nbytes;
    shard_bytes[t->file] += t->nbytes;
    EXPECT_EQ(test::fs::path(t->file).filename().string(), wm[t->name].get<std::string>());
  }
  EXPECT_EQ(sum, total);
  // The cap holds for every shard except one holding a single oversized group (the dense block
  // group of this config is ~63 KB > 30000).
  for (const auto& kv : shard_bytes) {
    auto f = SafetensorsFile::open(kv.first);
    const bool single_block = f->find("model.layers.1.block_sparse_moe.gate.weight") ||
                              f->find("model.layers.2.block_sparse_moe.gate.weight");
    if (!single_block) {
      EXPECT_LE(kv.second, o.shard_bytes) << kv.first;
    }
  }
  // Each expert's six tensors share a shard, and experts are not stored in id order.
  int inversions = 0;
  for (int layer = 1; layer <= 2; ++layer) {
    const TensorView* prev = nullptr;
    for (int e = 0; e < 20; ++e) {
      const std::string x = moe_prefix(layer) + "experts." + std::to_string(e) + ".";
      const TensorView* first = ck->find(x + "w1.weight_packed");
      ASSERT_NE(first, nullptr);
      for (const char* w : {"w1.weight_scale", "w2.weight_packed", "w2.weight_scale",
                            "w3.weight_packed", "w3.weight_scale"})
        EXPECT_EQ(ck->find(x + w)->file, first->file) << x + w;
      if (prev &&
          (first->file < prev->file || (first->file == prev->file && first->data < prev->data)))
        ++inversions;
      prev = first;
    }
  }
  EXPECT_GT(inversions, 5) << "experts look stored in id order; they should be shuffled";
}

TEST(Synthetic, DeterministicFromSeed) {
  ScratchDir a, b, c;
  SyntheticOptions o = small_options(a.path());
  o.shard_bytes = 50000;
  write_synthetic_checkpoint(o);
  o.out_dir = b.path();
  write_synthetic_checkpoint(o);
  o.out_dir = c.path();
  o.seed = 12;
  write_synthetic_checkpoint(o);
  size_t files = 0;
  for (const auto& e : test::fs::directory_iterator(a.path())) {
    const std::string name = e.path().filename().string();
    ++files;
    EXPECT_EQ(test::read_file(a.file(name)), test::read_file(b.file(name))) << name;
    if (name.find(".safetensors") != std::string::npos && name.find("index") == std::string::npos &&
        test::fs::exists(c.file(name))) {
      EXPECT_NE(test::read_file(a.file(name)), test::read_file(c.file(name))) << name;
    }
  }
  EXPECT_GE(files, 4u);  // config, index, >= 2 shards
}

TEST(Synthetic, ScaleAndValueStatistics) {
  ScratchDir d;
  SyntheticOptions o = small_options(d.path());
  o.num_layers = 1;
  o.cfg.num_experts = 16;
  o.cfg.routed_expert_hidden_size = 512;  // 16 scale blocks per w1/w3 row
  o.cfg.moe_intermediate_size = 256;
  o.cfg.hidden_size = 512;
  o.wide_row_fraction = 0.1;
  write_synthetic_checkpoint(o);
  auto ck = Checkpoint::open(d.path());
  const ModelConfig cfg = load_config(d.file("config.json"));
  const MoeLayer m = load_moe_layer(*ck, cfg, 1, LayerScope::kBlock);
  ScaleSpreadStats s;
  for (const ExpertView& e : m.experts) {
    s.add(e.w1);
    s.add(e.w3);
  }
  EXPECT_EQ(s.rows, 16 * 2 * 256);
  // ~10% wide rows; each is pushed 17 binades below its base, beyond the 14-binade window.
  const double wide = double(s.rows_outside_window) / s.rows;
  EXPECT_GT(wide, 0.07);
  EXPECT_LT(wide, 0.13);
  EXPECT_GE(s.max_row_spread, 15);
  // The other rows: base jitter +-2 per block, so spread <= 4.
  int64_t narrow = 0;
  for (int sp = 0; sp <= 4; ++sp) narrow += s.spread_histogram[sp];
  EXPECT_EQ(narrow + s.rows_outside_window, s.rows);
  // Exponents centre on 127 - 8 (row base +-2, block +-2; wide blocks go 17 lower).
  EXPECT_GE(s.max_exponent, 119);
  EXPECT_LE(s.max_exponent, 123);
  EXPECT_LE(s.min_exponent, 119 - 17);

  // Dense weights ~ N(0, 1/sqrt(fan_in)); the norm ~1; the bias small.
  double sum = 0, sq = 0;
  const int64_t n = int64_t(m.latent_down.rows) * m.latent_down.cols;
  for (int64_t i = 0; i < n; ++i) {
    const double v = bf16_to_float(m.latent_down.data[i]);
    sum += v;
    sq += v * v;
  }
  const double sd = std::sqrt(sq / n - (sum / n) * (sum / n));
  EXPECT_NEAR(sum / n, 0.0, 0.005);
  EXPECT_NEAR(sd, 1.0 / std::sqrt(512.0), 0.1 / std::sqrt(512.0));
  for (int i = 0; i < cfg.routed_expert_hidden_size; ++i) {
    const float w = bf16_to_float(m.latent_norm[i]);
    ASSERT_GT(w, 0.5f);
    ASSERT_LT(w, 1.5f);
  }
  for (int e = 0; e < cfg.num_experts; ++e) ASSERT_LT(std::fabs(m.router_bias[e]), 0.1f);
}

TEST(Synthetic, NoWideRowsWhenFractionIsZero) {
  ScratchDir d;
  SyntheticOptions o = small_options(d.path());
  o.num_layers = 1;
  o.wide_row_fraction = 0.0;
  write_synthetic_checkpoint(o);
  auto ck = Checkpoint::open(d.path());
  const MoeLayer m =
      load_moe_layer(*ck, load_config(d.file("config.json")), 1, LayerScope::kExperts);
  ScaleSpreadStats s;
  for (const ExpertView& e : m.experts) s.add(e.w1);
  EXPECT_EQ(s.rows_outside_window, 0);
  EXPECT_LE(s.max_row_spread, 4);
}

TEST(Synthetic, BadOptions) {
  ScratchDir d;
  SyntheticOptions o = small_options(d.path());
  o.cfg.num_experts_per_token = 7;  // > 6 experts
  EXPECT_THROW(write_synthetic_checkpoint(o), Error);
  o = small_options(d.path());
  o.num_layers = 0;
  EXPECT_THROW(write_synthetic_checkpoint(o), Error);
  o = small_options(d.path());
  o.wide_row_fraction = 1.5;
  EXPECT_THROW(write_synthetic_checkpoint(o), Error);
  o = small_options("");
  EXPECT_THROW(write_synthetic_checkpoint(o), Error);
  test::write_file(d.file("a_file"), "x");
  o = small_options(d.file("a_file"));
  EXPECT_THROW(write_synthetic_checkpoint(o), Error);
  EXPECT_FALSE(test::fs::exists(d.file("config.json")));
}

}  // namespace
}  // namespace mxmoe
