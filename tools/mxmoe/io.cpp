// tools/mxmoe/io.cpp: reading and validating `run` inputs, writing `run` outputs (see io.h).
#include "io.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>

#include "mxmoe/formats.h"
#include "mxmoe/safetensors.h"

namespace mxmoe::cli {

namespace {

std::string where(const std::string& path, const std::string& tensor) {
  return path + ": tensor '" + tensor + "'";
}

const TensorView& require(const SafetensorsFile& f, const std::string& name,
                          const std::string& why) {
  const TensorView* t = f.find(name);
  if (!t) throw Error(f.path() + ": missing tensor '" + name + "' (" + why + ")");
  return *t;
}

// Checks rank 2 and, where given (>= 0), each dimension. Returns the rows.
int64_t check_2d(const TensorView& t, const std::string& path, int64_t rows, int64_t cols,
                 const std::string& expect) {
  bool ok =
      t.shape.size() == 2 && (rows < 0 || t.shape[0] == rows) && (cols < 0 || t.shape[1] == cols);
  if (!ok)
    throw Error(where(path, t.name) + " has shape " + t.shape_str() + ", expected " + expect);
  return t.shape[0];
}

void check_dtype(const TensorView& t, const std::string& path, DType want) {
  if (t.dtype != want)
    throw Error(where(path, t.name) + " has dtype " + dtype_name(t.dtype) + ", expected " +
                dtype_name(want));
}

// Copies a tensor's bytes out: the data section gives no alignment guarantee.
template <typename T>
std::vector<T> copy_out(const TensorView& t) {
  std::vector<T> v(t.nbytes / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), t.data, v.size() * sizeof(T));
  return v;
}

void check_finite(const std::vector<float>& v, int64_t cols, const std::string& path,
                  const std::string& name) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      std::ostringstream os;
      os << where(path, name) << " holds a non-finite value at [" << i / cols << ", " << i % cols
         << "]";
      throw Error(os.str());
    }
  }
}

}  // namespace

const char* scope_name(Scope s) { return s == Scope::kExperts ? "experts" : "block"; }

int scope_width(const ModelConfig& cfg, Scope s) {
  return s == Scope::kExperts ? cfg.routed_expert_hidden_size : cfg.hidden_size;
}

void read_run_input(const std::string& path, const ModelConfig& cfg, Scope scope, RunRequest* req) {
  std::unique_ptr<SafetensorsFile> f = SafetensorsFile::open(path);
  const int width = scope_width(cfg, scope);
  const std::string wname = scope == Scope::kExperts ? "routed_expert_hidden_size" : "hidden_size";

  const TensorView& hs = require(*f, "hidden_states", std::string("scope ") + scope_name(scope));
  const std::string hs_expect = "[T, " + std::to_string(width) + "] (T tokens, " + wname + ")";
  const int64_t T = check_2d(hs, path, -1, width, hs_expect);
  if (T > (int64_t(1) << 30)) throw Error(where(path, "hidden_states") + " has too many tokens");
  req->tokens = static_cast<int>(T);
  req->x.assign(static_cast<size_t>(T) * width, 0.0f);
  if (hs.dtype == DType::kBF16) {
    std::vector<uint16_t> b = copy_out<uint16_t>(hs);
    for (size_t i = 0; i < b.size(); ++i) req->x[i] = bf16_to_float(b[i]);
    req->x_is_bf16 = true;
  } else if (hs.dtype == DType::kF32) {
    req->x = copy_out<float>(hs);
    req->x_is_bf16 = false;
  } else {
    throw Error(where(path, "hidden_states") + " has dtype " + dtype_name(hs.dtype) +
                ", expected BF16 or F32");
  }
  check_finite(req->x, width, path, "hidden_states");

  if (scope == Scope::kBlock) {
    for (const char* ignored : {"topk_ids", "topk_weights"})
      if (f->find(ignored))
        std::fprintf(stderr,
                     "mxmoe: note: %s: tensor '%s' ignored (scope block routes with the layer's "
                     "router)\n",
                     path.c_str(), ignored);
    req->top_k = cfg.num_experts_per_token;
    req->topk_ids.clear();
    req->topk_weights.clear();
    return;
  }

  const TensorView& ids = require(*f, "topk_ids", "scope experts");
  const TensorView& w = require(*f, "topk_weights", "scope experts");
  check_dtype(ids, path, DType::kI32);
  check_dtype(w, path, DType::kF32);
  const std::string t_str = std::to_string(T);
  check_2d(ids, path, T, -1, "[" + t_str + ", k] (one row per hidden_states row)");
  const int64_t k = ids.shape[1];
  if (k < 1) throw Error(where(path, "topk_ids") + " has top-k 0, expected at least 1");
  if (k > cfg.num_experts)
    throw Error(where(path, "topk_ids") + " has top-k " + std::to_string(k) + ", larger than the " +
                std::to_string(cfg.num_experts) + " experts");
  check_2d(w, path, T, k, "[" + t_str + ", " + std::to_string(k) + "] (the shape of topk_ids)");

  req->top_k = static_cast<int>(k);
  req->topk_ids = copy_out<int32_t>(ids);
  req->topk_weights = copy_out<float>(w);
  for (size_t i = 0; i < req->topk_ids.size(); ++i) {
    const int32_t id = req->topk_ids[i];
    if (id < -1 || id >= cfg.num_experts) {
      std::ostringstream os;
      os << where(path, "topk_ids") << ": id " << id << " at [" << i / k << ", " << i % k
         << "] is outside [-1, " << cfg.num_experts << ") (num_experts " << cfg.num_experts << ")";
      throw Error(os.str());
    }
  }
  check_finite(req->topk_weights, k, path, "topk_weights");
}

std::vector<uint16_t> hidden_states_bf16(const RunRequest& req) {
  std::vector<uint16_t> b(req.x.size());
  const size_t width = req.tokens > 0 ? req.x.size() / req.tokens : 1;
  for (size_t i = 0; i < b.size(); ++i) {
    b[i] = float_to_bf16(req.x[i]);
    if (!std::isfinite(bf16_to_float(b[i]))) {
      std::ostringstream os;
      os << "input tensor 'hidden_states': F32 value " << req.x[i] << " at [" << i / width << ", "
         << i % width << "] overflows BF16";
      throw Error(os.str());
    }
  }
  return b;
}

void write_run_output(const std::string& path, const std::vector<float>& out, int tokens, int width,
                      const std::map<std::string, std::string>& metadata) {
  if (out.size() != static_cast<size_t>(tokens) * width)
    throw Error(path + ": internal error: output has " + std::to_string(out.size()) +
                " values, expected " + std::to_string(static_cast<size_t>(tokens) * width));
  SafetensorsWriter w;
  w.add_bytes("out", DType::kF32, {tokens, width}, out.data());
  for (const auto& [k, v] : metadata) w.set_metadata(k, v);
  w.write(path);
}

}  // namespace mxmoe::cli
