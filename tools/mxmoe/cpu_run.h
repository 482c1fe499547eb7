// tools/mxmoe/cpu_run.h: `mxmoe run --device cpu`: the CPU reference (mxmoe/reference.h) over a
// request, in token chunks so that long runs print progress on stderr.
//
// Every output row depends on its own token only (routing, the expert sum and the RMSNorm are all
// per token), so cutting the tokens into chunks gives the same bits as one call over all of them;
// tests/cli checks exactly that against an in-process reference call. The reference spreads each
// call over all cores itself (MXMOE_REF_THREADS limits it), so chunks run one after another.
#pragma once

#include <vector>

#include "device_run.h"

namespace mxmoe::cli {

// Writes fp32 [T, width] into *out. Throws what the reference throws.
void run_on_cpu(const RunRequest& req, bool progress, std::vector<float>* out);

}  // namespace mxmoe::cli
