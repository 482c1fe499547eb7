// bench/blas.h: the cuBLAS side of the benchmark: handles with fixed workspaces (so every call
// can be captured in a CUDA graph), BF16 GEMMs through cublasGemmEx (one GEMM) and
// cublasGemmGroupedBatchedEx (many in one call), FP8 GEMMs through cublasLt (one, or a batch of
// equal shapes through pointer arrays).
//
// Layout convention (all row-major, as mxmoe stores them): Y[n, m] = X[n, k] . W[m, k]^T, i.e. the
// weight W is [out features, k] and X holds n tokens. In cuBLAS's column-major terms this is the
// "TN" GEMM D(m x n) = W^T(k x m)^T . X(k x n), the only layout cublasLt FP8 accepts on Hopper.
//
// FP8: E4M3 x E4M3 -> BF16 with fp32 accumulation. Scales: per-row weight scales and per-token
// activation scales through CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F when this cuBLAS supports it
// on the device, else one per-tensor scale each (choose_fp8_config probes, the choice is printed).
// Fast accumulation is on where supported (the strongest FP8 baseline / ceiling cuBLAS offers).
// Batched FP8 (CUBLASLT_BATCH_MODE_POINTER_ARRAY) takes no scales: this cublasLt (13.1) has one
// scale pointer per matmul, shared by every problem of the batch, and no per-batch scale mode,
// so the caller applies each problem's scales to its output afterwards.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "device_util.h"

namespace mxmoe::bench {

// The problems of one grouped call: group g holds size[g] problems of shape (m[g], n[g], k[g]),
// each gemm_bf16's TN GEMM; w, x, y are DEVICE arrays of one pointer per problem, group after
// group. cuBLAS takes the per-group fields as host arrays, which must stay unchanged while a graph
// that captured the call may replay (cuBLAS may read them then).
struct GroupedBf16 {
  std::vector<cublasOperation_t> ta, tb;  // per group, all T / N (add_group)
  std::vector<int> m, n, k, size;
  std::vector<float> alpha, beta;  // per group, all 1 / 0 (add_group)
  const void* const* w = nullptr;
  const void* const* x = nullptr;
  void* const* y = nullptr;
  void add_group(int gm, int gn, int gk, int problems);
  int groups() const { return static_cast<int>(size.size()); }
};

class Blas {
 public:
  explicit Blas(cudaStream_t s);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // Y[n, m] = X[n, k] . W[m, k]^T, BF16 in / out, fp32 compute; contiguous rows.
  void gemm_bf16(int m, int n, int k, const void* W, const void* X, void* Y, cudaStream_t s);
  // The same GEMM for many problems in one cublasGemmGroupedBatchedEx call (GroupedBf16 above).
  // Returns the cuBLAS status instead of throwing, so that a caller can tell "not supported
  // here" from a failure.
  cublasStatus_t gemm_bf16_grouped(const GroupedBf16& g, cudaStream_t s);

  cublasLtHandle_t lt() const { return lt_; }
  void* lt_workspace() const { return lt_ws_.get(); }
  size_t lt_workspace_bytes() const { return lt_ws_.bytes(); }

 private:
  void use_stream(cudaStream_t s);  // cublasSetStream, then our workspace again
  cublasHandle_t h_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  DevBuf ws_, lt_ws_;
};

struct Fp8Config {
  bool outer_vec = false;  // per-row / per-token fp32 scale vectors (else per-tensor scalars)
  bool fast_accum = true;
  std::string describe() const;
};

// FP8 GEMMs of one configuration; one cached plan (descriptor, layouts, algorithm) per shape.
class Fp8Gemm {
 public:
  Fp8Gemm(Blas& blas, Fp8Config cfg) : blas_(blas), cfg_(cfg) {}
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  // Builds the plan for (m, n, k) if needed (host only: call before graph capture).
  // False when cublasLt has no algorithm for it.
  bool plan(int m, int n, int k);
  // Y[n, m] (BF16) = (w_scale x x_scale) * X[n, k] . W[m, k]^T. With outer_vec, w_scale has m
  // entries and x_scale n; otherwise each points at one float. Throws if plan(m, n, k) failed.
  void run(int m, int n, int k, const uint8_t* W, const float* w_scale, const uint8_t* X,
           const float* x_scale, void* Y, cudaStream_t s);
  // `batch` problems of one shape in one cublasLtMatmul: W, X, Y are DEVICE arrays of `batch`
  // pointers each; Y[n, m] (BF16) = X[n, k] . W[m, k]^T unscaled (fast accumulation as the
  // configuration says). plan_batched as plan: host only, false when cublasLt has no algorithm.
  bool plan_batched(int m, int n, int k, int batch);
  void run_batched(int m, int n, int k, int batch, const void* const* W, const void* const* X,
                   void* const* Y, cudaStream_t s);
  const Fp8Config& config() const { return cfg_; }

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool ok = false;
  };
  // batch 0: one problem with the configuration's scales; batch > 0: pointer arrays, no scales.
  bool build(Plan& p, int m, int n, int k, int batch);
  Blas& blas_;
  Fp8Config cfg_;
  std::map<std::tuple<int, int, int>, Plan> plans_;
  std::map<std::tuple<int, int, int, int>, Plan> batched_;
};

// The first configuration (outer-vector then per-tensor scales; fast accumulation then not) for
// which every probe shape (m, n, k) has an algorithm. Throws when none does.
Fp8Config choose_fp8_config(Blas& blas, const std::vector<std::tuple<int, int, int>>& probes,
                            bool want_outer_vec);

}  // namespace mxmoe::bench
