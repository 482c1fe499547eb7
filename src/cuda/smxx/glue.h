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
//              pair list ordered by (expert, token, slot).
//   combine  : out[t] = sum over j in order of y[pair_pos[t*k + j]] (skipping -1), fp32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mxmoe::smxx {

// ---- quantize.cu ----
cudaError_t launch_quantize_input(const void* x, bool x_is_f32, int64_t x_stride, int T, int H,
                                  bool mxfp8, __nv_bfloat16* xq, cudaStream_t stream);

// ---- route.cu ----
// E <= kRouteMaxExperts (shared-memory bound), 1 <= k <= min(E, 64).
constexpr int kRouteMaxExperts = 6144;
cudaError_t launch_route_kimi(const float* logits, int64_t logits_stride, const float* bias,
                              int T, int E, int k, bool renormalize, float scaling,
                              int32_t* ids, float* weights, cudaStream_t stream);

// ---- group.cu ----
// Pairs are cut into chunks of kGroupChunk; scratch holds one count per (chunk, local expert).
constexpr int kGroupChunk = 1024;
inline int group_num_chunks(int pairs) { return (pairs + kGroupChunk - 1) / kGroupChunk; }
inline size_t group_scratch_ints(int pairs, int local_experts) {
  return static_cast<size_t>(group_num_chunks(pairs)) * local_experts;
}
struct GroupArgs {
  const int32_t* ids = nullptr;     // [T, k] global ids; -1, or outside the range: not owned
  const float* weights = nullptr;   // [T, k]
  int T = 0, k = 0;
  int expert_start = 0, expert_count = 0;
  int32_t* scratch = nullptr;         // [group_scratch_ints]
  int32_t* expert_offsets = nullptr;  // [expert_count + 1]
  int32_t* x_row = nullptr;           // [T*k] token of sorted row p (rows < offsets[E] valid)
  float* row_weight = nullptr;        // [T*k]
  int32_t* pair_pos = nullptr;        // [T*k] sorted row of pair t*k+j, or -1
};
// Returns the first failing launch; *failed_kernel names it.
cudaError_t launch_group(const GroupArgs& a, cudaStream_t stream, const char** failed_kernel);

// ---- combine.cu ----
cudaError_t launch_combine(const float* y, int H, const int32_t* pair_pos, int T, int k,
                           float* out, int64_t out_stride, cudaStream_t stream);

// Local SiTU parameters: dst[i] = per_expert ? per_expert[start + i] : scalar, i < count.
cudaError_t launch_fill_params(const float* per_expert, float scalar, int start, int count,
                               float* dst, cudaStream_t stream);

}  // namespace mxmoe::smxx
