// tools/mxmoe/cpu_run.cpp: the CPU path of `mxmoe run` (see cpu_run.h).
#include "cpu_run.h"

#include <algorithm>
#include <cstdio>

#include "io.h"
#include "timer.h"

namespace mxmoe::cli {

void run_on_cpu(const RunRequest& req, bool progress, std::vector<float>* out) {
  const ModelConfig& cfg = req.layer->cfg;
  const int T = req.tokens;
  const int width = scope_width(cfg, req.scope);
  out->assign(static_cast<size_t>(T) * width, 0.0f);
  if (T == 0) return;

  std::vector<uint16_t> x_bf16;
  if (req.scope == Scope::kBlock) x_bf16 = hidden_states_bf16(req);

  // About 20 chunks, none under 16 tokens: enough progress lines for long runs while each call
  // still gives the reference's internal parallelism enough work.
  const int chunk = std::max(16, (T + 19) / 20);
  Timer timer;
  double last_report = 0;
  for (int t0 = 0; t0 < T; t0 += chunk) {
    const int n = std::min(chunk, T - t0);
    float* o = out->data() + static_cast<size_t>(t0) * width;
    if (req.scope == Scope::kExperts) {
      const size_t s = static_cast<size_t>(t0) * req.top_k;
      reference_experts(*req.layer, req.x.data() + static_cast<size_t>(t0) * width, n,
                        req.topk_ids.data() + s, req.topk_weights.data() + s, req.top_k, req.act,
                        req.situ, req.range, o);
    } else {
      reference_block(*req.layer, x_bf16.data() + static_cast<size_t>(t0) * width, n, req.act,
                      req.situ, o);
    }
    if (progress && t0 + n < T && timer.seconds() - last_report > 5.0) {
      last_report = timer.seconds();
      std::fprintf(stderr, "mxmoe run: computed %d/%d tokens (%.1f s)\n", t0 + n, T, last_report);
    }
  }
}

}  // namespace mxmoe::cli
