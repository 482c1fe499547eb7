// src/cuda/smxx/env_knob.h: host-side parsing of the MXMOE_* timing knobs that start the process
// with a kernel family on or off or a count replaced (same-binary A/Bs); each caller reads its
// knob once (a file-scope atomic or a function-local static) and validates the value itself.
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

// The variable as an integer (std::atoi), or fallback when it is unset.
inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

}  // namespace mxmoe::smxx
