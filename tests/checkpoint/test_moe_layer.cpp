// test_moe_layer.cpp: loading a MoE layer from a small synthetic checkpoint: views point at the
// right bytes, the "language_model." prefix works, and each defect (missing tensor, wrong dtype,
// wrong shape, NaN scale byte, duplicate across shards, dense layer) is an error naming it.
// Also ScaleSpreadStats on hand-built matrices.
#include <gtest/gtest.h>

#include <cstring>

#include "mxmoe/moe_layer.h"
#include "mxmoe/synthetic.h"
#include "test_util.h"

namespace mxmoe {
namespace {

using test::ScratchDir;

class MoeLayerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir();
    SyntheticOptions o;
    o.out_dir = dir_->path();
    o.cfg = test::small_config();
    o.num_layers = 2;  // layers 1 and 2
    o.seed = 7;
    o.shard_bytes = 40000;  // several shards
    o.progress = false;
    write_synthetic_checkpoint(o);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string dir() { return dir_->path(); }

  // Expects load_moe_layer on checkpoint `d` to fail with a message containing every needle.
  static void expect_load_error(const std::string& d, int layer, LayerScope scope,
                                const std::vector<std::string>& needles) {
    try {
      auto ck = Checkpoint::open(d);
      const ModelConfig cfg = load_config(d + "/config.json");
      load_moe_layer(*ck, cfg, layer, scope);
      ADD_FAILURE() << "loaded; expected an error naming " << needles[0];
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      for (const std::string& n : needles)
        EXPECT_NE(msg.find(n), std::string::npos) << "'" << msg << "' lacks '" << n << "'";
    }
  }

