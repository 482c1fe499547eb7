// tests/cli/cli_util.cpp: helpers of the CLI tests (see cli_util.h).
#include "cli_util.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "mxmoe/formats.h"
#include "mxmoe/moe_layer.h"
#include "mxmoe/safetensors.h"

namespace fs = std::filesystem;

namespace mxmoe::test {

std::string test_dir() {
  const ::testing::TestInfo* ti = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path p = fs::path(MXMOE_BINARY_DIR) / "tests" / "cli" / "work" /
                     (std::string(ti->test_suite_name()) + "." + ti->name());
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

CliResult run_ok(const std::vector<std::string>& args, const std::string& dir) {
  CliResult r = run_cli(args, dir);
  std::string cmd = "mxmoe";
  for (const std::string& a : args) cmd += " " + a;
  EXPECT_TRUE(!r.signaled && !r.timed_out && r.exit_code == 0) << cmd << "\n" << r.describe();
  return r;
}

std::string gen_small_model(const std::string& dir, const std::vector<std::string>& extra) {
  const std::string model = dir + "/model";
  std::vector<std::string> args = {"gen", "--out",    model, "--experts", "8",   "--topk",
                                   "4",   "--hidden", "256", "--latent",  "128", "--intermediate",
                                   "96",  "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  run_ok(args, dir);
  return model;
}

namespace {

const TensorView& find_tensor(const SafetensorsFile& f, const std::string& name) {
  const TensorView* t = f.find(name);
  if (!t) throw Error(f.path() + ": test expected tensor '" + name + "'");
  return *t;
}

}  // namespace

std::vector<float> read_floats(const std::string& file, const std::string& tensor,
                               std::vector<int64_t>* shape) {
  auto f = SafetensorsFile::open(file);
  const TensorView& t = find_tensor(*f, tensor);
  if (shape) *shape = t.shape;
  std::vector<float> v(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::kF32) {
    std::memcpy(v.data(), t.data, v.size() * 4);
  } else if (t.dtype == DType::kBF16) {
    for (size_t i = 0; i < v.size(); ++i) {
      uint16_t b;
      std::memcpy(&b, t.data + 2 * i, 2);
      v[i] = bf16_to_float(b);
    }
  } else {
    throw Error(file + ": test expected F32 or BF16 for '" + tensor + "'");
  }
  return v;
}

std::vector<int32_t> read_i32(const std::string& file, const std::string& tensor) {
  auto f = SafetensorsFile::open(file);
  const TensorView& t = find_tensor(*f, tensor);
  if (t.dtype != DType::kI32) throw Error(file + ": test expected I32 for '" + tensor + "'");
  std::vector<int32_t> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.data, v.size() * 4);
  return v;
}

std::vector<float> reference_output(const std::string& model, int layer, const std::string& input,
                                    const RefOptions& o) {
  const ModelConfig cfg = load_config(model + "/config.json");
  auto ckpt = Checkpoint::open(model);
  const MoeLayer L =
      load_moe_layer(*ckpt, cfg, layer, o.block ? LayerScope::kBlock : LayerScope::kExperts);
  SituParams situ = situ_from_config(cfg);
  if (o.beta >= 0) situ.beta = o.beta;
  if (o.linear_beta >= 0) situ.linear_beta = o.linear_beta;
  std::vector<int64_t> shape;
  const std::vector<float> x = read_floats(input, "hidden_states", &shape);
  const int T = static_cast<int>(shape.at(0));
  if (o.block) {
    // The block runs on BF16 x; an F32 input is rounded to nearest even (the CLI's rule).
    std::vector<uint16_t> xb(x.size());
    for (size_t i = 0; i < x.size(); ++i) xb[i] = float_to_bf16(x[i]);
    std::vector<float> out(static_cast<size_t>(T) * cfg.hidden_size);
    reference_block(L, xb.data(), T, o.act, situ, out.data());
    return out;
  }
  const std::vector<int32_t> ids = read_i32(input, "topk_ids");
  const std::vector<float> w = read_floats(input, "topk_weights");
  const int k = static_cast<int>(ids.size() / T);
  std::vector<float> out(static_cast<size_t>(T) * cfg.routed_expert_hidden_size);
  reference_experts(L, x.data(), T, ids.data(), w.data(), k, o.act, situ, o.range, out.data());
  return out;
}

::testing::AssertionResult same_bits(const std::vector<float>& got,
                                     const std::vector<float>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != expected " << want.size();
  std::ostringstream os;
  size_t bad = 0;
  double max_diff = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], 4) != 0) {
      if (bad < 8) os << "\n  [" << i << "] got " << got[i] << " want " << want[i];
      ++bad;
      max_diff = std::fmax(max_diff, std::fabs(double(got[i]) - want[i]));
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " values differ (max abs diff " << max_diff << ")"
         << os.str();
}

}  // namespace mxmoe::test
