// tests/cli/cli_e2e_test.cpp: `mxmoe gen` -> `gen-input` -> `run --device cpu` end to end, for both
// scopes and both activation modes, each output checked bit for bit against the reference
// computed in-process on the same files; plus EP slices, SiTU overrides, F32 inputs, zero tokens,
// one run at Kimi-K3's real expert widths, and `mxmoe info`'s scale statistics on checkpoints
// whose scale spread is known by construction.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "cli_util.h"

namespace mxmoe::test {
namespace {

std::vector<float> run_and_read(const std::string& dir, std::vector<std::string> args,
                                const std::string& out) {
  args.insert(args.begin(), "run");
  args.insert(args.end(), {"--output", out, "--quiet"});
  CliResult r = run_ok(args, dir);
  std::vector<int64_t> shape;
  std::vector<float> v = read_floats(out, "out", &shape);
  EXPECT_EQ(shape.size(), 2u);
  return v;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::fmax(m, std::fabs(x));
  return m;
}

TEST(CliEndToEnd, ExpertsScopeBothActModesMatchReference) {
  const std::string dir = test_dir();
  const std::string model = gen_small_model(dir);
  const std::string in = dir + "/in.safetensors";
  run_ok({"gen-input", "--model", model, "--tokens", "37", "--scope", "experts", "--out", in,
          "--seed", "5"},
         dir);
  std::vector<float> outs[2];
  for (ActMode act : {ActMode::kMxfp8, ActMode::kBf16}) {
    const std::string name = act_mode_name(act);
    std::vector<float> got =
        run_and_read(dir, {"--model", model, "--layer", "1", "--input", in, "--act", name},
                     dir + "/out_" + name + ".safetensors");
    RefOptions o;
    o.act = act;
    EXPECT_TRUE(same_bits(got, reference_output(model, 1, in, o))) << name;
    EXPECT_EQ(got.size(), 37u * 128u);
    EXPECT_GT(max_abs(got), 0.0) << "an all-zero output proves nothing";
    outs[act == ActMode::kBf16] = got;
  }
  // MXFP8 and BF16 activations must give different numbers: otherwise --act is not plumbed.
  EXPECT_FALSE(same_bits(outs[0], outs[1]));
}

TEST(CliEndToEnd, BlockScopeBothActModesMatchReference) {
  const std::string dir = test_dir();
  const std::string model = gen_small_model(dir);
  const std::string in = dir + "/in.safetensors";
  run_ok({"gen-input", "--model", model, "--tokens", "9", "--scope", "block", "--out", in}, dir);
  for (ActMode act : {ActMode::kMxfp8, ActMode::kBf16}) {
    const std::string name = act_mode_name(act);
    std::vector<float> got =
        run_and_read(dir, {"--model", model, "--input", in, "--scope", "block", "--act", name},
                     dir + "/out_" + name + ".safetensors");
    RefOptions o;
    o.block = true;
    o.act = act;
    EXPECT_TRUE(same_bits(got, reference_output(model, 1, in, o))) << name;
    EXPECT_EQ(got.size(), 9u * 256u);
    EXPECT_GT(max_abs(got), 0.0);
  }
}

TEST(CliEndToEnd, F32InputsBothScopes) {
  const std::string dir = test_dir();
  const std::string model = gen_small_model(dir);
  for (const char* scope : {"experts", "block"}) {
    const std::string in = dir + "/in_" + scope + ".safetensors";
    run_ok({"gen-input", "--model", model, "--tokens", "5", "--scope", scope, "--out", in,
            "--dtype", "f32"},
           dir);
    std::vector<float> got =
        run_and_read(dir, {"--model", model, "--input", in, "--scope", scope, "--act", "bf16"},
                     dir + "/out_" + scope + ".safetensors");
    RefOptions o;
    o.block = std::string(scope) == "block";
    o.act = ActMode::kBf16;
    EXPECT_TRUE(same_bits(got, reference_output(model, 1, in, o))) << scope;
  }
}

// Two EP ranks' partial sums add up to the full layer (up to fp32 summation order), and each rank
// matches the reference with its range.
TEST(CliEndToEnd, ExpertParallelSlicesSumToFullLayer) {
  const std::string dir = test_dir();
  const std::string model = gen_small_model(dir);
  const std::string in = dir + "/in.safetensors";
  run_ok({"gen-input", "--model", model, "--tokens", "16", "--out", in}, dir);
  const std::vector<float> full =
      run_and_read(dir, {"--model", model, "--input", in}, dir + "/full.safetensors");
  const std::vector<float> a =
      run_and_read(dir, {"--model", model, "--input", in, "--ep-start", "0", "--ep-count", "3"},
                   dir + "/a.safetensors");
  const std::vector<float> b = run_and_read(
      dir, {"--model", model, "--input", in, "--ep-start", "3"}, dir + "/b.safetensors");
  RefOptions o;
  o.range = {0, 3};
  EXPECT_TRUE(same_bits(a, reference_output(model, 1, in, o)));
  o.range = {3, -1};
  EXPECT_TRUE(same_bits(b, reference_output(model, 1, in, o)));
  ASSERT_EQ(a.size(), full.size());
  ASSERT_EQ(b.size(), full.size());
  const double scale = max_abs(full);
  ASSERT_GT(scale, 0.0);
  EXPECT_GT(max_abs(a), 0.0);
  EXPECT_GT(max_abs(b), 0.0);
  for (size_t i = 0; i < full.size(); ++i)
    ASSERT_NEAR(double(a[i]) + b[i], full[i], 1e-5 * scale) << "at " << i;
}

TEST(CliEndToEnd, SituOverridesAndBackendAlias) {
  const std::string dir = test_dir();
  const std::string model = gen_small_model(dir);
  const std::string in = dir + "/in.safetensors";
  run_ok({"gen-input", "--model", model, "--tokens", "6", "--out", in}, dir);
  const std::vector<float> custom =
      run_and_read(dir, {"--model", model, "--input", in, "--beta", "2.5", "--linear-beta", "10"},
                   dir + "/custom.safetensors");
  RefOptions o;
  o.beta = 2.5f;
  o.linear_beta = 10.0f;
  EXPECT_TRUE(same_bits(custom, reference_output(model, 1, in, o)));
  EXPECT_FALSE(same_bits(custom, reference_output(model, 1, in, RefOptions{})));
  // --backend w4a16 alone selects BF16 activations (the pairing rule), on the CPU too.
  const std::vector<float> w4a16 = run_and_read(
      dir, {"--model", model, "--input", in, "--backend", "w4a16"}, dir + "/w4a16.safetensors");
  RefOptions bf;
  bf.act = ActMode::kBf16;
  EXPECT_TRUE(same_bits(w4a16, reference_output(model, 1, in, bf)));
}

TEST(CliEndToEnd, ZeroTokensAndSecondLayer) {
  const std::string dir = test_dir();
  const std::string model = gen_small_model(dir, {"--layers", "2"});
  const std::string in = dir + "/in.safetensors";
  run_ok({"gen-input", "--model", model, "--tokens", "0", "--out", in}, dir);
  std::vector<int64_t> shape;
  run_ok({"run", "--model", model, "--layer", "2", "--input", in, "--output",
          dir + "/out.safetensors"},
         dir);
  EXPECT_TRUE(read_floats(dir + "/out.safetensors", "out", &shape).empty());
  EXPECT_EQ(shape, (std::vector<int64_t>{0, 128}));
  // Layer 2 holds different weights than layer 1.
  const std::string in3 = dir + "/in3.safetensors";
  run_ok({"gen-input", "--model", model, "--tokens", "3", "--out", in3}, dir);
  const std::vector<float> l2 = run_and_read(
      dir, {"--model", model, "--layer", "2", "--input", in3}, dir + "/l2.safetensors");
  EXPECT_TRUE(same_bits(l2, reference_output(model, 2, in3, RefOptions{})));
  EXPECT_FALSE(same_bits(l2, reference_output(model, 1, in3, RefOptions{})));
}

// Kimi-K3's real expert widths (latent 3584, intermediate 3072) with few experts and tokens.
TEST(CliEndToEnd, KimiRealExpertWidths) {
  const std::string dir = test_dir();
  const std::string model = dir + "/model";
  run_ok({"gen", "--out", model, "--experts", "4", "--topk", "2", "--hidden", "1024", "--quiet"},
         dir);
  for (const char* scope : {"experts", "block"}) {
    const std::string in = dir + "/in_" + scope + ".safetensors";
    run_ok({"gen-input", "--model", model, "--tokens", "3", "--scope", scope, "--out", in}, dir);
    for (ActMode act : {ActMode::kMxfp8, ActMode::kBf16}) {
      const std::string name = act_mode_name(act);
      std::vector<float> got =
          run_and_read(dir, {"--model", model, "--input", in, "--scope", scope, "--act", name},
                       dir + "/out.safetensors");
      RefOptions o;
      o.block = std::string(scope) == "block";
      o.act = act;
      EXPECT_TRUE(same_bits(got, reference_output(model, 1, in, o))) << scope << " " << name;
      EXPECT_EQ(got.size(), 3u * (o.block ? 1024u : 3584u));
      EXPECT_GT(max_abs(got), 0.0);
    }
  }
}

// Finds the aggregate statistics row of `matrix` in layer 1 and returns its columns.
std::vector<std::string> stats_row(const std::string& out, const std::string& matrix) {
  std::istringstream is(out);
  for (std::string line; std::getline(is, line);) {
    std::istringstream ls(line);
    std::vector<std::string> cols;
    for (std::string c; ls >> c;) cols.push_back(c);
    if (cols.size() >= 9 && cols[0] == "1" && cols[1] == matrix) return cols;
  }
  return {};
}

// The "rows per spread" histogram line of `matrix`, as (spread, rows) pairs.
std::vector<std::pair<int, long long>> spread_histogram(const std::string& out,
                                                        const std::string& matrix) {
  std::istringstream is(out);
  for (std::string line; std::getline(is, line);) {
    std::istringstream ls(line);
    std::string m, w1, w2, w3;
    ls >> m >> w1 >> w2 >> w3;
    if (m != matrix || w1 != "rows" || w3 != "spread:") continue;
    std::vector<std::pair<int, long long>> h;
    for (std::string e; ls >> e;) {
      const size_t colon = e.find(':');
      h.emplace_back(std::stoi(e.substr(0, colon)), std::stoll(e.substr(colon + 1)));
    }
    return h;
  }
  return {};
}

// The generator's documented scale distribution gives known answers: per-block jitter +-2 and no
// wide rows -> every row spread <= 4, none outside the window; every row wide (fraction 1) with
// spread 17 -> every row outside the window.
TEST(CliInfo, ScaleStatisticsMatchTheGenerator) {
  const std::string dir = test_dir();
  const std::string narrow =
      gen_small_model(dir, {"--wide-row-fraction", "0", "--scale-jitter", "2"});
  CliResult r = run_ok({"info", "--model", narrow}, dir);
  EXPECT_NE(r.out.find("MoE layers found: 1"), std::string::npos) << r.out;
  for (const char* m : {"w1", "w3", "w2"}) {
    const std::vector<std::string> c = stats_row(r.out, m);
    ASSERT_FALSE(c.empty()) << m << "\n" << r.out;
    // columns: layer matrix experts rows exp-min exp-max spread-max spread-mean rows>14 (pct)
    EXPECT_EQ(c[2], "8");
    EXPECT_EQ(c[3], std::to_string(8 * (std::string(m) == "w2" ? 128 : 96))) << m;
    EXPECT_LE(std::stoi(c[6]), 4) << m;
    EXPECT_EQ(c[8], "0") << m;
    long long total = 0;
    const auto h = spread_histogram(r.out, m);
    ASSERT_FALSE(h.empty()) << m << "\n" << r.out;
    for (const auto& [spread, rows] : h) {
      EXPECT_LE(spread, 4) << m;
      total += rows;
    }
    EXPECT_EQ(std::to_string(total), c[3]) << m;
  }

  const std::string wide_dir = dir + "/wide";
  std::filesystem::create_directories(wide_dir);
  const std::string wide =
      gen_small_model(wide_dir, {"--wide-row-fraction", "1", "--wide-row-spread", "17"});
  r = run_ok({"info", "--model", wide, "--experts", "2", "--per-expert"}, dir);
  for (const char* m : {"w1", "w3", "w2"}) {
    const std::vector<std::string> c = stats_row(r.out, m);
    ASSERT_FALSE(c.empty()) << m << "\n" << r.out;
    EXPECT_EQ(c[2], "2");
    EXPECT_EQ(c[8], c[3]) << "every row should be outside the window: " << m;
    EXPECT_GT(std::stoi(c[6]), 14);
    for (const auto& [spread, rows] : spread_histogram(r.out, m)) EXPECT_GT(spread, 14) << m;
  }
  EXPECT_NE(r.out.find("e1 "), std::string::npos) << "--per-expert lines missing\n" << r.out;
}

}  // namespace
}  // namespace mxmoe::test
