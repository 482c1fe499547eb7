// src/cuda/runtime/prepared.h: what prepare_weights leaves on the device (internal).
//
// Layout: the owned experts' prepacked matrices back to back (sm90/grouped_gemm.h), local expert
// i = global expert expert_start + i:
//   w13: 2I x H each (fused gate/up, weight_layout.h), w2: H x I each.
// With the w4a8 backend, PrepareOptions::fp8_prefill_weights (off by default; MXMOE_W4A8_FP8=on
// / off overrides it) and H, I multiples of 128, the same matrices are also folded exactly into
// E4M3 (sm90/fp8_fold.h) for the FP8 prefill GEMMs (sm90/fp8_gemm.h): 1 byte per weight, so
// 2 I H + H I bytes per expert on top of the MXFP4 copy (Kimi-K3 I = 3072: 33.0 MB per expert,
// 1.85 GB for EP16's 56 experts), plus 4 bytes per row of exponents. run_moe uses them for w4a8
// when the tokens per expert make FP8 MMA worthwhile (use_w4a8_fp8, host-known sizes only).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "mxmoe/moe.h"

namespace mxmoe {

// One folded weight set on the device (sm90::Fp8WeightsView's arrays, owned).
struct Fp8DeviceWeights {
  uint8_t* w = nullptr;
  int32_t* row_exp = nullptr;
  int32_t* extra_begin = nullptr;
  uint8_t* extra_w = nullptr;  // null when no tile needs an extra fold
  int32_t* extra_exp = nullptr;
};

struct PreparedWeights {
  int device = 0;
  int cc_major = 0, cc_minor = 0;
  int num_sms = 0;
  int hidden = 0, intermediate = 0;
  int num_experts_total = 0;
  int expert_start = 0, expert_count = 0;
  Backend backend = Backend::kW4A8;
  uint8_t* w13_packed = nullptr;
  uint8_t* w13_scales = nullptr;
  uint8_t* w2_packed = nullptr;
  uint8_t* w2_scales = nullptr;
  size_t weight_bytes = 0;
  // No scale of the owned w13 / w2 above 2^1: the kernels skip the per-step test for larger
  // scales (sm90::Gemm1Params::small_scales). Real checkpoints: both true.
  bool w13_small_scales = false, w2_small_scales = false;
  // FP8 W4A8 path (see above); has_fp8 false when it was not built.
  bool has_fp8 = false;
  Fp8DeviceWeights fp8_w13, fp8_w2;
  size_t fp8_bytes = 0;
  int64_t fp8_rows_split = 0;  // weight rows outside the 14-binade window (extra folds)
};

// True when run_moe should take the FP8 W4A8 GEMMs: w4a8, folded weights present, and at least
// kFp8MinRowsPerExpert rows per expert expected (T * top_k / all experts of the model; host
// sizes only, so a captured graph keeps its path). Kimi-K3 (896 experts, top-16): T >= 3584.
constexpr int kFp8MinRowsPerExpert = 64;
bool use_w4a8_fp8(const PreparedWeights* w, Backend backend, int num_tokens, int top_k);

// The FP8 W4A8 expert GEMMs: x (the caller's hidden states) -> MXFP8 codes + scales in xq_area
// (>= T*H*33/32 bytes) -> GEMM1 + SiTU + MXFP8 into h_area (>= P*I*33/32 bytes, P = T*top_k)
// -> GEMM2 x row weight into y [P, H] (or, with out_token, out's rows: Gemm2Params). The grouped
// problem (offsets, x_row, row_weight, out_token) and the local beta arrays come from run_moe's
// grouping. *failed names the failing launch.
cudaError_t launch_w4a8_fp8_gemms(const PreparedWeights* w, const void* hidden, bool hidden_f32,
                                  int64_t hidden_stride, int num_tokens, int top_k,
                                  const int32_t* expert_offsets, const int32_t* x_row,
                                  const float* row_weight, const float* beta,
                                  const float* linear_beta, void* xq_area, void* h_area, float* y,
                                  const int32_t* out_token, float* out, int64_t out_stride,
                                  cudaStream_t stream, const char** failed);

}  // namespace mxmoe
