// tests/cli/cli_bad_input_test.cpp: bad input to the CLI. Each case must end with a non-zero exit
// status (2 for a bad command line, 1 for bad files or data), no crash and no hang, and exactly
// one stderr line `mxmoe: error: ...` (the last line) that names the culprit: the flag, file or
// tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "mxmoe/safetensors.h"

namespace fs = std::filesystem;

namespace mxmoe::test {
namespace {

void expect_error(const std::vector<std::string>& args, const std::string& dir, int exit_code,
                  const std::vector<std::string>& culprits) {
  const CliResult r = run_cli(args, dir, 300);
  std::string cmd = "mxmoe";
  for (const std::string& a : args) cmd += " " + a;
  ASSERT_FALSE(r.timed_out) << cmd << "\n" << r.describe();
  ASSERT_FALSE(r.signaled) << cmd << "\n" << r.describe();
  EXPECT_EQ(r.exit_code, exit_code) << cmd << "\n" << r.describe();
  const std::vector<std::string> lines = error_lines(r);
  ASSERT_EQ(lines.size(), 1u) << cmd << "\n" << r.describe();
  std::string last = r.err;
  while (!last.empty() && last.back() == '\n') last.pop_back();
  last = last.substr(last.rfind('\n') == std::string::npos ? 0 : last.rfind('\n') + 1);
  EXPECT_EQ(last, lines[0]) << "the error must be the last line\n" << r.describe();
  for (const std::string& c : culprits)
    EXPECT_NE(lines[0].find(c), std::string::npos)
        << "error line does not name '" << c << "': " << lines[0];
}

// A small model and a valid experts-scope input with T = 4, k = 4.
struct Fixture {
  std::string dir, model, in, out;
};
Fixture setup(bool with_input = true) {
  Fixture f;
  f.dir = test_dir();
  f.model = gen_small_model(f.dir);
  f.in = f.dir + "/in.safetensors";
  f.out = f.dir + "/out.safetensors";
  if (with_input) run_ok({"gen-input", "--model", f.model, "--tokens", "4", "--out", f.in}, f.dir);
  return f;
}

std::vector<std::string> run_args(const Fixture& f) {
  return {"run", "--model", f.model, "--input", f.in, "--output", f.out};
}

// Writes an experts-scope input with the given topk_ids tensor (dtype, shape, values).
void write_input(const std::string& path, int T, int latent, DType ids_dtype,
                 std::vector<int64_t> ids_shape, const std::vector<int32_t>& ids,
                 std::vector<int64_t> w_shape, const std::vector<float>& w) {
  static std::vector<uint16_t> x;
  x.assign(static_cast<size_t>(T) * latent, 0x3F80);  // BF16 1.0
  SafetensorsWriter wr;
  wr.add_bytes("hidden_states", DType::kBF16, {T, latent}, x.data());
  wr.add_bytes("topk_ids", ids_dtype, ids_shape, ids.data());
  wr.add_bytes("topk_weights", DType::kF32, w_shape, w.data());
  wr.write(path);
}

// ---- command line ----

TEST(CliBadInput, UnknownCommandAndFlag) {
  const std::string dir = test_dir();
  expect_error({"frobnicate"}, dir, 2, {"frobnicate"});
  expect_error({"run", "--model", "m", "--frobnicate", "1"}, dir, 2, {"--frobnicate"});
  expect_error({"info", "positional"}, dir, 2, {"positional"});
}

TEST(CliBadInput, MissingModelAndMissingValue) {
  const std::string dir = test_dir();
  expect_error({"run", "--input", "x", "--output", "y"}, dir, 2, {"--model"});
  expect_error({"info"}, dir, 2, {"--model"});
  expect_error({"run", "--input", "x", "--output", "y", "--model"}, dir, 2, {"--model"});
  expect_error({"run", "--model", "--input", "x"}, dir, 2, {"--model"});
}

TEST(CliBadInput, BadActAndConflicts) {
  const std::string dir = test_dir();
  const std::vector<std::string> base = {"run", "--model", "m", "--input", "x", "--output", "y"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  expect_error(with({"--act", "fp16"}), dir, 2, {"--act", "fp16"});
  expect_error(with({"--act", "bf16", "--backend", "w4a8"}), dir, 2, {"--act", "--backend"});
  expect_error(with({"--scope", "layer"}), dir, 2, {"--scope", "layer"});
  expect_error(with({"--device", "tpu"}), dir, 2, {"--device"});
  expect_error(with({"--scope", "block", "--ep-start", "2"}), dir, 2, {"--ep-start"});
  expect_error(with({"--beta", "-1"}), dir, 2, {"--beta"});
  expect_error(with({"--layer", "two"}), dir, 2, {"--layer", "two"});
  expect_error(with({"--act", "bf16", "--act", "bf16"}), dir, 2, {"--act", "twice"});
}

TEST(CliBadInput, BadNumbersForGen) {
  const std::string dir = test_dir();
  expect_error({"gen", "--out", dir + "/m", "--experts", "8x"}, dir, 2, {"--experts", "8x"});
  expect_error({"gen", "--out", dir + "/m", "--experts", "0"}, dir, 2, {"--experts"});
  expect_error({"gen", "--out", dir + "/m", "--seed", "-3"}, dir, 2, {"--seed"});
  // Widths that are not multiples of 32 and top-k > experts are config errors naming the field.
  expect_error({"gen", "--out", dir + "/m", "--latent", "100", "--quiet"}, dir, 1,
               {"routed_expert_hidden_size"});
  expect_error({"gen", "--out", dir + "/m", "--experts", "4", "--topk", "8", "--quiet"}, dir, 1,
               {"num_experts_per_token"});
}

// ---- files and data ----

TEST(CliBadInput, MissingModelDirectoryAndInputFile) {
  const Fixture f = setup();
  expect_error({"run", "--model", f.dir + "/nope", "--input", f.in, "--output", f.out}, f.dir, 1,
               {f.dir + "/nope"});
  expect_error(
      {"run", "--model", f.model, "--input", f.dir + "/nope.safetensors", "--output", f.out}, f.dir,
      1, {"nope.safetensors"});
  expect_error({"run", "--model", f.model, "--input", f.in, "--output",
                f.dir + "/no_such_dir/out.safetensors"},
               f.dir, 1, {"--output", "no_such_dir"});
}

TEST(CliBadInput, TruncatedInput) {
  const Fixture f = setup();
  fs::resize_file(f.in, fs::file_size(f.in) / 2);
  expect_error(run_args(f), f.dir, 1, {f.in});
  fs::resize_file(f.in, 5);  // shorter than the 8-byte header length
  expect_error(run_args(f), f.dir, 1, {f.in});
}

TEST(CliBadInput, MissingInputTensor) {
  const Fixture f = setup(false);
  std::vector<uint16_t> x(4 * 128, 0);
  SafetensorsWriter w;
  w.add_bytes("hidden_states", DType::kBF16, {4, 128}, x.data());
  w.write(f.in);
  expect_error(run_args(f), f.dir, 1, {"topk_ids"});
}

TEST(CliBadInput, TopkIdsWrongDtype) {
  const Fixture f = setup(false);
  std::vector<int32_t> ids(16, 0);
  std::vector<float> w(16, 0.25f);
  write_input(f.in, 4, 128, DType::kF32, {4, 4}, ids, {4, 4}, w);
  expect_error(run_args(f), f.dir, 1, {"topk_ids", "F32", "I32"});
}

TEST(CliBadInput, TopkIdsWrongShape) {
  const Fixture f = setup(false);
  std::vector<int32_t> ids(20, 0);
  std::vector<float> w(16, 0.25f);
  write_input(f.in, 4, 128, DType::kI32, {5, 4}, ids, {4, 4}, w);
  expect_error(run_args(f), f.dir, 1, {"topk_ids", "[5, 4]"});
  write_input(f.in, 4, 128, DType::kI32, {20}, ids, {4, 4}, w);
  expect_error(run_args(f), f.dir, 1, {"topk_ids", "[20]"});
  std::vector<int32_t> ids16(16, 0);
  write_input(f.in, 4, 128, DType::kI32, {4, 4}, ids16, {2, 8}, w);
  expect_error(run_args(f), f.dir, 1, {"topk_weights", "[2, 8]"});
}

TEST(CliBadInput, HiddenStatesWrongWidth) {
  const Fixture f = setup(false);
  std::vector<uint16_t> x(4 * 96, 0);
  SafetensorsWriter w;
  w.add_bytes("hidden_states", DType::kBF16, {4, 96}, x.data());
  w.write(f.in);
  expect_error(run_args(f), f.dir, 1, {"hidden_states", "[4, 96]", "128"});
}

TEST(CliBadInput, ExpertIdOutOfRange) {
  const Fixture f = setup(false);
  std::vector<int32_t> ids = {0, 1, 2, 3, 4, 5, 6, 7, 1, 2, 8, 3, 0, 0, 0, 0};
  std::vector<float> w(16, 0.25f);
  write_input(f.in, 4, 128, DType::kI32, {4, 4}, ids, {4, 4}, w);
  expect_error(run_args(f), f.dir, 1, {"topk_ids", "id 8", "[2, 2]"});
  ids[10] = -2;
  write_input(f.in, 4, 128, DType::kI32, {4, 4}, ids, {4, 4}, w);
  expect_error(run_args(f), f.dir, 1, {"topk_ids", "id -2"});
}

TEST(CliBadInput, TopkLargerThanExperts) {
  const Fixture f = setup(false);
  std::vector<int32_t> ids(4 * 9, 0);
  std::vector<float> w(4 * 9, 0.1f);
  write_input(f.in, 4, 128, DType::kI32, {4, 9}, ids, {4, 9}, w);
  expect_error(run_args(f), f.dir, 1, {"topk_ids", "top-k 9", "8 experts"});
}

TEST(CliBadInput, NonFiniteValues) {
  const Fixture f = setup(false);
  std::vector<int32_t> ids(16, 1);
  std::vector<float> w(16, 0.25f);
  w[5] = NAN;
  write_input(f.in, 4, 128, DType::kI32, {4, 4}, ids, {4, 4}, w);
  expect_error(run_args(f), f.dir, 1, {"topk_weights", "[1, 1]"});
}

TEST(CliBadInput, F32InputOverflowsBf16InBlockScope) {
  const Fixture f = setup(false);
  std::vector<float> x(2 * 256, 1.0f);
  x[256 + 7] = 3.4e38f;  // finite in F32, rounds to Inf in BF16
  SafetensorsWriter w;
  w.add_bytes("hidden_states", DType::kF32, {2, 256}, x.data());
  w.write(f.in);
  std::vector<std::string> a = run_args(f);
  a.insert(a.end(), {"--scope", "block"});
  expect_error(a, f.dir, 1, {"hidden_states", "[1, 7]", "BF16"});
}

TEST(CliBadInput, LayerAndEpRangeOutsideTheModel) {
  const Fixture f = setup();
  std::vector<std::string> a = run_args(f);
  a.insert(a.end(), {"--layer", "0"});
  expect_error(a, f.dir, 1, {"--layer 0"});
  a = run_args(f);
  a.insert(a.end(), {"--layer", "2"});
  expect_error(a, f.dir, 1, {"--layer 2"});
  a = run_args(f);
  a.insert(a.end(), {"--ep-start", "6", "--ep-count", "4"});
  expect_error(a, f.dir, 1, {"--ep-start 6"});
}

// The shard and data-section offset of a checkpoint tensor, found from the shard headers.
struct TensorLocation {
  std::string shard;
  uint64_t file_offset = 0;
};
TensorLocation locate(const std::string& model, const std::string& name) {
  for (const auto& e : fs::directory_iterator(model)) {
    if (e.path().extension() != ".safetensors") continue;
    std::ifstream f(e.path(), std::ios::binary);
    uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    std::string header(n, '\0');
    f.read(header.data(), static_cast<std::streamsize>(n));
    const nlohmann::json h = nlohmann::json::parse(header);
    if (h.contains(name))
      return {e.path().string(), 8 + n + h[name]["data_offsets"][0].get<uint64_t>()};
  }
  ADD_FAILURE() << "tensor " << name << " not found in " << model;
  return {};
}

TEST(CliBadInput, MissingCheckpointTensor) {
  const Fixture f = setup();
  const std::string victim = "model.layers.1.block_sparse_moe.experts.3.w2.weight_scale";
  const TensorLocation loc = locate(f.model, victim);
  ASSERT_FALSE(loc.shard.empty());
  {
    // Rewrite the shard without the victim (the index still names it).
    auto shard = SafetensorsFile::open(loc.shard);
    SafetensorsWriter w;
    for (const TensorView& t : shard->tensors())
      if (t.name != victim) w.add_bytes(t.name, t.dtype, t.shape, t.data);
    w.write(loc.shard + ".tmp");
  }
  fs::rename(loc.shard + ".tmp", loc.shard);
  expect_error(run_args(f), f.dir, 1, {"experts.3.w2.weight_scale"});
  expect_error({"info", "--model", f.model}, f.dir, 1, {"experts.3.w2.weight_scale"});
}

TEST(CliBadInput, NanScaleByteInCheckpoint) {
  const Fixture f = setup();
  const std::string victim = "model.layers.1.block_sparse_moe.experts.5.w1.weight_scale";
  const TensorLocation loc = locate(f.model, victim);
  ASSERT_FALSE(loc.shard.empty());
  {
    std::fstream s(loc.shard, std::ios::in | std::ios::out | std::ios::binary);
    s.seekp(static_cast<std::streamoff>(loc.file_offset + 7));
    const char nan_byte = static_cast<char>(0xFF);
    s.write(&nan_byte, 1);
  }
  expect_error(run_args(f), f.dir, 1, {"experts.5.w1.weight_scale"});
  expect_error({"info", "--model", f.model}, f.dir, 1, {"experts.5.w1.weight_scale"});
}

// ---- devices ----

TEST(CliBadInput, CudaDeviceAndCheck) {
  const Fixture f = setup();
  std::vector<std::string> a = run_args(f);
  a.insert(a.end(), {"--device", "cuda"});
#if MXMOE_CLI_CUDA
  // A CUDA build: on a machine without a GPU this must still fail cleanly on one line; on the
  // H200 it may succeed (tests/gpu hold it to the reference there).
  // `mxmoe bench` is linked in: its usage must come back through the CLI.
  const CliResult help = run_cli({"bench", "--help"}, f.dir, 60);
  EXPECT_EQ(help.exit_code, 0) << help.describe();
  EXPECT_NE(help.out.find("--quick"), std::string::npos) << help.describe();
  for (const std::vector<std::string>& args :
       {a, std::vector<std::string>{"check", "--model", f.model, "--tokens", "4", "--quiet"}}) {
    const CliResult r = run_cli(args, f.dir, 300);
    ASSERT_FALSE(r.signaled || r.timed_out) << args[0] << "\n" << r.describe();
    if (r.exit_code != 0) {
      EXPECT_EQ(r.exit_code, 1) << args[0] << "\n" << r.describe();
      EXPECT_EQ(error_lines(r).size(), 1u) << args[0] << "\n" << r.describe();
    }
  }
#else
  expect_error(a, f.dir, 1, {"built without CUDA", "--device cuda"});
  expect_error({"check", "--model", f.model}, f.dir, 1, {"built without CUDA", "check"});
  expect_error({"bench", "--quick"}, f.dir, 1, {"built without CUDA", "bench"});
#endif
}

}  // namespace
}  // namespace mxmoe::test
