// tests/gpu/test_arch_gate.cpp: the architecture gate. SM90 passes; any other capability is
// refused by prepare_weights and run_moe before anything is launched. Non-SM90 devices are faked
// through the runtime's test hook (so the refusal path runs on the H200, and even with no GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "gpu_test_util.h"
#include "mxmoe/moe.h"
#include "runtime/arch.h"

namespace mxmoe::test {
namespace {

struct FakeCapability {
  FakeCapability(int ma, int mi) { runtime::set_fake_capability_for_testing(ma, mi); }
  ~FakeCapability() { runtime::set_fake_capability_for_testing(-1, -1); }
};

TEST(ArchGate, MessageNamesTheArchitecture) {
  EXPECT_TRUE(runtime::check_architecture(9, 0).ok());
  const Status s = runtime::check_architecture(8, 9);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "unsupported architecture sm_89: mxmoe's kernels are built for sm_90a (Hopper)");
  EXPECT_FALSE(runtime::check_architecture(10, 0).ok());
  EXPECT_FALSE(runtime::check_architecture(12, 0).ok());
  EXPECT_FALSE(runtime::check_architecture(9, 1).ok());
}

TEST(ArchGate, PrepareRefusesFakedNonHopperDevices) {
  // Runs without a GPU too: the gate answers before the device is touched.
  auto L = make_layer(8, 256, 128, 2, 0, 8, 1);
  for (auto cc : {std::pair<int, int>{8, 0}, {8, 9}, {10, 0}, {12, 0}}) {
    FakeCapability fake(cc.first, cc.second);
    PrepareOptions o;
    o.device = 0;
    PreparedWeights* w = nullptr;
    const Status s = prepare_weights(L->layer, o, &w);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(w, nullptr);
    const std::string want =
        "unsupported architecture sm_" + std::to_string(cc.first) + std::to_string(cc.second);
    EXPECT_EQ(s.message().rfind(want, 0), 0u) << s.message();
    std::printf("[arch] faked sm_%d%d: %s\n", cc.first, cc.second, s.message().c_str());
  }
}

TEST(ArchGate, Sm90PassesAndRunRefusesFakedDevicesWithoutLaunching) {
  MXMOE_REQUIRE_SM90();
  const int H = 256, I = 128, E = 8, k = 2, T = 4;
  auto L = make_layer(E, H, I, k, 0, E, 2);
  PreparedWeights* w = nullptr;
  Status s = prepare_weights(L->layer, PrepareOptions{}, &w);
  ASSERT_TRUE(s.ok()) << s.message();
  const PreparedInfo info = prepared_info(w);
  EXPECT_EQ(info.cc_major, 9);
  EXPECT_EQ(info.cc_minor, 0);
  DevBuf<char> ws(workspace_bytes(w, T, k));
  DevBuf<uint16_t> x(static_cast<size_t>(T) * H);
  DevBuf<int32_t> ids;
  DevBuf<float> wts, out(static_cast<size_t>(T) * H);
  CUDA_OK(ids.upload({0, 1, 2, 3, 4, 5, 6, 7}));
  CUDA_OK(wts.upload(std::vector<float>(T * k, 0.5f)));
  CUDA_OK(cudaMemset(x.get(), 0x3F, x.size() * 2));
  MoeRunParams p;
  p.num_tokens = T;
  p.top_k = k;
  p.hidden = x.get();
  p.topk_ids = ids.get();
  p.topk_weights = wts.get();
  p.out = out.get();
  p.workspace = ws.get();
  p.workspace_size = ws.size();
  p.max_tokens = T;
  {
    FakeCapability fake(8, 9);
    CUDA_OK(cudaMemset(out.get(), 0xFF, out.size() * 4));
    s = run_moe(w, p, nullptr);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.message(),
              "unsupported architecture sm_89: mxmoe's kernels are built for sm_90a (Hopper)");
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> o;
    CUDA_OK(out.download(&o));
    for (float v : o) ASSERT_TRUE(std::isnan(v)) << "run_moe wrote output on a refused device";
  }
  s = run_moe(w, p, nullptr);
  EXPECT_TRUE(s.ok()) << s.message();
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> o;
  CUDA_OK(out.download(&o));
  for (float v : o) ASSERT_TRUE(std::isfinite(v));
  destroy_weights(w);
}

TEST(MoeApi, BadParametersFailBeforeLaunching) {
  MXMOE_REQUIRE_SM90();
  const int H = 256, I = 128, E = 8, k = 2, T = 4;
  auto L = make_layer(E, H, I, k, 0, E, 3);
  PreparedWeights* w = nullptr;
  ASSERT_TRUE(prepare_weights(L->layer, PrepareOptions{}, &w).ok());
  DevBuf<char> ws(workspace_bytes(w, T, k));
  DevBuf<uint16_t> x(static_cast<size_t>(T) * H);
  DevBuf<int32_t> ids(T * k);
  DevBuf<float> wts(T * k), out(static_cast<size_t>(T) * H), logits(T * E);
  MoeRunParams p;
  p.num_tokens = T;
  p.top_k = k;
  p.hidden = x.get();
  p.topk_ids = ids.get();
  p.topk_weights = wts.get();
  p.out = out.get();
  p.workspace = ws.get();
  p.workspace_size = ws.size();
  p.max_tokens = T;
  auto expect_fail = [&](MoeRunParams q, const char* needle) {
    const Status s = run_moe(w, q, nullptr);
    EXPECT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  MoeRunParams q = p;
  q.num_tokens = T + 1;
  expect_fail(q, "max_tokens");
  q = p;
  q.workspace_size = ws.size() - 1;
  expect_fail(q, "workspace");
  q = p;
  q.router_logits = logits.get();
  expect_fail(q, "exactly one");
  q = p;
  q.topk_ids = nullptr;
  expect_fail(q, "exactly one");
  q = p;
  q.hidden_stride = H - 1;
  expect_fail(q, "hidden_stride");
  q = p;
  q.top_k = 0;
  expect_fail(q, "top_k");
  EXPECT_FALSE(run_moe(nullptr, p, nullptr).ok());
  destroy_weights(w);

  // prepare: NaN scale byte, bad widths, bad range.
  auto L2 = make_layer(4, 256, 128, 2, 0, 4, 4);
  const_cast<uint8_t*>(L2->layer.experts[2].w3.scales)[5] = 255;
  Status s = prepare_weights(L2->layer, PrepareOptions{}, &w);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("expert 2 w3: NaN scale byte"), std::string::npos) << s.message();
  auto L3 = make_layer(4, 256 + 32, 128, 2, 0, 4, 5);
  s = prepare_weights(L3->layer, PrepareOptions{}, &w);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("multiples of 64"), std::string::npos) << s.message();
  PrepareOptions o;
  o.expert_start = 3;
  o.expert_count = 2;
  EXPECT_FALSE(prepare_weights(L3->layer, o, &w).ok());
}

}  // namespace
}  // namespace mxmoe::test
