// mxmoe/moe_layer.h: one MoE layer of a Kimi-K3 checkpoint, as zero-copy views into the mapped
// safetensors files.
//
// Tensors are found by name suffix below `layers.L.block_sparse_moe.` (a multimodal checkpoint
// puts `language_model.` in front). Every dtype and shape is checked against the config, and every
// MXFP4 scale byte is checked for the NaN code 255; a failure throws mxmoe::Error naming the
// tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mxmoe/config.h"
#include "mxmoe/safetensors.h"

namespace mxmoe {

// A row-major MXFP4 matrix [rows, k]: packed [rows, k/2] (low nibble first), scales [rows, k/32].
struct Mxfp4View {
  const uint8_t* packed = nullptr;
  const uint8_t* scales = nullptr;
  int rows = 0;
  int k = 0;
  size_t packed_bytes() const { return static_cast<size_t>(rows) * k / 2; }
  size_t scale_bytes() const { return static_cast<size_t>(rows) * k / 32; }
};

// The three projections of one routed expert: w1 = gate [I, H], w3 = up [I, H], w2 = down [H, I]
// (H = routed_expert_hidden_size, the latent width; I = moe_intermediate_size).
struct ExpertView {
  Mxfp4View w1, w3, w2;
};

// A row-major BF16 matrix [rows, cols] (raw bf16 bits).
struct Bf16View {
  const uint16_t* data = nullptr;
  int rows = 0;
  int cols = 0;
};

// Which parts of a layer to load.
enum class LayerScope { kExperts, kBlock };

struct MoeLayer {
  ModelConfig cfg;
  int layer = -1;
  std::vector<ExpertView> experts;  // indexed by global expert id, all cfg.num_experts of them

  // Present when loaded with LayerScope::kBlock:
  Bf16View router;                        // gate.weight [E, hidden]
  const float* router_bias = nullptr;     // gate.e_score_correction_bias [E] (F32)
  Bf16View latent_down;                   // routed_expert_down_proj.weight [latent, hidden]
  Bf16View latent_up;                     // routed_expert_up_proj.weight [hidden, latent]
  const uint16_t* latent_norm = nullptr;  // routed_expert_norm.weight [latent] (BF16)
  Bf16View shared_gate, shared_up;        // shared_experts.{gate,up}_proj.weight [Is, hidden]
  Bf16View shared_down;                   // shared_experts.down_proj.weight [hidden, Is]
  bool has_block = false;
};

// Loads layer `layer` (must be a MoE layer per cfg). The checkpoint must outlive the result.
MoeLayer load_moe_layer(const Checkpoint& ckpt, const ModelConfig& cfg, int layer,
                        LayerScope scope);

// The tensor-name prefix of a layer's MoE block in the checkpoints mxmoe writes:
// "model.layers.L.block_sparse_moe."
std::string moe_prefix(int layer);

// Per-row statistics of MXFP4 scale exponents, for `mxmoe info` and for the FP8 weight fold:
// a row whose scale exponents span at most kFp8FoldWindow binades (max - min <= 14) converts
// to E4M3 exactly with one exponent offset per row (KIMI_K3.md: e2m1 * 2^d exact for -8..6).
constexpr int kFp8FoldWindow = 14;
struct ScaleSpreadStats {
  int64_t rows = 0;
  int64_t rows_outside_window = 0;            // max - min > 14
  int min_exponent = 255, max_exponent = -1;  // over the whole matrix (biased bytes)
  int max_row_spread = 0;                     // the largest (max - min) of one row
  double mean_row_spread = 0.0;
  int64_t spread_histogram[256] = {};  // rows per spread value
  void add(const Mxfp4View& m);        // accumulate one matrix's rows
  // Accumulate statistics gathered elsewhere: the same as having add()ed its matrices here
  // (means weighted by rows), without reading their scales again.
  void merge(const ScaleSpreadStats& o);
};

}  // namespace mxmoe
