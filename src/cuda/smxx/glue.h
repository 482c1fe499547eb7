// src/cuda/smxx/glue.h: the arch-neutral "glue" kernels around the grouped GEMMs (internal).
//
// Each launcher enqueues on `stream`, reads no device data on the host and returns the launch's
// cudaError_t (the runtime turns it into a Status naming the kernel). All of them are
// deterministic: no floating-point atomics, fixed reduction orders.
//
//   quantize : strided x [T, H] (BF16 or fp32) -> contiguous BF16 [T, H]: BF16 rounding (w4a16)
//              or MXFP8 per 32 along H, stored as the exact dequantized value (w4a8).
//   route    : Kimi routing on logits [T, E]: sigmoid, top-k of s + bias (value desc, id asc),
//              weights = s / sum(chosen s) * scaling.
//   group    : the EP filter and a stable counting sort of the T*k pairs by local expert, i.e. the
//              pair list ordered by (expert, token, slot); and the local SiTU parameters.
//   combine  : out[t] = sum over j in order of y[pair_pos[t*k + j]] (skipping -1), fp32; tokens
//              with one owned pair can be left to GEMM2 (group's out_token).
//   prologue : quantize + [route] + group (+ SiTU parameters) fused in one launch for decode sizes,
//              bit-identical outputs.
// Every kernel is launched with PDL (smxx/pdl.cuh) and waits for its predecessor first.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mxmoe/common.h"  // MXMOE_HD

