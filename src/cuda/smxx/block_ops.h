// src/cuda/smxx/block_ops.h: small kernels of the whole-block GPU path (internal); see
// block_ops.cu for the rounding points. BF16 tensors are raw uint16_t bits.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mxmoe::smxx {

// logits [T, E] fp32 = x [T, D] . wg[E, D]^T, fp64 accumulation.
cudaError_t launch_router_logits(const uint16_t* x, const uint16_t* wg, int T, int E, int D,
                                 float* logits, cudaStream_t stream);
// out [T, L] BF16 = RMSNorm(r) * w (or BF16(r) when !use_norm).
cudaError_t launch_rmsnorm_bf16(const float* r, const uint16_t* w, int T, int L, double eps,
                                bool use_norm, uint16_t* out, cudaStream_t stream);
// h = BF16(situ_glu(g, u)) elementwise.
cudaError_t launch_situ_bf16(const float* g, const float* u, size_t n, float beta, float lbeta,
                             uint16_t* h, cudaStream_t stream);
// out += b elementwise.
cudaError_t launch_add(float* out, const float* b, size_t n, cudaStream_t stream);

}  // namespace mxmoe::smxx
