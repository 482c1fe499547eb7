// bench/blas.cpp: cuBLAS / cublasLt wrappers (see blas.h).
#include "blas.h"

#include "mxmoe/common.h"

namespace mxmoe::bench {
namespace {
// cuBLAS needs a caller-owned workspace to be capturable; 32 MiB covers its split-K kernels.
constexpr size_t kWorkspace = size_t{32} << 20;
}  // namespace

Blas::Blas(cudaStream_t s)
    : stream_(s),
      ws_(kWorkspace, "the cuBLAS workspace"),
      lt_ws_(kWorkspace, "the cublasLt workspace") {
  BENCH_CUBLAS(cublasCreate(&h_));
  BENCH_CUBLAS(cublasLtCreate(&lt_));
  // Stream first: cublasSetStream resets the handle's workspace to cuBLAS's own pool.
  BENCH_CUBLAS(cublasSetStream(h_, s));
  BENCH_CUBLAS(cublasSetWorkspace(h_, ws_.get(), ws_.bytes()));
}

Blas::~Blas() {
  if (lt_) cublasLtDestroy(lt_);
  if (h_) cublasDestroy(h_);
}

void Blas::use_stream(cudaStream_t s) {
  if (s == stream_) return;
  // cublasSetStream drops our workspace: set it again after.
  BENCH_CUBLAS(cublasSetStream(h_, s));
  BENCH_CUBLAS(cublasSetWorkspace(h_, ws_.get(), ws_.bytes()));
  stream_ = s;
}

void Blas::gemm_bf16(int m, int n, int k, const void* W, const void* X, void* Y, cudaStream_t s) {
  const float alpha = 1.0f, beta = 0.0f;
  use_stream(s);
  BENCH_CUBLAS(cublasGemmEx(h_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, W, CUDA_R_16BF, k, X,
                            CUDA_R_16BF, k, &beta, Y, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

void GroupedBf16::add_group(int gm, int gn, int gk, int problems) {
  ta.push_back(CUBLAS_OP_T);
  tb.push_back(CUBLAS_OP_N);
  m.push_back(gm);
  n.push_back(gn);
  k.push_back(gk);
  alpha.push_back(1.0f);
  beta.push_back(0.0f);
  size.push_back(problems);
}

cublasStatus_t Blas::gemm_bf16_grouped(const GroupedBf16& g, cudaStream_t s) {
  use_stream(s);
  // Row-major Y[n, m] = X[n, k] . W[m, k]^T as gemm_bf16's TN GEMM: lda = ldb = k, ldc = m.
  return cublasGemmGroupedBatchedEx(h_, g.ta.data(), g.tb.data(), g.m.data(), g.n.data(),
                                    g.k.data(), g.alpha.data(), g.w, CUDA_R_16BF, g.k.data(), g.x,
                                    CUDA_R_16BF, g.k.data(), g.beta.data(), g.y, CUDA_R_16BF,
                                    g.m.data(), g.groups(), g.size.data(), CUBLAS_COMPUTE_32F);
}

std::string Fp8Config::describe() const {
  return std::string(outer_vec ? "per-row weight x per-token activation scales (outer vector)"
                               : "per-tensor scales") +
         (fast_accum ? ", fast accumulation" : ", full accumulation");
}

Fp8Gemm::~Fp8Gemm() {
  auto destroy = [](Plan& p) {
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) cublasLtMatrixLayoutDestroy(p.c);
    if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  };
  for (auto& [shape, p] : plans_) destroy(p);
  for (auto& [shape, p] : batched_) destroy(p);
}

bool Fp8Gemm::build(Plan& p, int m, int n, int k, int batch) {
  BENCH_CUBLAS(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Attributes this cuBLAS may not know (scale modes, fast accumulation) make the configuration
  // unsupported rather than the run failed: choose_fp8_config then tries the next one.
  auto set = [&](cublasLtMatmulDescAttributes_t a, const void* v, size_t bytes) {
    return cublasLtMatmulDescSetAttribute(p.desc, a, v, bytes) == CUBLAS_STATUS_SUCCESS;
  };
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const int8_t fast = cfg_.fast_accum ? 1 : 0;
  bool attrs = set(CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) &&
               set(CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) &&
               set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
  if (attrs && batch == 0) {
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    // The heuristic may look at the scale pointers' presence: placeholders, replaced in run().
    const void* dummy = blas_.lt_workspace();
    attrs = set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &dummy, sizeof dummy) &&
            set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &dummy, sizeof dummy);
    if (attrs && cfg_.outer_vec)
      attrs = set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode) &&
              set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode);
  }
  if (!attrs) return false;
  BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, k, m, k));
  BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, k, n, k));
  BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_16BF, m, n, m));
  if (batch > 0) {
    const int32_t count = batch;
    const int32_t mode = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
    for (cublasLtMatrixLayout_t l : {p.a, p.b, p.c}) {
      const bool ok =
          cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                           sizeof count) == CUBLAS_STATUS_SUCCESS &&
          cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &mode,
                                           sizeof mode) == CUBLAS_STATUS_SUCCESS;
      if (!ok) return false;
    }
  }

  cublasLtMatmulPreference_t pref = nullptr;
  BENCH_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = blas_.lt_workspace_bytes();
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(blas_.lt(), p.desc, p.a, p.b, p.c, p.c, pref, 1, &result,
                                        &found);
  cublasLtMatmulPreferenceDestroy(pref);
  // NOT_SUPPORTED / no result: this configuration cannot run the shape; anything else is an error.
  if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED &&
      st != CUBLAS_STATUS_INVALID_VALUE)
    BENCH_CUBLAS(st);
  p.ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
  if (p.ok) p.algo = result.algo;
  return p.ok;
}

