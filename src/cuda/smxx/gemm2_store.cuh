// src/cuda/smxx/gemm2_store.cuh: the GEMM2 epilogues' routing-weight product (device), shared by
// every SM90 GEMM2 kernel (tiled, decode, FP8) so their outputs stay bit-identical to each other.
#pragma once

namespace mxmoe::smxx {

// w * staged[0..3] in fp32: one 16-byte piece of y = routing weight x accumulator, read from the
// epilogue's staging (16-byte aligned). Callers store it with one 16-byte store.
__device__ __forceinline__ float4 weighted4(const float* staged, float w) {
  float4 v = *reinterpret_cast<const float4*>(staged);
  v.x *= w;
  v.y *= w;
  v.z *= w;
  v.w *= w;
  return v;
}

}  // namespace mxmoe::smxx
