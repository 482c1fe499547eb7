// src/cuda/smxx/situ_fill.cuh: the one loop that writes SituFill (glue.h), for both grouping
// paths (group.cu's scan, prologue.cu's CTA 0), so their outputs stay bit-identical.
#pragma once

#include "smxx/glue.h"

namespace mxmoe::smxx {

// Entries i = first, first + step, ... below count, by SituFill's rule.
__device__ __forceinline__ void fill_situ(const SituFill& f, int start, int count, int first,
                                          int step) {
  for (int i = first; i < count; i += step) {
    f.beta_out[i] = f.per_expert_beta ? f.per_expert_beta[start + i] : f.beta;
    f.linear_beta_out[i] =
        f.per_expert_linear_beta ? f.per_expert_linear_beta[start + i] : f.linear_beta;
    if (f.h_ready) f.h_ready[i] = 0;
  }
}

}  // namespace mxmoe::smxx
