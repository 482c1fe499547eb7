// src/cuda/runtime/prepared.h: what prepare_weights leaves on the device (internal).
//
// Layout: the owned experts' prepacked matrices back to back (sm90/grouped_gemm.h), local expert
// i = global expert expert_start + i:
//   w13: 2I x H each (fused gate/up, weight_layout.h), w2: H x I each.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mxmoe/moe.h"

namespace mxmoe {

struct PreparedWeights {
  int device = 0;
  int cc_major = 0, cc_minor = 0;
  int num_sms = 0;
  int hidden = 0, intermediate = 0;
  int num_experts_total = 0;
  int expert_start = 0, expert_count = 0;
  Backend backend = Backend::kW4A8;
  uint8_t* w13_packed = nullptr;
  uint8_t* w13_scales = nullptr;
  uint8_t* w2_packed = nullptr;
  uint8_t* w2_scales = nullptr;
  size_t weight_bytes = 0;
};

}  // namespace mxmoe
