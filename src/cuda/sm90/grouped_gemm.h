// src/cuda/sm90/grouped_gemm.h: the host interface of the SM90 grouped MoE GEMMs (internal).
//
// The runtime (src/cuda/runtime/) sorts the token-expert pairs by local expert and hands these
// kernels a grouped problem: expert e owns sorted pair rows [expert_offsets[e],
// expert_offsets[e+1]). Nothing here reads device data on the host: grids are sized from max_rows,
// and a persistent tile scheduler walks (expert, tile) work from expert_offsets on the device, so
// every launch can be captured in a CUDA graph and replayed with other routings.
//
// Weights: each expert's matrix [rows, k] (row-major MXFP4, rows % 64 == 0, k % 64 == 0) is
// "prepacked" once on the host into the kernels' register-fragment order (prepack_mxfp4); the
// experts' prepacked matrices sit back to back. GEMM1 uses the fused w13 (weight_layout.h), so a
// thread's accumulator holds matching gate and up rows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mxmoe::sm90 {

// Byte sizes of one prepacked matrix (the same totals as the row-major form).
size_t prepacked_packed_bytes(int rows, int k);
size_t prepacked_scale_bytes(int rows, int k);
// Exact byte permutation from row-major (packed [rows, k/2], scales [rows, k/32]) into the
// kernels' order, and back. Host only.
void prepack_mxfp4(const uint8_t* packed, const uint8_t* scales, int rows, int k,
                   uint8_t* out_packed, uint8_t* out_scales);
void unprepack_mxfp4(const uint8_t* prepacked, const uint8_t* prescales, int rows, int k,
                     uint8_t* packed, uint8_t* scales);
// True when no scale byte exceeds 128 (2^1): the expansion's one-multiply path then holds for
// every element, and the kernels may skip the per-step test for larger scales (small_scales).
// Real checkpoints' weight scales sit far below 2^1. Host only.
bool mxfp4_scales_small(const uint8_t* scales, size_t bytes);

struct GroupedProblem {
  int num_experts = 0;                      // local experts
  const int32_t* expert_offsets = nullptr;  // device [num_experts + 1], non-decreasing, [0] = 0
  int max_rows = 0;                         // upper bound on expert_offsets[num_experts]
  int tile_n = 0;  // tokens per tile: 0 = tile_heuristic.h's choice; 16/32/64/128 force the
                   // one-warpgroup kernel, 160 the warp-specialized one
  int kernel = 0;  // GemmKernel: which kernel serves a 16-token tile (tests pick one)
  int split_k =
      0;  // decode kernel only: CTAs per tile along K (0 = decode_gemm.h's choice; 1/2/4/8)
  // The expected number of rows (a host estimate, e.g. T * k * local / total experts under EP):
  // used only to choose the kernel, the tile width and the split, never to size or bound
  // anything, so a wrong guess costs speed, not correctness. 0 = max_rows.
  int rows_hint = 0;
  // Optional: the top-k ids [route_pairs] that expert_offsets were grouped from by the glue's
  // stable grouping (local expert e = id - route_expert_start when in [0, num_experts); other
  // ids, -1 included, own no row), when every id was written before the launch's kernel chain
  // began (the caller's topk_ids; ids that a kernel of the chain writes only with
  // route_ids_ready below). The decode
  // kernels may then find their tiles and start their first weight loads before they wait for
  // the previous kernel (decode_gemm.h, DecodeSpec). Ignored unless route_pairs <= max_rows.
  // Ids that disagree with expert_offsets give wrong results, as wrong offsets would.
  const int32_t* route_ids = nullptr;
  int route_pairs = 0;
  int route_expert_start = 0;
  // Optional, with route_ids: ids written inside the chain (the GPU router's: route_kimi, the
  // chain's first kernel). The fused prologue, which runs after it and has waited for it, sets
  // this flag (release) before it lets its dependents launch (smxx/prologue.cu); the decode
  // GEMMs read the ids only after an acquire load sees it set.
  const int* route_ids_ready = nullptr;
  // GEMM1 is offered its own inputs (Gemm1Params::own). Set for both launches of a chain so the
  // decode rule (decode_gemm.h, kDecodeOwnMinRows) gives GEMM2 the ids exactly where GEMM1 runs
  // on them; it moves no data.
  bool gemm1_own_offered = false;
};
// The row count the heuristics see: the hint (0: none), capped by the bound. The glue asks it
// before it builds the problem (run.cpp, the ids' ready flag), the kernels of the problem.
inline int choice_rows(int rows_hint, int max_rows) {
  return rows_hint > 0 && rows_hint < max_rows ? rows_hint : max_rows;
}
inline int choice_rows(const GroupedProblem& g) { return choice_rows(g.rows_hint, g.max_rows); }
// kGemmAuto: the decode kernel (decode_gemm.h) for 16-token tiles, the tiled kernel otherwise.
enum GemmKernel : int { kGemmAuto = 0, kGemmTiled = 1, kGemmDecode = 2 };

