// python/csrc/checks.h: input checks shared by the mxmoe torch ops, and the bridge from torch
// tensors to mxmoe's torch-free views (Mxfp4View, Bf16View, MoeLayer).
//
// Every check throws a c10::Error (Python: RuntimeError) whose one-line message names the op and
// the argument: "mxmoe::moe_experts: topk_ids must be int32, got Long".
// Views never copy: the tensors must outlive the MoeLayer built from them (the ops keep them
// alive for the duration of the call).
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "mxmoe/moe_layer.h"

namespace mxmoe_torch {

// "mxmoe::<op>: <what>" for every message.
#define MXMOE_CHECK(cond, op, ...) TORCH_CHECK((cond), "mxmoe::", op, ": ", __VA_ARGS__)

inline std::string shape_str(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

inline void check_dtype(const at::Tensor& t, at::ScalarType want, const char* op,
                        const char* name) {
  MXMOE_CHECK(t.scalar_type() == want, op, name, " must be ", c10::toString(want), ", got ",
              c10::toString(t.scalar_type()));
}

inline void check_shape(const at::Tensor& t, std::vector<int64_t> want, const char* op,
                        const char* name) {
  bool ok = t.dim() == static_cast<int64_t>(want.size());
  for (size_t i = 0; ok && i < want.size(); ++i) ok = t.size(static_cast<int64_t>(i)) == want[i];
  std::string w = "[";
  for (size_t i = 0; i < want.size(); ++i) w += (i ? ", " : "") + std::to_string(want[i]);
  MXMOE_CHECK(ok, op, name, " must be ", w, "], got ", shape_str(t));
}

inline void check_cpu(const at::Tensor& t, const char* op, const char* name) {
  MXMOE_CHECK(t.device().is_cpu(), op, name, " must be a CPU tensor, got ", t.device().str());
}

// Rows of a 2-D tensor may be strided (chunked prefill hands over views) but each row must be
// dense: the kernels and the reference read a row as consecutive elements.
inline void check_rows_dense(const at::Tensor& t, const char* op, const char* name) {
  MXMOE_CHECK(t.dim() == 2, op, name, " must be 2-D, got ", shape_str(t));
  MXMOE_CHECK(t.size(1) <= 1 || t.stride(1) == 1, op, name,
              " rows must be contiguous (stride(1) == 1), got strides [", t.stride(0), ", ",
              t.stride(1), "]");
  MXMOE_CHECK(t.size(0) <= 1 || t.stride(0) >= t.size(1), op, name, " row stride ", t.stride(0),
              " is smaller than its width ", t.size(1));
}

// The stacked MXFP4 weights of E experts: packed [E, rows, k/2] and scales [E, rows, k/32], U8.
struct StackedMxfp4 {
  at::Tensor packed, scales;  // contiguous CPU copies (or the originals when already so)
  int rows = 0, k = 0;
  mxmoe::Mxfp4View view(int e) const;
};
StackedMxfp4 stacked_mxfp4(const at::Tensor& packed, const at::Tensor& scales, int64_t experts,
                           const char* op, const char* name);

// The routed experts of a layer from stacked tensors (w1 = gate [E, I, H/2], w3 = up,
// w2 = down [E, H, I/2], scales alongside), expert e of the stack = global expert e.
struct StackedExperts {
  StackedMxfp4 w1, w3, w2;
  int num_experts = 0, hidden = 0, intermediate = 0;
};
StackedExperts stacked_experts(const at::Tensor& w1p, const at::Tensor& w1s, const at::Tensor& w3p,
                               const at::Tensor& w3s, const at::Tensor& w2p, const at::Tensor& w2s,
                               const char* op);
// A MoeLayer over those views (config widths from the tensors; other config fields default).
mxmoe::MoeLayer layer_from_stacked(const StackedExperts& ex);

// A BF16 CPU matrix [rows, cols] as a view; `t` is made contiguous into `keep`.
mxmoe::Bf16View bf16_view(const at::Tensor& t, int64_t rows, int64_t cols, const char* op,
                          const char* name, at::Tensor* keep);

// An optional per-expert fp32 array [E]: nullptr when absent; checked device and length.
const float* per_expert_array(const c10::optional<at::Tensor>& t, int64_t E, bool on_cuda,
                              const char* op, const char* name, at::Tensor* keep);

}  // namespace mxmoe_torch
