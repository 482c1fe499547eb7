// test_util.h: helpers shared by the checkpoint tests: scratch directories, raw file writing,
// a small synthetic config, and a checkpoint rewriter that injects one defect at a time.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "mxmoe/config.h"
#include "mxmoe/safetensors.h"

namespace mxmoe::test {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed when the object dies.
class ScratchDir {
 public:
  ScratchDir() {
    std::string t = (fs::temp_directory_path() / "mxmoe_ckpt_test_XXXXXX").string();
    if (!mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
    path_ = t;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  std::string path_;
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A safetensors image from a raw header string and data section (no validation: for bad files).
inline std::string raw_safetensors(const std::string& header, const std::string& data) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(uint64_t(header.size()) >> (8 * i));
  return s + header + data;
}

// Small Kimi-shaped sizes: every code path, tiny files.
inline ModelConfig small_config() {
  ModelConfig c;
  c.hidden_size = 96;
  c.routed_expert_hidden_size = 64;
  c.moe_intermediate_size = 32;
  c.num_experts = 6;
  c.num_experts_per_token = 2;
  c.num_shared_experts = 2;
  c.num_hidden_layers = 3;
  c.first_k_dense_replace = 1;
  c.intermediate_size = 256;
  return c;
}

// Copies every tensor of checkpoint `src` into one file dst/model.safetensors (no index), plus
// dst/config.json. `edit` may rename (empty name drops the tensor), retype, reshape or change
// the bytes of each tensor before it is written.
struct TensorEdit {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
inline void rewrite_checkpoint(const std::string& src, const std::string& dst,
                               const std::function<void(TensorEdit&)>& edit) {
  auto ck = Checkpoint::open(src);
  std::vector<TensorEdit> keep;
  for (const TensorView* t : ck->all()) {
    TensorEdit e{t->name, t->dtype, t->shape,
                 std::string(reinterpret_cast<const char*>(t->data), t->nbytes)};
    edit(e);
    if (!e.name.empty()) keep.push_back(std::move(e));
  }
  SafetensorsWriter w;
  for (const TensorEdit& e : keep) w.add_bytes(e.name, e.dtype, e.shape, e.bytes.data());
  w.write((fs::path(dst) / "model.safetensors").string());
  fs::copy_file(fs::path(src) / "config.json", fs::path(dst) / "config.json",
                fs::copy_options::overwrite_existing);
}

}  // namespace mxmoe::test
