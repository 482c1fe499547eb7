// moe_layer.cpp: one Kimi-K3 MoE layer as zero-copy views, with every tensor checked.
//
// Lookup is by suffix "layers.L.block_sparse_moe.<name>", so "model." and
// "language_model.model." prefixes both work. Checks per tensor: present, dtype, exact shape from
// the config, and for BF16/F32 views an address aligned to the element size (mxmoe's writer
// aligns every tensor to 8 bytes; a file that does not could not be read as uint16_t/float in
// place). Every MXFP4 scale byte is scanned for the NaN code 255 (memchr, so a full layer's
// ~1 GB of scales costs about a disk read).
#include "mxmoe/moe_layer.h"

#include <algorithm>
#include <cstring>

namespace mxmoe {
namespace {

class LayerLoader {
 public:
  LayerLoader(const Checkpoint& ckpt, int layer)
      : ckpt_(ckpt), prefix_("layers." + std::to_string(layer) + ".block_sparse_moe.") {}

  const TensorView& get(const std::string& name, DType dtype,
                        std::initializer_list<int64_t> shape) const {
    const TensorView* t = ckpt_.find_suffix(prefix_ + name);
    if (!t)
      throw Error(ckpt_.dir() + ": missing tensor '" + prefix_ + name + "' (looked up by suffix)");
    if (t->dtype != dtype)
      throw Error(t->file + ": tensor '" + t->name + "' has dtype " + dtype_name(t->dtype) +
                  ", expected " + dtype_name(dtype));
    const std::vector<int64_t> want(shape);
    if (t->shape != want)
      throw Error(t->file + ": tensor '" + t->name + "' has shape " + t->shape_str() +
                  ", expected " + shape_str(want));
    if (reinterpret_cast<uintptr_t>(t->data) % dtype_size(dtype) != 0)
      throw Error(t->file + ": tensor '" + t->name + "' is not aligned to its " +
                  std::to_string(dtype_size(dtype)) + "-byte elements");
    return *t;
  }

  Mxfp4View mxfp4(const std::string& base, int rows, int k) const {
    const TensorView& p = get(base + ".weight_packed", DType::kU8, {rows, k / 2});
    const TensorView& s = get(base + ".weight_scale", DType::kU8, {rows, k / 32});
    if (const void* nan = std::memchr(s.data, 255, s.nbytes)) {
      const size_t at = static_cast<const uint8_t*>(nan) - s.data;
      throw Error(s.file + ": tensor '" + s.name + "' has the NaN scale byte 255 at row " +
                  std::to_string(at / (k / 32)) + ", block " + std::to_string(at % (k / 32)));
    }
    Mxfp4View v;
    v.packed = p.data;
    v.scales = s.data;
    v.rows = rows;
    v.k = k;
    return v;
  }

  Bf16View bf16(const std::string& name, int rows, int cols) const {
    const TensorView& t = get(name, DType::kBF16, {rows, cols});
    Bf16View v;
    v.data = reinterpret_cast<const uint16_t*>(t.data);
    v.rows = rows;
    v.cols = cols;
    return v;
  }

  const void* vec(const std::string& name, DType dtype, int n) const {
    return get(name, dtype, {n}).data;
  }

 private:
  const Checkpoint& ckpt_;
  std::string prefix_;
};

}  // namespace

std::string moe_prefix(int layer) {
  return "model.layers." + std::to_string(layer) + ".block_sparse_moe.";
}

MoeLayer load_moe_layer(const Checkpoint& ckpt, const ModelConfig& cfg, int layer,
                        LayerScope scope) {
  cfg.validate(ckpt.dir() + "/config.json");
  if (!cfg.is_moe_layer(layer))
    throw Error(ckpt.dir() + ": layer " + std::to_string(layer) +
                " is not a MoE layer (MoE layers are " + std::to_string(cfg.first_k_dense_replace) +
                ".." + std::to_string(cfg.num_hidden_layers - 1) + ")");
  const LayerLoader ld(ckpt, layer);
  const int H = cfg.routed_expert_hidden_size, I = cfg.moe_intermediate_size;
  MoeLayer m;
  m.cfg = cfg;
  m.layer = layer;
  m.experts.resize(cfg.num_experts);
  for (int e = 0; e < cfg.num_experts; ++e) {
    const std::string x = "experts." + std::to_string(e) + ".";
    m.experts[e].w1 = ld.mxfp4(x + "w1", I, H);
    m.experts[e].w3 = ld.mxfp4(x + "w3", I, H);
    m.experts[e].w2 = ld.mxfp4(x + "w2", H, I);
  }
  if (scope == LayerScope::kBlock) {
    const int D = cfg.hidden_size, E = cfg.num_experts, Is = cfg.shared_intermediate_size();
    m.router = ld.bf16("gate.weight", E, D);
    m.router_bias =
        static_cast<const float*>(ld.vec("gate.e_score_correction_bias", DType::kF32, E));
    m.latent_down = ld.bf16("routed_expert_down_proj.weight", H, D);
    m.latent_up = ld.bf16("routed_expert_up_proj.weight", D, H);
    if (cfg.latent_moe_use_norm)
      m.latent_norm =
          static_cast<const uint16_t*>(ld.vec("routed_expert_norm.weight", DType::kBF16, H));
    if (Is > 0) {
      m.shared_gate = ld.bf16("shared_experts.gate_proj.weight", Is, D);
      m.shared_up = ld.bf16("shared_experts.up_proj.weight", Is, D);
      m.shared_down = ld.bf16("shared_experts.down_proj.weight", D, Is);
    }
    m.has_block = true;
  }
  return m;
}

void ScaleSpreadStats::add(const Mxfp4View& m) {
  const int blocks = m.k / 32;
  if (m.rows <= 0 || blocks <= 0) return;
  double spread_sum = mean_row_spread * static_cast<double>(rows);
  for (int r = 0; r < m.rows; ++r) {
    const uint8_t* s = m.scales + static_cast<size_t>(r) * blocks;
    const auto mm = std::minmax_element(s, s + blocks);
    const int lo = *mm.first, hi = *mm.second;
    const int spread = hi - lo;
    min_exponent = std::min(min_exponent, lo);
    max_exponent = std::max(max_exponent, hi);
    max_row_spread = std::max(max_row_spread, spread);
    if (spread > kFp8FoldWindow) ++rows_outside_window;
    ++spread_histogram[spread];
    spread_sum += spread;
  }
  rows += m.rows;
  mean_row_spread = spread_sum / static_cast<double>(rows);
}

void ScaleSpreadStats::merge(const ScaleSpreadStats& o) {
  if (o.rows <= 0) return;
  const double spread_sum =
      mean_row_spread * static_cast<double>(rows) + o.mean_row_spread * static_cast<double>(o.rows);
  rows += o.rows;
  rows_outside_window += o.rows_outside_window;
  min_exponent = std::min(min_exponent, o.min_exponent);
  max_exponent = std::max(max_exponent, o.max_exponent);
  max_row_spread = std::max(max_row_spread, o.max_row_spread);
  for (int d = 0; d < 256; ++d) spread_histogram[d] += o.spread_histogram[d];
  mean_row_spread = spread_sum / static_cast<double>(rows);
}

}  // namespace mxmoe
