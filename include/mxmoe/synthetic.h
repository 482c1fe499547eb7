// mxmoe/synthetic.h: writes a synthetic checkpoint in Kimi-K3's exact on-disk format, so that
// everything can run and be tested without the 1.5 TB real model.
//
// Output directory:
//   config.json                          config_to_json(cfg): Kimi layout, "text_config" plus a
//                                        compressed-tensors "mxfp4-pack-quantized"
//                                        quantization_config
//   model-0000N-of-0000M.safetensors     shards of at most shard_bytes each
//   model.safetensors.index.json         {"metadata": {"total_size"}, "weight_map": {name: shard}}
// For every MoE layer L in [first_k_dense_replace, num_hidden_layers) and the names of KIMI_K3.md
// under "model.layers.L.block_sparse_moe.": routed experts w1/w3/w2 weight_packed + weight_scale
// (U8), gate.weight (BF16), gate.e_score_correction_bias (F32), routed_expert_{down,up}_proj and
// routed_expert_norm weights (BF16), shared_experts.{gate,up,down}_proj weights (BF16). Dense
// layers (and attention, embeddings) are not written: mxmoe only runs MoE blocks.
//
// Values: MXFP4 codes uniform over all 16 nibbles; each weight row gets a base scale exponent near
// 127 + scale_base_offset (2^-8: elements ~0.02 like QAT weights) and per-32-block jitter in
// [-scale_jitter, +scale_jitter]; a fraction wide_row_fraction of rows gets one block pushed
// wide_row_spread binades below the base, so their spread exceeds the 14-binade FP8 fold window.
// Dense BF16 weights are ~N(0, 1/sqrt(fan_in)), norm weights ~1, correction bias small.
// Experts are laid out in a seeded shuffled order inside the shards (the real checkpoint has no
// order). Everything is a pure function of (options, seed): the same options write the same bytes.
//
// Limitations: the full default (92 MoE layers x 896 experts) is ~1.5 TB; pick num_layers.
#pragma once

#include <cstdint>
#include <string>

#include "mxmoe/config.h"

namespace mxmoe {

struct SyntheticOptions {
  std::string out_dir;  // created if missing; existing files of the same names are replaced
  // Shapes. cfg.num_hidden_layers is overridden to first_k_dense_replace + num_layers so the
  // written config.json describes exactly the layers that exist.
  ModelConfig cfg;     // Kimi-K3 real sizes by default
  int num_layers = 1;  // MoE layers written: first_k_dense_replace .. +num_layers-1
  uint64_t seed = 1;
  size_t shard_bytes = size_t(4) << 30;  // max data bytes per shard (an expert never straddles)

  // MXFP4 scale-exponent distribution (biased UE8M0 bytes are 127 + exponent).
  int scale_base_offset = -8;        // row base exponent centre, relative to 2^0
  int scale_row_jitter = 2;          // row base exponent uniform in centre +- this
  int scale_jitter = 2;              // per-block exponent uniform in base +- this
  double wide_row_fraction = 0.001;  // rows with one block far below the base ...
  int wide_row_spread = 17;          // ... by this many binades (> kFp8FoldWindow = 14)

  bool progress = true;  // progress lines on stderr
};

// Writes the checkpoint. Validates opts.cfg first; throws mxmoe::Error (naming the file) on bad
// options or I/O failure. Returns the total bytes of tensor data written.
uint64_t write_synthetic_checkpoint(const SyntheticOptions& opts);

}  // namespace mxmoe
