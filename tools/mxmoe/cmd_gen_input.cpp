// tools/mxmoe/cmd_gen_input.cpp: `mxmoe gen-input`: an input file for `mxmoe run` that matches a
// checkpoint's config.json (only the config is read).
//
//   scope experts: hidden_states [T, latent] ~ N(0, 1), topk_ids I32 [T, k] (k distinct experts
//                  per token, uniform), topk_weights F32 [T, k] (uniform in [0.05, 1),
//                  renormalized to sum 1 like Kimi's routing)
//   scope block:   hidden_states [T, hidden] ~ N(0, 1)
// hidden_states is BF16 by default (--dtype f32 writes F32 values that are not BF16-exact, to
// exercise the F32 input path). The generator is a self-contained splitmix64 so that a seed
// gives the same file on every platform (std:: distributions are implementation-defined).
#include <cmath>
#include <cstdio>
#include <numeric>

#include "args.h"
#include "commands.h"
#include "io.h"
#include "mxmoe/formats.h"
#include "mxmoe/safetensors.h"

namespace mxmoe::cli {

namespace {

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double normal() {  // Box-Muller; 1 - u keeps the log finite
    const double u = 1.0 - uniform(), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }
  uint64_t below(uint64_t n) { return next() % n; }  // bias negligible for n << 2^64

 private:
  uint64_t s_;
};

const std::vector<FlagSpec> kFlags = {
    {"model", true, "DIR       checkpoint whose config.json gives the widths"},
    {"tokens", true, "T         number of tokens"},
    {"scope", true, "experts|block  what `run --scope` will read (default experts)"},
    {"out", true, "FILE      output .safetensors"},
    {"topk", true, "K         experts per token (default: the config's)"},
    {"dtype", true, "bf16|f32  dtype of hidden_states (default bf16)"},
    {"seed", true, "S         RNG seed (default 1)"},
};

}  // namespace

int cmd_gen_input(int argc, char** argv) {
  Args a("gen-input", kFlags, argc, argv, 2);
  if (a.help()) {
    std::fputs(Args::usage("gen-input", "write an input file for `mxmoe run`", kFlags).c_str(),
               stdout);
    return 0;
  }
  const std::string model = a.require_str("model"), out = a.require_str("out");
  const int T = a.i32("tokens", 0, 0, 1 << 24);
  if (!a.has("tokens")) throw UsageError("missing required flag --tokens");
  const Scope scope = a.choice("scope", "experts", {"experts", "block"}) == "experts"
                          ? Scope::kExperts
                          : Scope::kBlock;
  const bool f32 = a.choice("dtype", "bf16", {"bf16", "f32"}) == "f32";
  Rng rng(a.u64("seed", 1));

  const ModelConfig cfg = load_config(model + "/config.json");
  const int width = scope_width(cfg, scope);
  const int E = cfg.num_experts;
  const int k = a.i32("topk", cfg.num_experts_per_token, 1, 1 << 16);
  if (k > E)
    throw UsageError("--topk " + std::to_string(k) + " is larger than the " + std::to_string(E) +
                     " experts of " + model);

  const size_t n = static_cast<size_t>(T) * width;
  std::vector<float> xf(f32 ? n : 0);
  std::vector<uint16_t> xb(f32 ? 0 : n);
  for (size_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(rng.normal());
    if (f32)
      xf[i] = v;
    else
      xb[i] = float_to_bf16(v);
  }
  SafetensorsWriter w;
  if (f32)
    w.add_bytes("hidden_states", DType::kF32, {T, width}, xf.data());
  else
    w.add_bytes("hidden_states", DType::kBF16, {T, width}, xb.data());

  std::vector<int32_t> ids;
  std::vector<float> weights;
  if (scope == Scope::kExperts) {
    ids.resize(static_cast<size_t>(T) * k);
    weights.resize(ids.size());
    std::vector<int32_t> perm(E);
    for (int t = 0; t < T; ++t) {
      // k distinct ids: the first k steps of a Fisher-Yates shuffle.
      std::iota(perm.begin(), perm.end(), 0);
      double sum = 0;
      for (int j = 0; j < k; ++j) {
        std::swap(perm[j], perm[j + rng.below(E - j)]);
        ids[static_cast<size_t>(t) * k + j] = perm[j];
        sum += weights[static_cast<size_t>(t) * k + j] = 0.05f + 0.95f * float(rng.uniform());
      }
      for (int j = 0; j < k; ++j) weights[static_cast<size_t>(t) * k + j] /= float(sum);
    }
    w.add_bytes("topk_ids", DType::kI32, {T, k}, ids.data());
    w.add_bytes("topk_weights", DType::kF32, {T, k}, weights.data());
  }
  w.set_metadata("format", "mxmoe-run-input");
  w.set_metadata("scope", scope_name(scope));
  w.write(out);
  std::printf("%s: scope %s, %d tokens, hidden_states %s [%d, %d]%s\n", out.c_str(),
              scope_name(scope), T, f32 ? "F32" : "BF16", T, width,
              scope == Scope::kExperts ? (", top-" + std::to_string(k)).c_str() : "");
  return 0;
}

}  // namespace mxmoe::cli
