// tools/mxmoe/args.h: the small, strict flag parser every `mxmoe` subcommand uses.
//
// Grammar: `--name value`, `--name=value`, or a bare `--name` for switches. A subcommand declares
// the flags it accepts up front; anything else (an unknown flag, a stray positional argument, a
// value missing, a flag given twice, a number that does not parse entirely or is out of range) is
// a UsageError, which main() prints as one line plus a usage hint and turns into exit status 2.
// Limitations: no short flags, no flag bundling, no positional arguments.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "mxmoe/common.h"

namespace mxmoe::cli {

// Bad command line (as opposed to bad files, which are plain mxmoe::Error): exit status 2.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& msg) : Error(msg) {}
};

struct FlagSpec {
  std::string name;  // without the leading "--"
  bool takes_value;  // false: a switch
  std::string help;  // one line for the usage text, e.g. "DIR  checkpoint directory"
};

class Args {
 public:
  // Parses argv[first..argc). Throws UsageError. `--help` is always accepted as a switch.
  Args(const std::string& command, const std::vector<FlagSpec>& specs, int argc, char** argv,
       int first);

  bool has(const std::string& name) const;
  bool help() const { return has("help"); }

  // Accessors: `fallback` when the flag is absent; UsageError naming the flag when its value
  // does not parse. require_* throw UsageError when the flag is absent.
  std::string str(const std::string& name, const std::string& fallback) const;
  std::string require_str(const std::string& name) const;
  int64_t i64(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const;
  int i32(const std::string& name, int fallback, int lo, int hi) const {
    return static_cast<int>(i64(name, fallback, lo, hi));
  }
  uint64_t u64(const std::string& name, uint64_t fallback) const;
  double f64(const std::string& name, double fallback) const;  // finite values only
  // One of `choices`, else UsageError listing them.
  std::string choice(const std::string& name, const std::string& fallback,
                     const std::vector<std::string>& choices) const;

  // The usage text: "usage: mxmoe <command> [flags]" and one line per flag.
  static std::string usage(const std::string& command, const std::string& synopsis,
                           const std::vector<FlagSpec>& specs);

 private:
  const std::string* value(const std::string& name) const;
  std::string command_;
  std::map<std::string, std::string> values_;  // switches map to ""
};

}  // namespace mxmoe::cli
