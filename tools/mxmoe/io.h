// tools/mxmoe/io.h: the input and output files of `mxmoe run` (and `mxmoe check`).
//
// Input (safetensors), as issue 2 specifies:
//   scope experts: hidden_states BF16 or F32 [T, latent], topk_ids I32 [T, k],
//                  topk_weights F32 [T, k]   (ids in [-1, num_experts); -1 = empty slot)
//   scope block:   hidden_states BF16 or F32 [T, hidden]
// Every dtype, shape, id and value is validated against the config; a violation throws
// mxmoe::Error naming the file and tensor (and the token/slot for a bad id or value). Non-finite
// hidden_states or topk_weights are rejected: they would turn into a silent NaN output.
// Output: one tensor `out` F32 [T, width] (width = latent for experts, hidden for block), with the
// run's parameters in __metadata__.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "device_run.h"
#include "mxmoe/config.h"

namespace mxmoe::cli {

const char* scope_name(Scope s);
// The activation width a scope reads and writes: latent (experts) or hidden (block).
int scope_width(const ModelConfig& cfg, Scope s);

// Fills req->tokens, x, x_is_bf16 and (experts scope) topk_ids / topk_weights / top_k.
// Writes a one-line note to stderr for tensors the scope ignores.
void read_run_input(const std::string& path, const ModelConfig& cfg, Scope scope, RunRequest* req);

// The input's hidden states as BF16 bits (block scope runs on BF16 x, as the model does): exact
// for a BF16 input, round-to-nearest-even for an F32 one.
std::vector<uint16_t> hidden_states_bf16(const RunRequest& req);

void write_run_output(const std::string& path, const std::vector<float>& out, int tokens, int width,
                      const std::map<std::string, std::string>& metadata);

}  // namespace mxmoe::cli
