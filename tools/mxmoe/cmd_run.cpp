// tools/mxmoe/cmd_run.cpp: `mxmoe run`: one MoE layer on the CPU reference or the GPU.
//
// Reads --input (io.h), runs scope experts (routed experts on latent inputs with caller-given
// routing, optionally one EP rank's experts) or scope block (the whole Kimi-K3 MoE block on the
// hidden state), writes `out` F32 to --output. Timings of load / compute / write on stderr; a
// one-line summary of the output (shape and checksums) on stdout.
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "args.h"
#include "commands.h"
#include "cpu_run.h"
#include "io.h"
#include "run_options.h"
#include "timer.h"

namespace mxmoe::cli {

namespace {

std::vector<FlagSpec> flags() {
  std::vector<FlagSpec> f = run_option_flags();
  f.push_back({"output", true, "OUT.safetensors where to write `out` (F32 [T, width])"});
  f.push_back({"device", true, "cpu|cuda        where to run (default cpu)"});
  f.push_back({"quiet", false, "                no progress lines"});
  return f;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  const std::vector<FlagSpec> specs = flags();
  Args a("run", specs, argc, argv, 2);
  if (a.help()) {
    std::fputs(
        Args::usage("run", "run one MoE layer of a checkpoint on an input file", specs).c_str(),
        stdout);
    return 0;
  }
  const RunOptions o = parse_run_options(a);
  const std::string output = a.require_str("output");
  const std::string device = a.choice("device", "cpu", {"cpu", "cuda"});
  const bool progress = !a.has("quiet");
  if (device == "cuda" && !cuda_built()) throw built_without_cuda("--device cuda");

  // Fail before a long compute, not after it, when the output cannot be written.
  {
    const std::filesystem::path dir = std::filesystem::path(output).parent_path();
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec))
      throw Error("--output " + output + ": directory " + dir.string() + " does not exist");
  }

  Timer t_load;
  LoadedRun r = load_run(o);
  const RunRequest& q = r.req;
  const int width = scope_width(r.cfg, q.scope);
  if (progress)
    std::fprintf(stderr,
                 "mxmoe run: load %.3f s (%s layer %d: %d experts, latent %d, intermediate %d; "
                 "input %d tokens %s)\n",
                 t_load.seconds(), o.model.c_str(), q.layer->layer, r.cfg.num_experts,
                 r.cfg.routed_expert_hidden_size, r.cfg.moe_intermediate_size, q.tokens,
                 q.x_is_bf16 ? "BF16" : "F32");

  Timer t_compute;
  std::vector<float> out;
  if (device == "cpu")
    run_on_cpu(q, progress, &out);
  else
    run_on_cuda(q, o.backend, &out);
  const double compute_s = t_compute.seconds();
  if (progress)
    std::fprintf(stderr, "mxmoe run: compute %.3f s (scope %s, act %s, device %s%s%s)\n", compute_s,
                 scope_name(q.scope), act_mode_name(q.act), device.c_str(),
                 device == "cuda" ? ", backend " : "", device == "cuda" ? o.backend.c_str() : "");

  // A non-finite output is never a valid result of finite inputs: fail rather than write it.
  double sum = 0, abs_sum = 0, max_abs = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i]))
      throw Error("internal error: output 'out' holds a non-finite value at [" +
                  std::to_string(i / width) + ", " + std::to_string(i % width) + "]");
    sum += out[i];
    abs_sum += std::fabs(out[i]);
    max_abs = std::fmax(max_abs, std::fabs(out[i]));
  }

  Timer t_write;
  std::map<std::string, std::string> meta = {
      {"format", "mxmoe-run-output"},
      {"scope", scope_name(q.scope)},
      {"act", act_mode_name(q.act)},
      {"device", device},
      {"layer", std::to_string(q.layer->layer)},
      {"beta", std::to_string(q.situ.beta)},
      {"linear_beta", std::to_string(q.situ.linear_beta)},
  };
  if (device == "cuda") meta["backend"] = o.backend;
  if (q.scope == Scope::kExperts) {
    meta["ep_start"] = std::to_string(q.range.start);
    meta["ep_count"] = std::to_string(q.range.count);
  }
  write_run_output(output, out, q.tokens, width, meta);
  if (progress)
    std::fprintf(stderr, "mxmoe run: write %.3f s (%s)\n", t_write.seconds(), output.c_str());
  std::printf("out [%d, %d] F32: sum %.9g, sum|x| %.9g, max|x| %.9g, compute %.3f s\n", q.tokens,
              width, sum, abs_sum, max_abs, compute_s);
  return 0;
}

}  // namespace mxmoe::cli
