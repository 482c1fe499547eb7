// src/cuda/smxx/gemm2_store.cuh: where and what the GEMM2 epilogues store (device), shared by
// every SM90 GEMM2 kernel (tiled, warp-specialized, decode, FP8) so their outputs stay
// bit-identical to each other.
//
// GEMM2 writes w * acc (routing weight x accumulator) for sorted pair row r. Normally that is
// y's row r, and the combine sums a token's rows in slot order: out = +0 + y_a + y_b + ...
// When the grouping marked the row's token as owning this one pair only (out_token[r] = t >= 0),
// the epilogue writes out's row t itself and the combine skips the token: at EP16 every token
// of the benchmark (and ~38% of a real EP16 rank's) has one local pair, and the combine's read
// of y and write of out (~470 MB at T = 16384) disappear (bench/NOTES.md G round 5).
// Bits: the combine's result for such a token is +0 + w * acc, which differs from w * acc only
// for -0 (-> +0). Both destinations therefore run one path, v = (w * acc) + bias with the
// products and sums never contracted (an FFMA would keep -0 for a product that underflows):
// bias = +0 for out (the combine's bits), -0 for y (x + -0 == x for every x, -0 included).
#pragma once

#include <cstdint>

namespace mxmoe::smxx {

// out_token[r], or -1 (y's row) when the caller gave no table.
__device__ __forceinline__ int gemm2_out_token(const int32_t* out_token, int64_t r) {
  return out_token != nullptr ? out_token[r] : -1;
}
// The fp32 row sorted row r is stored to: out's row ot, or y's row r.
__device__ __forceinline__ float* gemm2_row(float* y, int64_t y_pitch, float* out,
                                            int64_t out_stride, int ot, int64_t r) {
  return ot >= 0 ? out + static_cast<int64_t>(ot) * out_stride : y + r * y_pitch;
}
__device__ __forceinline__ float gemm2_bias(int ot) { return ot >= 0 ? 0.0f : -0.0f; }
__device__ __forceinline__ float gemm2_value(float acc, float w, float bias) {
  return __fadd_rn(__fmul_rn(acc, w), bias);
}

// One column of an out-capable epilogue's shared-memory table (tiled and warp-specialized
// kernels): routing weight, bias and the stored row's address, the four words of a 16-byte entry.
struct Gemm2Column {
  float w, bias;
  float* row;
};
__device__ __forceinline__ uint4 gemm2_column_entry(float w, int ot, float* row) {
  const uint64_t a = reinterpret_cast<uint64_t>(row);
  return make_uint4(__float_as_uint(w), __float_as_uint(gemm2_bias(ot)), static_cast<uint32_t>(a),
                    static_cast<uint32_t>(a >> 32));
}
__device__ __forceinline__ Gemm2Column gemm2_column(const uint4& e) {
  return {__uint_as_float(e.x), __uint_as_float(e.y),
          reinterpret_cast<float*>((static_cast<uint64_t>(e.w) << 32) | e.z)};
}

// One 16-byte piece of the stored row, read from the epilogue's staging (16-byte aligned).
// Callers store it with one 16-byte store.
__device__ __forceinline__ float4 weighted4(const float* staged, float w, float bias) {
  float4 v = *reinterpret_cast<const float4*>(staged);
  v.x = gemm2_value(v.x, w, bias);
  v.y = gemm2_value(v.y, w, bias);
  v.z = gemm2_value(v.z, w, bias);
  v.w = gemm2_value(v.w, w, bias);
  return v;
}

}  // namespace mxmoe::smxx
