// src/cuda/sm90/fp8_gemm.h: the host interface of the SM90 FP8 grouped MoE GEMMs, the W4A8
// prefill path (internal; the kernels are in fp8_gemm_kernel.cuh).
//
// Same grouped problem as grouped_gemm.h (expert e owns sorted pair rows [offsets[e],
// offsets[e+1]), grids from host-known bounds, graph-capturable), but both operands are E4M3:
//  - weights: MXFP4 folded exactly into E4M3 codes with one exponent per row (fp8_fold.h);
//  - activations: MXFP8 as E4M3 codes [rows, K] + UE8M0 scale bytes [rows, K/32] (row-major,
//    contiguous), e.g. from smxx/quantize_mxfp8_codes.h; GEMM1 writes h in the same form.
// Semantics are exact MX semantics with fp32 accumulation: each k32 wgmma is one MX block of the
// activations, its fp32 result is scaled by the token's 2^s (exact) and added in fp32; the weight
// row's 2^R multiplies the sum at the end (exact). The one inexact step besides the fp32 sums is
// the tensor core's own accumulation of the 32 exact E4M3 x E4M3 products of a block (NUMERICS.md,
// "W4A8 on FP8 tensor cores").
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "sm90/grouped_gemm.h"

namespace mxmoe::sm90 {

// Device copy of an Fp8FoldedSet (fp8_fold.h): num_experts folded [rows, k] matrices.
struct Fp8WeightsView {
  const uint8_t* w = nullptr;            // [experts * rows * k], tile order
  const int32_t* row_exp = nullptr;      // [experts * rows]
  const int32_t* extra_begin = nullptr;  // [experts * rows / 64 + 1]
  const uint8_t* extra_w = nullptr;      // [pool * 64 * k] (may be null when the pool is empty)
  const int32_t* extra_exp = nullptr;    // [pool * 64]
};

// h[p] = MXFP8(situ_glu(W1_e . x_p, W3_e . x_p)) as codes h_codes [max_rows, I] and scale bytes
// h_scales [max_rows, I/32]; x_p = row x_row[p] of x_codes [*, K] / x_scales [*, K/32].
struct Fp8Gemm1Params {
  Fp8WeightsView w;  // w13 [2I, K] per expert (weight_layout.h's interleave)
  int I = 0, K = 0;
  const uint8_t* x_codes = nullptr;
  const uint8_t* x_scales = nullptr;
  const int32_t* x_row = nullptr;      // [max_rows]
  const float* beta = nullptr;         // [num_experts]
  const float* linear_beta = nullptr;  // [num_experts]
  uint8_t* h_codes = nullptr;
  uint8_t* h_scales = nullptr;
  GroupedProblem g;
  int warpgroups = 0;  // consumer warpgroups per CTA: 0 = auto (2 when 2I % 128 == 0), 1, 2
};

// y[p, :] = row_weight[p] * (W2_e . h_p), fp32 [max_rows, H]; out_token as in Gemm2Params
// (grouped_gemm.h).
struct Fp8Gemm2Params {
  Fp8WeightsView w;  // w2 [H, I] per expert
  int H = 0, I = 0;
  const uint8_t* h_codes = nullptr;
  const uint8_t* h_scales = nullptr;
  const float* row_weight = nullptr;
  float* y = nullptr;
  const int32_t* out_token = nullptr;
  float* out = nullptr;
  int64_t out_stride = 0;
  GroupedProblem g;
  int warpgroups = 0;  // 0 = auto (2 when H % 128 == 0), 1, 2
};

// cudaErrorInvalidValue (nothing launched) for bad shapes (weight rows % 64, or % 128 with
// warpgroups = 2, K % 128, I % 128 for
// GEMM2 / I % 32 for GEMM1), null or misaligned pointers (16 bytes: codes, weights, h, y; 4 bytes:
// scales), a bad tile_n; cudaSuccess with no launch when max_rows or num_experts is 0. Launched
// with programmatic dependent launch (smxx/pdl.cuh): they wait before reading offsets/activations.
cudaError_t launch_fp8_gemm1(const Fp8Gemm1Params& p, int num_sms, cudaStream_t stream);
cudaError_t launch_fp8_gemm2(const Fp8Gemm2Params& p, int num_sms, cudaStream_t stream);

}  // namespace mxmoe::sm90