  static ScratchDir* dir_;
};
ScratchDir* MoeLayerTest::dir_ = nullptr;

TEST_F(MoeLayerTest, LoadsEveryTensorWithCheckedViews) {
  auto ck = Checkpoint::open(dir());
  const ModelConfig cfg = load_config(dir() + "/config.json");
  EXPECT_EQ(cfg.num_hidden_layers, 3);
  for (int layer = 1; layer <= 2; ++layer) {
    const MoeLayer m = load_moe_layer(*ck, cfg, layer, LayerScope::kBlock);
    ASSERT_EQ(m.experts.size(), 6u);
    EXPECT_EQ(m.layer, layer);
    EXPECT_TRUE(m.has_block);
    const std::string p = "model.layers." + std::to_string(layer) + ".block_sparse_moe.";
    EXPECT_EQ(moe_prefix(layer), p);
    for (int e = 0; e < 6; ++e) {
      const std::string x = p + "experts." + std::to_string(e) + ".";
      // Each view must point at the bytes of the tensor of that exact name.
      EXPECT_EQ(m.experts[e].w1.packed, ck->find(x + "w1.weight_packed")->data);
      EXPECT_EQ(m.experts[e].w1.scales, ck->find(x + "w1.weight_scale")->data);
      EXPECT_EQ(m.experts[e].w3.packed, ck->find(x + "w3.weight_packed")->data);
      EXPECT_EQ(m.experts[e].w3.scales, ck->find(x + "w3.weight_scale")->data);
      EXPECT_EQ(m.experts[e].w2.packed, ck->find(x + "w2.weight_packed")->data);
      EXPECT_EQ(m.experts[e].w2.scales, ck->find(x + "w2.weight_scale")->data);
      EXPECT_EQ(m.experts[e].w1.rows, 32);
      EXPECT_EQ(m.experts[e].w1.k, 64);
      EXPECT_EQ(m.experts[e].w2.rows, 64);
      EXPECT_EQ(m.experts[e].w2.k, 32);
      EXPECT_EQ(m.experts[e].w1.packed_bytes(), 32u * 32);
      EXPECT_EQ(m.experts[e].w2.scale_bytes(), 64u * 1);
    }
    EXPECT_EQ(reinterpret_cast<const void*>(m.router.data), ck->find(p + "gate.weight")->data);
    EXPECT_EQ(m.router.rows, 6);
    EXPECT_EQ(m.router.cols, 96);
    EXPECT_EQ(reinterpret_cast<const void*>(m.router_bias),
              ck->find(p + "gate.e_score_correction_bias")->data);
    EXPECT_EQ(m.latent_down.rows, 64);
    EXPECT_EQ(m.latent_down.cols, 96);
    EXPECT_EQ(m.latent_up.rows, 96);
    EXPECT_EQ(m.latent_up.cols, 64);
    EXPECT_EQ(reinterpret_cast<const void*>(m.latent_norm),
              ck->find(p + "routed_expert_norm.weight")->data);
    EXPECT_EQ(m.shared_gate.rows, 64);  // 2 shared experts x 32
    EXPECT_EQ(m.shared_up.cols, 96);
    EXPECT_EQ(m.shared_down.rows, 96);
    EXPECT_EQ(m.shared_down.cols, 64);
    // Views of different layers are different bytes.
    if (layer == 2) {
      const MoeLayer m1 = load_moe_layer(*ck, cfg, 1, LayerScope::kExperts);
      EXPECT_NE(m1.experts[0].w1.packed, m.experts[0].w1.packed);
      EXPECT_FALSE(m1.has_block);
      EXPECT_EQ(m1.router.data, nullptr);
    }
  }
}

TEST_F(MoeLayerTest, DenseOrOutOfRangeLayerIsAnError) {
  expect_load_error(dir(), 0, LayerScope::kExperts, {"layer 0", "not a MoE layer"});
  expect_load_error(dir(), 3, LayerScope::kExperts, {"layer 3", "not a MoE layer"});
}

TEST_F(MoeLayerTest, LanguageModelPrefix) {
  ScratchDir d;
  test::rewrite_checkpoint(dir(), d.path(),
                           [](test::TensorEdit& e) { e.name = "language_model." + e.name; });
  auto ck = Checkpoint::open(d.path());
  const ModelConfig cfg = load_config(d.path() + "/config.json");
  const MoeLayer m = load_moe_layer(*ck, cfg, 2, LayerScope::kBlock);
  EXPECT_EQ(
      m.experts[5].w2.packed,
      ck->find("language_model.model.layers.2.block_sparse_moe.experts.5.w2.weight_packed")->data);
  EXPECT_TRUE(m.has_block);
}

TEST_F(MoeLayerTest, AmbiguousSuffixIsAnError) {
  // Both "model.layers..." and "language_model.model.layers..." present: refuse to guess.
  ScratchDir d;
  auto src = Checkpoint::open(dir());
  SafetensorsWriter w;
  std::vector<std::string> keep;
  for (const TensorView* t : src->all()) {
    w.add_bytes(t->name, t->dtype, t->shape, t->data);
    if (t->name.find("experts.3.w1.weight_packed") != std::string::npos)
      w.add_bytes("language_model." + t->name, t->dtype, t->shape, t->data);
  }
  w.write(d.file("model.safetensors"));
  test::fs::copy_file(dir() + "/config.json", d.file("config.json"));
  expect_load_error(d.path(), 1, LayerScope::kExperts, {"experts.3.w1.weight_packed", "ambiguous"});
}

TEST_F(MoeLayerTest, MissingTensor) {
  ScratchDir d;
  const std::string victim = "model.layers.1.block_sparse_moe.experts.4.w3.weight_scale";
  test::rewrite_checkpoint(dir(), d.path(), [&](test::TensorEdit& e) {
    if (e.name == victim) e.name.clear();
  });
  expect_load_error(d.path(), 1, LayerScope::kExperts, {"missing", "experts.4.w3.weight_scale"});
  // Layer 2 is intact and still loads.
  auto ck = Checkpoint::open(d.path());
  EXPECT_NO_THROW(load_moe_layer(*ck, load_config(d.file("config.json")), 2, LayerScope::kBlock));
}

TEST_F(MoeLayerTest, MissingBlockTensorOnlyMattersForBlockScope) {
  ScratchDir d;
  test::rewrite_checkpoint(dir(), d.path(), [&](test::TensorEdit& e) {
    if (e.name == "model.layers.1.block_sparse_moe.shared_experts.down_proj.weight") e.name.clear();
  });
  auto ck = Checkpoint::open(d.path());
  EXPECT_NO_THROW(load_moe_layer(*ck, load_config(d.file("config.json")), 1, LayerScope::kExperts));
  expect_load_error(d.path(), 1, LayerScope::kBlock, {"shared_experts.down_proj.weight"});
}

TEST_F(MoeLayerTest, WrongDtype) {
  ScratchDir d;
  test::rewrite_checkpoint(dir(), d.path(), [&](test::TensorEdit& e) {
    if (e.name == "model.layers.2.block_sparse_moe.experts.0.w2.weight_packed")
      e.dtype = DType::kI8;
    if (e.name == "model.layers.1.block_sparse_moe.gate.e_score_correction_bias") {
      e.dtype = DType::kBF16;  // half the bytes
      e.bytes.resize(e.bytes.size() / 2);
    }
  });
  expect_load_error(d.path(), 2, LayerScope::kExperts,
                    {"model.safetensors", "experts.0.w2.weight_packed", "dtype I8", "expected U8"});
  expect_load_error(d.path(), 1, LayerScope::kBlock,
                    {"gate.e_score_correction_bias", "dtype BF16", "expected F32"});
}

TEST_F(MoeLayerTest, WrongShape) {
  ScratchDir d;
  test::rewrite_checkpoint(dir(), d.path(), [&](test::TensorEdit& e) {
    // Same bytes, transposed-looking shape: [32, 32] -> [64, 16].
    if (e.name == "model.layers.1.block_sparse_moe.experts.2.w1.weight_packed") e.shape = {64, 16};
    if (e.name == "model.layers.2.block_sparse_moe.routed_expert_up_proj.weight")
      e.shape = {64, 96};
  });
  expect_load_error(d.path(), 1, LayerScope::kExperts,
                    {"experts.2.w1.weight_packed", "[64, 16]", "expected [32, 32]"});
  expect_load_error(d.path(), 2, LayerScope::kBlock,
                    {"routed_expert_up_proj.weight", "[64, 96]", "expected [96, 64]"});
}

TEST_F(MoeLayerTest, NanScaleByte) {
  ScratchDir d;
  test::rewrite_checkpoint(dir(), d.path(), [&](test::TensorEdit& e) {
    // w2 scales are [64, 1]: byte 37 is row 37.
    if (e.name == "model.layers.2.block_sparse_moe.experts.5.w2.weight_scale") e.bytes[37] = '\xff';
  });
  expect_load_error(d.path(), 2, LayerScope::kExperts,
                    {"experts.5.w2.weight_scale", "255", "row 37"});
  auto ck = Checkpoint::open(d.path());
  EXPECT_NO_THROW(load_moe_layer(*ck, load_config(d.file("config.json")), 1, LayerScope::kExperts));
}

TEST_F(MoeLayerTest, ConfigMismatchIsAShapeError) {
  // A config that disagrees with the tensors (wider latent) must not read out of bounds.
  auto ck = Checkpoint::open(dir());
  ModelConfig cfg = load_config(dir() + "/config.json");
  cfg.routed_expert_hidden_size = 128;
  EXPECT_THROW(load_moe_layer(*ck, cfg, 1, LayerScope::kExperts), Error);
  cfg = load_config(dir() + "/config.json");
  cfg.num_experts = 7;  // expert 6 does not exist
  try {
    load_moe_layer(*ck, cfg, 1, LayerScope::kExperts);
    FAIL() << "loaded a 7th expert that is not there";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("experts.6.w1.weight_packed"), std::string::npos)
        << e.what();
  }
}