// h[p, :] = Q(situ_glu(W1_e . x_p, W3_e . x_p)) for every sorted pair row p of expert e, where
// x_p = x + x_row[p] * x_stride (BF16, already MX-quantized for W4A8: MXFP8 values are exact in
// BF16) and Q rounds to BF16, or with mxfp8_out quantizes each 32-block of the row to MXFP8 (MX
// scale rule, RNE) and stores the exact values as BF16.
// What a GEMM1 launch counted into Gemm1Params::h_ready (cap 0: nothing), for the GEMM2 after it
// (Gemm2Params::after_gemm1), which checks that it describes its own problem.
struct CountedGemm1 {
  int cap = 0;  // the warp-specialized kernel's token-tile cap, 0 when GEMM1 did not count
  const int32_t* h_ready = nullptr;
  const int32_t* expert_offsets = nullptr;
  int num_experts = 0, I = 0;
};

// What GEMM1 may read in place of the glue's outputs, all written before the launch's chain
// began: the caller's BF16 rows (pair i of the route_ids reads row i / top_k; W4A16 only, where
// the glue copies them bit for bit) and the SiTU parameters (the glue's rule: per_expert_* by
// GLOBAL id when given, else the scalar). Used only by the decode kernel on the bulk ring under
// MXMOE_DECODE_SPEC's kDecodeSpecOwnInputs (decode_gemm.h), with GroupedProblem::route_ids; x
// null: never. (Also the kernel's own view of them: DecodeSpec::own.)
struct Gemm1OwnInputs {
  const __nv_bfloat16* x = nullptr;  // 16-byte aligned, x_stride a multiple of 8 elements
  int64_t x_stride = 0;
  int top_k = 0;
  const float* per_expert_beta = nullptr;  // [global experts], or null: beta
  const float* per_expert_linear_beta = nullptr;
  float beta = 0.0f, linear_beta = 0.0f;
};
// Whether the decode kernel's bulk copies can read o's rows for a GEMM1 of reduction length K
// (16-byte aligned rows of at least K elements, a top-k). The caller offers own inputs
// (GroupedProblem::gemm1_own_offered) only where this holds, so that both GEMMs' rule sees an
// offer GEMM1 can take.
inline bool gemm1_own_usable(const Gemm1OwnInputs& o, int64_t K) {
  return o.x != nullptr && (reinterpret_cast<uintptr_t>(o.x) & 15u) == 0 && o.x_stride >= K &&
         o.x_stride % 8 == 0 && o.top_k >= 1;
}

struct Gemm1Params {
  const uint8_t* w_packed = nullptr;  // num_experts prepacked w13 [2I, K]
  const uint8_t* w_scales = nullptr;
  int I = 0, K = 0;
  const __nv_bfloat16* x = nullptr;
  int64_t x_stride = 0;                // elements
  const int32_t* x_row = nullptr;      // device [max_rows]
  const float* beta = nullptr;         // device [num_experts]
  const float* linear_beta = nullptr;  // device [num_experts]
  bool mxfp8_out = false;
  __nv_bfloat16* h = nullptr;  // device [max_rows, I]
  // Every w_scales byte <= 128 (mxfp4_scales_small): promised by the caller, not checked on the
  // device (a false promise gives wrong results); false is always correct.
  bool small_scales = false;
  // Optional, device [num_experts], all zero when GEMM1 starts (an earlier kernel of the stream
  // wrote them): the warp-specialized kernel counts there each expert's finished 64-row tiles of
  // h (launch_gemm1 reports whether it did), so the GEMM2 launched right after it on the same
  // stream, for the same GroupedProblem, can start on the experts that are done while GEMM1's
  // last tiles still run (Gemm2Params::h_ready).
  int32_t* h_ready = nullptr;
  Gemm1OwnInputs own;  // optional (x null: none)
  GroupedProblem g;
};

