// json_util.h (private to src/checkpoint): safe renderings of untrusted JSON values and names for
// one-line error messages.
//
// NOTES: nlohmann's parser and destructor are iterative, but dump() recurses, so dumping a value
// from a hostile file (say a shape of a million nested arrays) could overflow the stack. brief()
// only dumps flat values, and both helpers cap the length and escape control characters so that
// a message stays one readable line.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace mxmoe::detail {

// `s` with control characters escaped, cut to at most `max` characters (then "...").
inline std::string printable(const std::string& s, size_t max = 200) {
  std::string r;
  for (unsigned char c : s) {
    if (r.size() >= max) return r + "...";
    if (c < 0x20 || c == 0x7F) {
      static const char* hex = "0123456789abcdef";
      r += "\\x";
      r += hex[c >> 4];
      r += hex[c & 15];
    } else {
      r += static_cast<char>(c);
    }
  }
  return r;
}

// A short rendering of a JSON value: scalars and flat arrays of scalars as JSON, anything nested
// as a description.
inline std::string brief(const nlohmann::json& v) {
  if (v.is_array()) {
    for (const auto& e : v)
      if (e.is_structured()) return "an array holding arrays or objects";
    if (v.size() > 16) return "an array of " + std::to_string(v.size()) + " values";
  } else if (v.is_object()) {
    return "an object";
  }
  return printable(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), 120);
}

}  // namespace mxmoe::detail