namespace mxmoe::smxx {

// ---- quantize.cu ----
cudaError_t launch_quantize_input(const void* x, bool x_is_f32, int64_t x_stride, int T, int H,
                                  bool mxfp8, __nv_bfloat16* xq, cudaStream_t stream);

// ---- route.cu ----
// E <= kRouteMaxExperts (shared-memory bound), 1 <= k <= min(E, 64).
constexpr int kRouteMaxExperts = 6144;
// Experts up to which route_warp.cuh keeps the keys in registers (32 per lane, two redux.sync per
// round) instead of shared memory: at most kRouteRegMax; kRouteRegExperts = 0 turns it off.
// GpuRoute.RegisterKeysMatchSharedMemoryKeysBitForBit checks the two versions agree bit for bit
// (the shared-memory one is also checked against route_kimi); bench/NOTES.md G has the timings.
constexpr int kRouteRegMax = 1024;
constexpr int kRouteRegExperts = kRouteRegMax;
// The register version's threshold select (route_warp.cuh, route_select_warp) ranks at most
// kRouteSelectMax candidates in a per-warp scratch of kRouteSelectWords 32-bit words (8-byte
// aligned): the candidates' 64-bit rank words (key, ~id), then the k <= 32 slot ids.
constexpr int kRouteSelectMax = 64;
constexpr int kRouteSelectWords = 2 * kRouteSelectMax + 32;
// Whether the router keeps E experts' keys in registers (route_warp.cuh's register version).
MXMOE_HD bool route_keys_in_registers(int E, int reg_experts = kRouteRegExperts) {
  return E <= reg_experts && E <= kRouteRegMax;
}
// The per-warp scratch words the router needs for E experts: E keys (shared-memory version) or
// the select's words (register version); even, so consecutive warps' scratch stays 8-byte aligned.
MXMOE_HD int route_scratch_words(int E, int reg_experts = kRouteRegExperts) {
  const int words = route_keys_in_registers(E, reg_experts) ? kRouteSelectWords : E;
  return (words + 1) & ~1;
}
// Up to kRouteWideTokens tokens (register keys), each token is routed by a CTA of
// kRouteWideWarps warps instead of one warp (route.cu says why and where the bound comes from).
constexpr int kRouteWideTokens = 256;
constexpr int kRouteWideWarps = 8;
// reg_experts: tests force the register version (kRouteRegMax) or the shared-memory one (0);
// wide_tokens = 0 forces one warp per token, a large one the wide CTAs (they pick the same bits).
cudaError_t launch_route_kimi(const float* logits, int64_t logits_stride, const float* bias, int T,
                              int E, int k, bool renormalize, float scaling, int32_t* ids,
                              float* weights, cudaStream_t stream,
                              int reg_experts = kRouteRegExperts,
                              int wide_tokens = kRouteWideTokens);

// ---- group.cu ----
// Pairs are cut into chunks of kGroupChunk; scratch holds one count per (chunk, local expert).
constexpr int kGroupChunk = 1024;
inline int group_num_chunks(int pairs) { return (pairs + kGroupChunk - 1) / kGroupChunk; }
inline size_t group_scratch_ints(int pairs, int local_experts) {
  return static_cast<size_t>(group_num_chunks(pairs)) * local_experts;
}
// The local SiTU parameters and the GEMMs' counters, written by the glue before GEMM1 (group's
// scan, the prologue; smxx/situ_fill.cuh), i < expert_count: beta_out[i] = per_expert_beta ?
// per_expert_beta[expert_start + i] : beta, the same for linear_beta; h_ready (optional,
// [expert_count]: Gemm1Params::h_ready) zeroed.
struct SituFill {
  const float* per_expert_beta = nullptr;
  float beta = 0.0f;
  const float* per_expert_linear_beta = nullptr;
  float linear_beta = 0.0f;
  float* beta_out = nullptr;
  float* linear_beta_out = nullptr;
  int32_t* h_ready = nullptr;
};
struct GroupArgs {
  const int32_t* ids = nullptr;    // [T, k] global ids; -1, or outside the range: not owned
  const float* weights = nullptr;  // [T, k]
  int T = 0, k = 0;
  int expert_start = 0, expert_count = 0;
  int32_t* scratch = nullptr;         // [group_scratch_ints]
  int32_t* expert_offsets = nullptr;  // [expert_count + 1]
  int32_t* x_row = nullptr;           // [T*k] token of sorted row p (rows < offsets[E] valid)
  float* row_weight = nullptr;        // [T*k]
  int32_t* pair_pos = nullptr;        // [T*k] sorted row of pair t*k+j, or -1
  int32_t* out_token = nullptr;       // null, or [T*k]: token of row p if it owns no other pair,
                                      // else -1 (GEMM2 writes such tokens' out rows itself)
  int32_t* expert_has_out = nullptr;  // with out_token: [expert_count], 1 if any of the
                                      // expert's rows has out_token >= 0, else 0
  // Written by the scan kernel when situ.beta_out is given (one launch fewer than a kernel of
  // their own).
  SituFill situ;
};
// Returns the first failing launch; *failed_kernel names it.
cudaError_t launch_group(const GroupArgs& a, cudaStream_t stream, const char** failed_kernel);

// ---- combine.cu ----
// skip_single: tokens that own exactly one pair are left alone (GEMM2 wrote their out rows).
cudaError_t launch_combine(const float* y, int H, const int32_t* pair_pos, int T, int k, float* out,
                           int64_t out_stride, bool skip_single, cudaStream_t stream);

// ---- prologue.cu: quantize + group + the SiTU fill in one launch (decode sizes) ----
constexpr int kPrologueMaxPairs = 4096;
struct PrologueShape {
  bool ok = false;           // false: the sizes do not fit; use the separate kernels
  int chunks = 0;            // grouping chunks (warps of the grouping CTA)
  bool route_first = false;  // GPU routing: launch_route_kimi first, then the prologue on its
                             // ids / weights
  int quant_ctas = 0;        // CTAs quantizing rows, besides the grouping CTA
  size_t smem_bytes = 0;     // dynamic shared memory of a CTA (<= 48 KB)
};
// Decided on the host from sizes only (graph-capturable): T * k <= kPrologueMaxPairs and the
// grouping counters fit 48 KB of shared memory; routing (the GPU router) needs
// 0 < k <= num_experts_total.
PrologueShape prologue_plan(int T, int k, int num_experts_total, int expert_count, bool routing);
struct PrologueArgs {
  // quantize (as launch_quantize_input)
  const void* x = nullptr;
  bool x_is_f32 = false;
  int64_t x_stride = 0;
  int H = 0;
  bool mxfp8 = false;
  uint16_t* xq = nullptr;  // [T, H] BF16 bits
  // Set by launch_prologue from the shape's route_first: launch_route_kimi ran before this
  // launch in the same chain, so this one is not the chain's first and its quantize CTAs skip
  // the wait (smxx/pdl.cuh: such a kernel starts only once everything before the chain has
  // completed).
  bool rows_before_wait = false;
  // the picks: the caller's, or launch_route_kimi's (route_first)
  const int32_t* ids = nullptr;
  const float* weights = nullptr;
  int T = 0, k = 0;
  // grouping (as GroupArgs; no scratch)
  int expert_start = 0, expert_count = 0;
  int32_t* expert_offsets = nullptr;
  int32_t* x_row = nullptr;
  float* row_weight = nullptr;
  int32_t* pair_pos = nullptr;
  int32_t* out_token = nullptr;
  int32_t* expert_has_out = nullptr;
  SituFill situ;  // beta_out and linear_beta_out required
  // Optional: the ids' ready flag for decode GEMMs that read them while this kernel runs
  // (sm90/grouped_gemm.h, GroupedProblem::route_ids_ready): CTA 0 sets it to 1 (release) before
  // the dependents may launch; the ids were final before this kernel.
  int32_t* ids_ready = nullptr;
  // set by launch_prologue from the shape
  int chunks = 0;
};
cudaError_t launch_prologue(const PrologueArgs& a, const PrologueShape& s, cudaStream_t stream);

// ---- diagnostics: MXMOE_DECODE_TIMELINE builds only (else cudaErrorNotSupported) ----
// The prologue's and the combine's per-CTA stamps on the decode GEMMs' clock (smxx/cta_timeline.h:
// entry, wait done, exit, SM id; the prologue's CTA 0 also kTlData when the ids are counted and
// kTlMath when the offsets are written), out = [CTA][kTlFields] for their first kGlueTimelineCtas
// CTAs (the combine's CTAs numbered blockIdx.y * gridDim.x + blockIdx.x), as the last launches left
// them; *_reset zeroes them on `stream` (before the launches to read).
constexpr int kGlueTimelineCtas = 256;
cudaError_t prologue_timeline_read(std::vector<uint64_t>* out);
cudaError_t prologue_timeline_reset(cudaStream_t stream);
cudaError_t combine_timeline_read(std::vector<uint64_t>* out);
cudaError_t combine_timeline_reset(cudaStream_t stream);

}  // namespace mxmoe::smxx