TEST_F(MoeLayerTest, DuplicateTensorAcrossShards) {
  ScratchDir d;
  auto src = Checkpoint::open(dir());
  SafetensorsWriter a, b;
  for (const TensorView* t : src->all()) a.add_bytes(t->name, t->dtype, t->shape, t->data);
  const TensorView* dup = src->find("model.layers.1.block_sparse_moe.experts.1.w1.weight_packed");
  b.add_bytes(dup->name, dup->dtype, dup->shape, dup->data);
  a.write(d.file("a.safetensors"));
  b.write(d.file("b.safetensors"));
  try {
    Checkpoint::open(d.path());
    FAIL() << "duplicate accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("experts.1.w1.weight_packed"), std::string::npos) << msg;
    EXPECT_NE(msg.find("a.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("b.safetensors"), std::string::npos) << msg;
  }
}

TEST_F(MoeLayerTest, IndexProblems) {
  ScratchDir d;
  for (const auto& e : test::fs::directory_iterator(dir()))
    test::fs::copy_file(e.path(), d.path() / e.path().filename());
  // A weight_map entry pointing at the wrong shard.
  std::string idx = test::read_file(d.file("model.safetensors.index.json"));
  const std::string key = "\"model.layers.1.block_sparse_moe.gate.weight\": \"";
  const size_t at = idx.find(key);
  ASSERT_NE(at, std::string::npos);
  const size_t shard_at = at + key.size();
  const std::string shard = idx.substr(shard_at, idx.find('"', shard_at) - shard_at);
  std::string other;
  for (const auto& e : test::fs::directory_iterator(d.path())) {
    const std::string f = e.path().filename().string();
    if (e.path().extension() == ".safetensors" && f != shard) other = f;
  }
  ASSERT_FALSE(other.empty()) << "expected several shards";
  std::string moved = idx;
  moved.replace(shard_at, shard.size(), other);
  test::write_file(d.file("model.safetensors.index.json"), moved);
  EXPECT_THROW(Checkpoint::open(d.path()), Error);
  // A shard name escaping the directory.
  std::string escaped = idx;
  escaped.replace(shard_at, shard.size(), "../x.safetensors");
  test::write_file(d.file("model.safetensors.index.json"), escaped);
  EXPECT_THROW(Checkpoint::open(d.path()), Error);
  // A missing shard names its path.
  test::write_file(d.file("model.safetensors.index.json"), idx);
  test::fs::remove(d.file(shard));
  try {
    Checkpoint::open(d.path());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(shard), std::string::npos) << e.what();
  }
  EXPECT_THROW(Checkpoint::open(d.file("nonexistent")), Error);
  ScratchDir empty;
  EXPECT_THROW(Checkpoint::open(empty.path()), Error);
}

TEST(ScaleSpreadStats, HandBuiltMatrix) {
  // 3 rows x 3 blocks (K = 96). Spreads: 0, 10, 15 (the last one outside the 14-binade window).
  const uint8_t scales[9] = {127, 127, 127, 120, 130, 125, 100, 115, 110};
  Mxfp4View m;
  m.scales = scales;
  m.rows = 3;
  m.k = 96;
  ScaleSpreadStats s;
  s.add(m);
  EXPECT_EQ(s.rows, 3);
  EXPECT_EQ(s.rows_outside_window, 1);
  EXPECT_EQ(s.min_exponent, 100);
  EXPECT_EQ(s.max_exponent, 130);
  EXPECT_EQ(s.max_row_spread, 15);
  EXPECT_DOUBLE_EQ(s.mean_row_spread, 25.0 / 3.0);
  EXPECT_EQ(s.spread_histogram[0], 1);
  EXPECT_EQ(s.spread_histogram[10], 1);
  EXPECT_EQ(s.spread_histogram[15], 1);
  EXPECT_EQ(s.spread_histogram[14], 0);

  // A second matrix accumulates: 2 rows x 1 block (spread 0 each), and a row at exactly 14.
  const uint8_t more[4] = {90, 140, 126, 140};  // rows: [90] [140] -> k=32; then a 2-block row
  Mxfp4View m2;
  m2.scales = more;
  m2.rows = 2;
  m2.k = 32;
  s.add(m2);
  Mxfp4View m3;
  m3.scales = more + 2;  // {126, 140}: spread 14, inside the window
  m3.rows = 1;
  m3.k = 64;
  s.add(m3);
  EXPECT_EQ(s.rows, 6);
  EXPECT_EQ(s.rows_outside_window, 1);
  EXPECT_EQ(s.min_exponent, 90);
  EXPECT_EQ(s.max_exponent, 140);
  EXPECT_EQ(s.max_row_spread, 15);
  EXPECT_DOUBLE_EQ(s.mean_row_spread, (25.0 + 14.0) / 6.0);
  EXPECT_EQ(s.spread_histogram[0], 3);
  EXPECT_EQ(s.spread_histogram[14], 1);
}

TEST(ScaleSpreadStats, MergeEqualsAddingTheSameMatrices) {
  // Two matrices: stats gathered separately and merged must equal one accumulator fed both
  // (cmd_info merges per-expert stats into the layer's instead of reading the scales twice).
  const uint8_t a[6] = {127, 100, 127, 127, 140, 120};  // 3 rows x 2 blocks: spreads 27, 0, 20
  const uint8_t b[4] = {90, 91, 126, 126};              // 2 rows x 2 blocks: spreads 1, 0
  Mxfp4View ma, mb;
  ma.scales = a;
  ma.rows = 3;
  ma.k = 64;
  mb.scales = b;
  mb.rows = 2;
  mb.k = 64;
  ScaleSpreadStats both, sa, sb, merged;
  both.add(ma);
  both.add(mb);
  sa.add(ma);
  sb.add(mb);
  merged.merge(sa);
  merged.merge(sb);
  merged.merge(ScaleSpreadStats{});  // an empty one changes nothing
  EXPECT_EQ(merged.rows, both.rows);
  EXPECT_EQ(merged.rows, 5);
  EXPECT_EQ(merged.rows_outside_window, both.rows_outside_window);
  EXPECT_EQ(merged.rows_outside_window, 2);
  EXPECT_EQ(merged.min_exponent, 90);
  EXPECT_EQ(merged.max_exponent, 140);
  EXPECT_EQ(merged.min_exponent, both.min_exponent);
  EXPECT_EQ(merged.max_exponent, both.max_exponent);
  EXPECT_EQ(merged.max_row_spread, both.max_row_spread);
  EXPECT_DOUBLE_EQ(merged.mean_row_spread, both.mean_row_spread);
  EXPECT_DOUBLE_EQ(merged.mean_row_spread, 48.0 / 5.0);
  for (int d = 0; d < 256; ++d)
    EXPECT_EQ(merged.spread_histogram[d], both.spread_histogram[d]) << d;
}

}  // namespace
}  // namespace mxmoe
