// src/cuda/smxx/env_knob.h: host-side parsing of the MXMOE_* timing knobs that start the process
// with a kernel family on or off (same-binary A/Bs); each launcher keeps its knob in a
// file-scope atomic initialized from here once, so launches never read the environment.
#pragma once

#include <cstdlib>
#include <cstring>

namespace mxmoe::smxx {

// On unless the variable is set to exactly "0" (the default-on families: MXMOE_DECODE_SMALL,
// MXMOE_SM90_WS_SMALL).
inline bool env_on_unless_zero(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

}  // namespace mxmoe::smxx