// y[p, :] = row_weight[p] * (W2_e . h_p), fp32. With out_token, a row p whose out_token[p] is
// t >= 0 goes to out[t, :] instead, as the combine would have written it (+0 + y: -0 becomes
// +0; smxx/gemm2_store.cuh), and y's row p is not written; the caller's combine then skips t.
struct Gemm2Params {
  const uint8_t* w_packed = nullptr;  // num_experts prepacked w2 [H, I]
  const uint8_t* w_scales = nullptr;
  int H = 0, I = 0;
  const __nv_bfloat16* h = nullptr;    // device [max_rows, I]
  const float* row_weight = nullptr;   // device [max_rows]
  float* y = nullptr;                  // device [max_rows, H]
  const int32_t* out_token = nullptr;  // device [max_rows], or null: every row to y
  // With out_token, optional: [num_experts], nonzero when any of the expert's rows goes to out
  // (the grouping's expert_has_out); lets the warp-specialized kernel keep its plain epilogue
  // for the other experts' tiles. Null: every tile takes the out-capable epilogue.
  const int32_t* expert_has_out = nullptr;
  float* out = nullptr;       // 16-byte aligned, rows of out_stride (a multiple of 4,
  int64_t out_stride = 0;     // >= H, < 2^31) floats; needed only with out_token
  bool small_scales = false;  // as in Gemm1Params
  // What launch_gemm1 reported for the GEMM1 this launch directly follows on the same stream
  // (CountedGemm1): GEMM2 waits per expert on its counters only when they were counted (cap > 0)
  // for this problem (the same experts, expert_offsets and I) at the cap GEMM2 runs at, and
  // otherwise for all of GEMM1, as without counters.
  CountedGemm1 after_gemm1;
  GroupedProblem g;
};

// num_sms: the device's multiprocessor count (read once by the runtime, not per call).
// Both return cudaErrorInvalidValue, launching nothing, for bad shapes (rows or k not multiples of
// 64, I % 32 for GEMM1), null or not 16-byte aligned pointers (w_packed, x, h, y; out when
// out_token is given, with out_stride < H, >= 2^31 or not a multiple of 4), x_stride < K or not a
// multiple of 8, or a bad tile_n; cudaSuccess with no launch when max_rows or num_experts
// is 0; otherwise the launch's cudaGetLastError(). Rows outside [0, max_rows) are never touched.
// counted (optional): what GEMM1 counted into p.h_ready; cap 0 when it did not (other kernels, no
// counters, a GEMM2 that would not use them, or MXMOE_SM90_WS_OVERLAP=0).
cudaError_t launch_gemm1(const Gemm1Params& p, int num_sms, cudaStream_t stream,
                         CountedGemm1* counted = nullptr);
cudaError_t launch_gemm2(const Gemm2Params& p, int num_sms, cudaStream_t stream);

// On by default (bench/NOTES.md P round 23, measured in the twenty-ninth session): launches of
// the warp-specialized kernels with small_scales take instantiations compiled without the
// per-fragment big-scale test (grouped_gemm_ws_kernel.cuh kSmall; sm90 expand_fragment's
// kSmallOnly). End to end on the H200: EP16 T=4096 723.1 -> 685.1 us, T=16384 1879.8 -> 1838.1;
// TP8xEP4 T=16384 1497.8 -> 1463.6. Same values bit for bit. MXMOE_SM90_WS_SMALL=0 starts the
// process with it off (A/B timings); ws_set_small for tests.
void ws_set_small(bool on);
bool ws_small();

}  // namespace mxmoe::sm90
