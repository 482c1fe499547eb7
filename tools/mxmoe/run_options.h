// tools/mxmoe/run_options.h: the flags `mxmoe run` and `mxmoe check` share, parsed and
// cross-checked once (scope, activation mode / backend pairing, EP range, SiTU overrides), and
// the loading of a request from --model/--layer/--input.
//
// Pairing rule: backend w4a8 <-> act mxfp8, backend w4a16 <-> act bf16. Either flag implies the
// other; both given and disagreeing is a UsageError; neither gives mxfp8 / w4a8.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "args.h"
#include "device_run.h"
#include "mxmoe/moe_layer.h"

namespace mxmoe::cli {

struct RunOptions {
  std::string model, input;
  int layer = -1;  // -1: the config's first MoE layer
  Scope scope = Scope::kExperts;
  ActMode act = ActMode::kMxfp8;
  std::string backend = "w4a8";
  int ep_start = 0, ep_count = -1;  // ep_count -1: every expert from ep_start
  bool has_beta = false, has_linear_beta = false;
  double beta = 0, linear_beta = 0;
};

// The flag specs for these options (--model, --layer, --input, --scope, --act, --backend,
// --ep-start, --ep-count, --beta, --linear-beta); commands append their own.
std::vector<FlagSpec> run_option_flags();
// Parses and cross-checks them. Throws UsageError.
RunOptions parse_run_options(const Args& a);

// A checkpoint, its config, one loaded layer and the request read from --input: everything a run
// needs, kept alive together because the layer views point into the mapped files.
struct LoadedRun {
  ModelConfig cfg;
  std::unique_ptr<Checkpoint> ckpt;
  std::unique_ptr<MoeLayer> layer;
  RunRequest req;
};
// Loads and validates against the config (layer is a MoE layer, the EP range fits the experts,
// the input matches the scope). Throws mxmoe::Error naming the file, tensor or flag.
LoadedRun load_run(const RunOptions& o);

}  // namespace mxmoe::cli
