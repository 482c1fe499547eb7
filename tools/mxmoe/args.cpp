// tools/mxmoe/args.cpp: the strict flag parser (see args.h).
#include "args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace mxmoe::cli {

namespace {

const FlagSpec* find_spec(const std::vector<FlagSpec>& specs, const std::string& name) {
  for (const FlagSpec& s : specs)
    if (s.name == name) return &s;
  return nullptr;
}

}  // namespace

Args::Args(const std::string& command, const std::vector<FlagSpec>& specs, int argc, char** argv,
           int first)
    : command_(command) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.size() < 3 || a.compare(0, 2, "--") != 0)
      throw UsageError("unexpected argument '" + a + "' (flags start with --)");
    std::string name = a.substr(2), val;
    bool inline_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      val = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    const FlagSpec* spec = find_spec(specs, name);
    bool takes_value;
    if (spec) {
      takes_value = spec->takes_value;
    } else if (name == "help") {
      takes_value = false;
    } else {
      throw UsageError("unknown flag --" + name + " for '" + command + "'");
    }
    if (values_.count(name)) throw UsageError("flag --" + name + " given twice");
    if (takes_value && !inline_value) {
      // A following "--x" is taken as the next flag, not as this flag's value: a forgotten value
      // then fails loudly instead of swallowing the next flag.
      if (i + 1 >= argc || std::string(argv[i + 1]).compare(0, 2, "--") == 0)
        throw UsageError("flag --" + name + " needs a value");
      val = argv[++i];
    } else if (!takes_value && inline_value) {
      throw UsageError("flag --" + name + " takes no value");
    }
    if (takes_value && val.empty()) throw UsageError("flag --" + name + " has an empty value");
    values_[name] = val;
  }
}

bool Args::has(const std::string& name) const { return values_.count(name) != 0; }

const std::string* Args::value(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? nullptr : &it->second;
}

std::string Args::str(const std::string& name, const std::string& fallback) const {
  const std::string* v = value(name);
  return v ? *v : fallback;
}

std::string Args::require_str(const std::string& name) const {
  const std::string* v = value(name);
  if (!v) throw UsageError("missing required flag --" + name);
  return *v;
}

int64_t Args::i64(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const {
  const std::string* v = value(name);
  if (!v) return fallback;
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v->c_str(), &end, 10);
  if (errno != 0 || end == v->c_str() || *end != '\0')
    throw UsageError("flag --" + name + ": '" + *v + "' is not an integer");
  if (x < lo || x > hi) {
    std::ostringstream os;
    os << "flag --" << name << ": " << x << " is out of range [" << lo << ", " << hi << "]";
    throw UsageError(os.str());
  }
  return x;
}

uint64_t Args::u64(const std::string& name, uint64_t fallback) const {
  const std::string* v = value(name);
  if (!v) return fallback;
  errno = 0;
  char* end = nullptr;
  // strtoull accepts a leading '-' and wraps it around: reject it up front.
  unsigned long long x = std::strtoull(v->c_str(), &end, 0);
  if (v->find('-') != std::string::npos || errno != 0 || end == v->c_str() || *end != '\0')
    throw UsageError("flag --" + name + ": '" + *v + "' is not a non-negative integer");
  return x;
}

double Args::f64(const std::string& name, double fallback) const {
  const std::string* v = value(name);
  if (!v) return fallback;
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v->c_str(), &end);
  if (errno != 0 || end == v->c_str() || *end != '\0' || !std::isfinite(x))
    throw UsageError("flag --" + name + ": '" + *v + "' is not a finite number");
  return x;
}

std::string Args::choice(const std::string& name, const std::string& fallback,
                         const std::vector<std::string>& choices) const {
  std::string v = str(name, fallback);
  std::string list;
  for (const std::string& c : choices) {
    if (c == v) return v;
    list += (list.empty() ? "" : "|") + c;
  }
  throw UsageError("flag --" + name + ": '" + v + "' is not one of " + list);
}

std::string Args::usage(const std::string& command, const std::string& synopsis,
                        const std::vector<FlagSpec>& specs) {
  std::ostringstream os;
  os << "usage: mxmoe " << command << " [flags]\n  " << synopsis << "\nflags:\n";
  for (const FlagSpec& s : specs) {
    std::string lhs = "--" + s.name;
    os << "  " << lhs;
    for (size_t i = lhs.size(); i < 18; ++i) os << ' ';
    os << ' ' << s.help << '\n';
  }
  return os.str();
}

}  // namespace mxmoe::cli
