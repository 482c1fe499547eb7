// bench/baseline.h: what a user could run instead of mxmoe: cuBLAS GEMMs per expert on weights
// dequantized ahead of time (the memory-hungry option), for the same routing as the case.
//
// Per local expert e with c_e > 0 pairs (rows o_e .. o_e + c_e of the gathered activations),
// in expert order, both GEMMs of the expert:
//   BF16: H[c_e, 2I] = X[c_e, K] . W13_e[2I, K]^T ; Y[c_e, K] = A[c_e, I] . W2_e[K, I]^T
//   FP8 : the same with E4M3 X / A / weights, per-row weight scales (per-tensor if cublasLt lacks
//         outer-vector scaling: blas.h), BF16 outputs.
// Grouped BF16 (cublas-bf16g): the same GEMMs in two cublasGemmGroupedBatchedEx calls (all of
// GEMM1, then all of GEMM2), experts with equal pair counts forming one group, so a decode step's
// hundreds of tiny per-expert launches become a few: what a user would run rather than a loop.
// Its outputs are checked against the per-expert GEMMs' before it is timed (plan_bf16_grouped).
// Grouped FP8 (cublas-fp8g): one pointer-array batched cublasLt matmul per group of equal counts
// and GEMM, unscaled (this cublasLt has no per-problem scales, blas.h), then one small kernel per
// GEMM that applies every row's weight x activation scales to its BF16 output; checked against
// the per-expert FP8 GEMMs the same way (plan_fp8_grouped).
// Counted: the GEMMs only. Not counted: the gather of token rows, SiTU between the GEMMs, the
// FP8 quantization of activations and the weighted combine (A is a separate pre-filled buffer).
// So a baseline time is a LOWER bound of a real cuBLAS MoE, and mxmoe's ratio to it is
// conservative. The per-expert counts are taken from the host (the baseline is told the routing;
// a real engine would have to read them back or run a grouped GEMM).
// W13_e = [w1; w3] (gate rows first), dequantized exactly (device_util.h).
// Memory: E_local x 3 x K x I x (2 + 1) bytes of weights; bench.cpp skips layouts above a cap.
#pragma once

#include <string>
#include <vector>

#include "blas.h"
#include "workload.h"

namespace mxmoe::bench {

// BF16 weight bytes of a layout's baseline (the number the cap is checked against).
double baseline_bf16_weight_bytes(const Layout& l);

class Baselines {
 public:
  // Uploads the pool, dequantizes every local expert, fills activations for up to max_pairs rows.
  // fp8 may be null (cublasLt offers no FP8 configuration for these shapes): BF16 only.
  Baselines(const Layout& l, const WeightPool& pool, Blas& blas, Fp8Gemm* fp8, int64_t max_pairs,
            cudaStream_t s);

  // Host-side planning for the FP8 shapes of this routing (call before capture). False: no FP8
  // GEMMs, or cublasLt has no algorithm for one shape (the case's FP8 baseline is skipped).
  bool plan_fp8(const std::vector<int>& counts);
  void enqueue_bf16(const std::vector<int>& counts, cudaStream_t s);
  void enqueue_fp8(const std::vector<int>& counts, cudaStream_t s);
  // Grouped BF16: plan_bf16_grouped builds the groups of this routing and uploads their pointers
  // (host only: before capture; the plan then stays fixed until the next call, as a captured
  // graph may read its host arrays). It runs both forms once, eagerly, and compares the grouped
  // outputs with the per-expert ones. Returns "" when the grouped form is ready to time,
  // "unsupported: ..." when this cuBLAS refuses it (the line is skipped), or "FAIL: ..." when it
  // ran but its outputs differ.
  std::string plan_bf16_grouped(const std::vector<int>& counts, cudaStream_t s);
  void enqueue_bf16_grouped(cudaStream_t s);
  // Grouped FP8, the same contract as the BF16 one; call after plan_fp8(counts) returned true.
  std::string plan_fp8_grouped(const std::vector<int>& counts, cudaStream_t s);
  void enqueue_fp8_grouped(cudaStream_t s);

  // Bytes the baseline itself must move for these counts: weights of the touched experts,
  // gathered inputs and outputs of both GEMMs.
  double bytes_bf16(const std::vector<int>& counts) const;
  double bytes_fp8(const std::vector<int>& counts) const;

 private:
  Layout l_;
  Blas& blas_;
  Fp8Gemm* fp8_;
  int64_t max_pairs_;
  DevBuf w13b_, w2b_, w13f_, s13_, w2f_, s2_;
  DevBuf xb_, ab_, hb_, yb_, xf_, af_, ones_;
  // The grouped plans: per GEMM (0: GEMM1, 1: GEMM2) its groups, their device pointer arrays in
  // ptrs_ (BF16) / ptrs8_ (FP8); outputs in hg_ / yg_ (kept apart from the per-expert ones for
  // the checks). An FP8 batch: `batch` problems of shape (m, n, k) whose pointers start at
  // entry `first` of each of the GEMM's three arrays (w, x, y) in ptrs8_.
  struct Fp8Batch {
    int m, n, k, batch;
    size_t first;
  };
  GroupedBf16 grouped_[2];
  std::vector<Fp8Batch> batches8_[2];
  size_t problems8_ = 0, rows8_ = 0;
  DevBuf ptrs_, ptrs8_, hg_, yg_, row_expert_;
  // GEMM `gemm`'s output width m and reduction length k (GEMM1: 2I x K, GEMM2: K x I).
  struct GemmShape {
    int m, k;
  };
  GemmShape gemm_shape(int gemm) const;
  // The counts' groups (workload.h), their rows checked against the buffers' max_pairs_.
  CountGroups groups_of(const std::vector<int>& counts) const;
  // A host array into a device buffer (checked against its size), before any capture.
  static void upload(const DevBuf& dst, const void* src, size_t bytes);
  // The device pointer arrays of both GEMMs for the counts' groups, as host arrays to upload:
  // per GEMM (GEMM1 first) P weight, P activation and P grouped-output pointers (P = problems),
  // of the BF16 or the FP8 form.
  std::vector<const void*> pointers(const CountGroups& g, bool fp8) const;
  // The grouped outputs (hg_ / yg_) against the per-expert ones (hb_ / yb_) for `rows` rows:
  // "" when they agree (compare_bf16 in baseline.cpp), else the first difference.
  std::string compare_outputs(size_t rows) const;
};

}  // namespace mxmoe::bench
