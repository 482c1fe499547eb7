// python/csrc/checks.cpp: tensors -> mxmoe views, with the checks of checks.h.
#include "checks.h"

namespace mxmoe_torch {

mxmoe::Mxfp4View StackedMxfp4::view(int e) const {
  mxmoe::Mxfp4View v;
  v.rows = rows;
  v.k = k;
  v.packed = packed.data_ptr<uint8_t>() + static_cast<size_t>(e) * v.packed_bytes();
  v.scales = scales.data_ptr<uint8_t>() + static_cast<size_t>(e) * v.scale_bytes();
  return v;
}

StackedMxfp4 stacked_mxfp4(const at::Tensor& packed, const at::Tensor& scales, int64_t experts,
                           const char* op, const char* name) {
  const std::string pn = std::string(name) + "_packed", sn = std::string(name) + "_scale";
  check_dtype(packed, at::kByte, op, pn.c_str());
  check_dtype(scales, at::kByte, op, sn.c_str());
  MXMOE_CHECK(packed.dim() == 3, op, pn, " must be [experts, rows, k/2], got ", shape_str(packed));
  const int64_t rows = packed.size(1), k = packed.size(2) * 2;
  MXMOE_CHECK(k % 32 == 0, op, pn, ": k = ", k, " is not a multiple of 32 (the MX block)");
  check_shape(packed, {experts, rows, k / 2}, op, pn.c_str());
  check_shape(scales, {experts, rows, k / 32}, op, sn.c_str());
  StackedMxfp4 s;
  // Weights are read once per call by the reference (or once at prepare time), so a copy to a
  // contiguous CPU tensor costs little next to the work and lets callers pass any view.
  s.packed = packed.to(at::kCPU).contiguous();
  s.scales = scales.to(at::kCPU).contiguous();
  s.rows = static_cast<int>(rows);
  s.k = static_cast<int>(k);
  return s;
}

StackedExperts stacked_experts(const at::Tensor& w1p, const at::Tensor& w1s, const at::Tensor& w3p,
                               const at::Tensor& w3s, const at::Tensor& w2p, const at::Tensor& w2s,
                               const char* op) {
  MXMOE_CHECK(w1p.dim() == 3, op, "w1_packed must be [experts, I, H/2], got ", shape_str(w1p));
  StackedExperts ex;
  const int64_t E = w1p.size(0);
  MXMOE_CHECK(E >= 1, op, "no experts (w1_packed is ", shape_str(w1p), ")");
  ex.w1 = stacked_mxfp4(w1p, w1s, E, op, "w1");
  ex.w3 = stacked_mxfp4(w3p, w3s, E, op, "w3");
  ex.w2 = stacked_mxfp4(w2p, w2s, E, op, "w2");
  MXMOE_CHECK(ex.w3.rows == ex.w1.rows && ex.w3.k == ex.w1.k, op, "w3 is ", shape_str(w3p),
              " but w1 is ", shape_str(w1p));
  MXMOE_CHECK(ex.w2.rows == ex.w1.k && ex.w2.k == ex.w1.rows, op, "w2_packed ", shape_str(w2p),
              " does not match w1 (expected [", E, ", ", ex.w1.k, ", ", ex.w1.rows / 2, "])");
  ex.num_experts = static_cast<int>(E);
  ex.hidden = ex.w1.k;
  ex.intermediate = ex.w1.rows;
  return ex;
}

mxmoe::MoeLayer layer_from_stacked(const StackedExperts& ex) {
  mxmoe::MoeLayer layer;
  layer.cfg.num_experts = ex.num_experts;
  layer.cfg.routed_expert_hidden_size = ex.hidden;
  layer.cfg.moe_intermediate_size = ex.intermediate;
  layer.experts.resize(static_cast<size_t>(ex.num_experts));
  for (int e = 0; e < ex.num_experts; ++e)
    layer.experts[e] = mxmoe::ExpertView{ex.w1.view(e), ex.w3.view(e), ex.w2.view(e)};
  return layer;
}

mxmoe::Bf16View bf16_view(const at::Tensor& t, int64_t rows, int64_t cols, const char* op,
                          const char* name, at::Tensor* keep) {
  check_dtype(t, at::kBFloat16, op, name);
  check_cpu(t, op, name);
  check_shape(t, {rows, cols}, op, name);
  *keep = t.contiguous();
  mxmoe::Bf16View v;
  v.data = reinterpret_cast<const uint16_t*>(keep->data_ptr<at::BFloat16>());
  v.rows = static_cast<int>(rows);
  v.cols = static_cast<int>(cols);
  return v;
}

const float* per_expert_array(const c10::optional<at::Tensor>& t, int64_t E, bool on_cuda,
                              const char* op, const char* name, at::Tensor* keep) {
  if (!t.has_value()) return nullptr;
  check_dtype(*t, at::kFloat, op, name);
  check_shape(*t, {E}, op, name);
  MXMOE_CHECK(t->device().is_cuda() == on_cuda, op, name, " must be on ",
              on_cuda ? "the CUDA device of the weights" : "the CPU", ", got ", t->device().str());
  *keep = t->contiguous();
  return keep->data_ptr<float>();
}

}  // namespace mxmoe_torch
