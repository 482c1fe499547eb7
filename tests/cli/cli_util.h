// tests/cli/cli_util.h: shared helpers of the CLI tests: a scratch directory per test, running
// the CLI and asserting success, reading tensors back, and the expected outputs computed
// in-process by calling the library (mxmoe/reference.h) directly on the same files.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mxmoe/reference.h"
#include "spawn.h"

namespace mxmoe::test {

// MXMOE_BINARY_DIR/tests/cli/work/<Suite>.<Test>, emptied: each test owns its directory, so
// CTest may run tests in parallel.
std::string test_dir();

// Runs the CLI and fails the current test (non-fatally) unless it exits 0.
CliResult run_ok(const std::vector<std::string>& args, const std::string& dir);

// `mxmoe gen` of a small model into dir/model (8 experts, top-4, hidden 256, latent 128,
// intermediate 96) plus `extra` flags. Returns the model directory.
std::string gen_small_model(const std::string& dir, const std::vector<std::string>& extra = {});

// A tensor read back as fp32 (F32 or BF16) or int32 (I32); fails the test on a missing tensor.
std::vector<float> read_floats(const std::string& file, const std::string& tensor,
                               std::vector<int64_t>* shape = nullptr);
std::vector<int32_t> read_i32(const std::string& file, const std::string& tensor);

// The expected output of `mxmoe run` computed by calling the reference directly.
struct RefOptions {
  bool block = false;
  ActMode act = ActMode::kMxfp8;
  ExpertRange range;
  float beta = -1, linear_beta = -1;  // < 0: the config's
};
std::vector<float> reference_output(const std::string& model, int layer, const std::string& input,
                                    const RefOptions& o);

// Bit-for-bit comparison with a report of the first mismatches.
::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want);

}  // namespace mxmoe::test