bool Fp8Gemm::plan(int m, int n, int k) {
  const auto key = std::make_tuple(m, n, k);
  if (auto it = plans_.find(key); it != plans_.end()) return it->second.ok;
  return build(plans_[key], m, n, k, 0);
}

bool Fp8Gemm::plan_batched(int m, int n, int k, int batch) {
  if (batch <= 0) return false;
  const auto key = std::make_tuple(m, n, k, batch);
  if (auto it = batched_.find(key); it != batched_.end()) return it->second.ok;
  return build(batched_[key], m, n, k, batch);
}

void Fp8Gemm::run(int m, int n, int k, const uint8_t* W, const float* w_scale, const uint8_t* X,
                  const float* x_scale, void* Y, cudaStream_t s) {
  auto it = plans_.find(std::make_tuple(m, n, k));
  if (it == plans_.end() || !it->second.ok)
    throw Error("bench: no cublasLt FP8 plan for m=" + std::to_string(m) + " n=" +
                std::to_string(n) + " k=" + std::to_string(k) + " (" + cfg_.describe() + ")");
  Plan& p = it->second;
  BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                              &w_scale, sizeof w_scale));
  BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                              &x_scale, sizeof x_scale));
  const float alpha = 1.0f, beta = 0.0f;
  BENCH_CUBLAS(cublasLtMatmul(blas_.lt(), p.desc, &alpha, W, p.a, X, p.b, &beta, Y, p.c, Y, p.c,
                              &p.algo, blas_.lt_workspace(), blas_.lt_workspace_bytes(), s));
}

void Fp8Gemm::run_batched(int m, int n, int k, int batch, const void* const* W,
                          const void* const* X, void* const* Y, cudaStream_t s) {
  auto it = batched_.find(std::make_tuple(m, n, k, batch));
  if (it == batched_.end() || !it->second.ok)
    throw Error("bench: no cublasLt batched FP8 plan for m=" + std::to_string(m) + " n=" +
                std::to_string(n) + " k=" + std::to_string(k) + " batch=" + std::to_string(batch));
  Plan& p = it->second;
  const float alpha = 1.0f, beta = 0.0f;
  // In pointer-array mode D is the array of output pointers; cublasLt only reads the array, but
  // takes it as void* like a plain output.
  void* d = const_cast<void**>(Y);
  BENCH_CUBLAS(cublasLtMatmul(blas_.lt(), p.desc, &alpha, W, p.a, X, p.b, &beta, d, p.c, d, p.c,
                              &p.algo, blas_.lt_workspace(), blas_.lt_workspace_bytes(), s));
}

Fp8Config choose_fp8_config(Blas& blas, const std::vector<std::tuple<int, int, int>>& probes,
                            bool want_outer_vec) {
  std::vector<Fp8Config> tries;
  if (want_outer_vec) tries.push_back({true, true}), tries.push_back({true, false});
  tries.push_back({false, true});
  tries.push_back({false, false});
  for (const Fp8Config& c : tries) {
    Fp8Gemm g(blas, c);
    bool ok = true;
    for (const auto& [m, n, k] : probes) ok = ok && g.plan(m, n, k);
    if (ok) return c;
  }
  throw Error("bench: cublasLt offers no FP8 (E4M3 x E4M3 -> BF16) algorithm on this device");
}

}  // namespace mxmoe::bench
