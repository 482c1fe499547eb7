// tools/mxmoe/device_run.h: the seam between the CLI (device-independent parsing, files, CPU
// path) and the CUDA path. device_cuda.cpp implements it when the build has CUDA; without CUDA,
// device_stub.cpp answers every call with a clear "built without CUDA" error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mxmoe/moe_layer.h"
#include "mxmoe/reference.h"

namespace mxmoe::cli {

enum class Scope { kExperts, kBlock };

// One `mxmoe run` / `mxmoe check` problem, as read from the files and flags.
struct RunRequest {
  const MoeLayer* layer = nullptr;
  Scope scope = Scope::kExperts;
  ActMode act = ActMode::kMxfp8;
  int tokens = 0;
  // scope experts: x is [T, latent]; scope block: x is [T, hidden]. Both as fp32 holding the
  // input's exact values (a BF16 input converted exactly); x_is_bf16 says which dtype it came in.
  std::vector<float> x;
  bool x_is_bf16 = true;
  std::vector<int32_t> topk_ids;    // scope experts: [T, k]
  std::vector<float> topk_weights;  // scope experts: [T, k]
  int top_k = 0;
  ExpertRange range;
  SituParams situ;
};

// Runs the request on the GPU with the named backend ("w4a16" or "w4a8"), writing fp32 [T, width]
// into *out. Throws mxmoe::Error with a one-line message (no GPU, unsupported architecture,
// built without CUDA, bad backend, ...).
void run_on_cuda(const RunRequest& req, const std::string& backend, std::vector<float>* out);

// True when this binary was built with the CUDA kernels.
bool cuda_built();

// The error every CUDA-only feature (`what`: "--device cuda", "'mxmoe check'", ...) gives in a
// build without CUDA.
inline Error built_without_cuda(const std::string& what) {
  return Error("mxmoe was built without CUDA (nvcc not found at configure time); " + what +
               " is unavailable");
}

}  // namespace mxmoe::cli
