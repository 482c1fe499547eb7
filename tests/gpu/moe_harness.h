// tests/gpu/moe_harness.h: runs the whole GPU MoE (mxmoe/moe.h) on generated inputs and checks
// it against the CPU reference (reference_experts) on the same inputs, printing every metric.
#pragma once

#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "mxmoe/moe.h"

namespace mxmoe::test {

enum class Routing {
  kGpuLogits,   // router logits + correction bias, routed on the GPU (ids copied out)
  kLocalHeavy,  // caller ids: ~half the slots local, the rest other-rank, some -1
  kUniform,     // caller ids: 16 distinct experts of the whole model (real EP statistics)
  kOneExpert,   // caller ids: slot t % k of every token on one local expert, the others -1
};

struct CaseOptions {
  std::string name;
  int T = 1;
  Routing routing = Routing::kLocalHeavy;
  std::vector<Backend> backends = {Backend::kW4A16, Backend::kW4A8};
  int64_t x_pad = 0, out_pad = 0;  // extra elements per row (non-contiguous views)
  bool f32_input = false;
  float beta = 4.0f, linear_beta = 25.0f;
  bool per_expert_beta = false;
  int sample = 6;               // CPU-reference rows (sampled when T is larger)
  bool cross_mode_bar = false;  // also check w4a8 vs the bf16 reference (real sizes)
  uint64_t seed = 1;
};

struct CaseResult {
  std::vector<float> out[2];  // per backend (index = backend), [T, H] contiguous copy
};

// Prepared weights for a synthetic layer; destroyed with it.
struct GpuLayer {
  std::unique_ptr<SyntheticLayer> syn;
  PreparedWeights* w = nullptr;
  ~GpuLayer() { destroy_weights(w); }
};
// fp8_prefill: PrepareOptions::fp8_prefill_weights (w4a8 takes the FP8 GEMMs at large T).
std::unique_ptr<GpuLayer> make_gpu_layer(int E_total, int H, int I, int k, int start, int count,
                                         uint64_t seed, bool fp8_prefill = false);

// Runs one case with gtest assertions (bars of issue 3) and prints the metrics.
void run_case(const GpuLayer& g, const CaseOptions& c, CaseResult* result = nullptr);

// Inputs of one case, built on the host (exposed for the graph test).
struct CaseInputs {
  std::vector<uint16_t> x_bits;  // [T, H] BF16
  std::vector<float> x;          // exact fp32 values of x_bits
  std::vector<int32_t> ids;      // [T, k]
  std::vector<float> weights;    // [T, k]
  std::vector<float> logits;     // [T, E_total] (kGpuLogits)
  std::vector<float> bias;       // [E_total]
};
CaseInputs make_inputs(const SyntheticLayer& s, int T, Routing r, uint64_t seed);

// Points p's routing at the device buffers: router logits + bias in, the routed ids and weights
// out (gpu_route), or the caller's ids and weights in; the other mode's pointers cleared.
void bind_routing(MoeRunParams* p, bool gpu_route, const float* logits, const float* bias,
                  int32_t* ids, float* weights);

// run_moe's device buffers and parameters for T tokens with the caller's ids on layer g (its
// hidden width, top-k and expert count): x rows x_pad elements apart beyond H (8: still 16-byte
// rows; 4: not, so GEMM1 cannot read them in place); per_expert: SiTU parameters per global
// expert, away from the scalars' defaults. Upload errors fail the calling test.
struct MoeRun {
  int T, H, k;
  int64_t xs;
  DevBuf<uint16_t> x;
  DevBuf<int32_t> ids;
  DevBuf<float> w, out, beta, lbeta;
  DevBuf<char> ws;
  MoeRunParams p;
  MoeRun(const GpuLayer& g, int T, Backend backend, int x_pad = 0, bool per_expert = false);
  bool ok() const { return x.ok() && ids.ok() && w.ok() && out.ok() && ws.ok(); }
  cudaError_t load(const CaseInputs& in);  // x (NaN in the gaps), ids, weights
  // out poisoned (fp32 NaN), one eager run_moe on the legacy stream, out downloaded.
  void eager(const GpuLayer& g, std::vector<float>* o);
};

}  // namespace mxmoe::test
