// src/cuda/sm90/grouped_gemm.cu: host launchers of the SM90 grouped MoE GEMMs
// (grouped_gemm.h): argument checks, tile-width dispatch, persistent grid sizing.
//
// Nothing here reads device memory or synchronizes, so the launches can be captured in a CUDA
// graph: the grid is sized from host-known bounds (max_rows, num_experts, the occupancy of the
// kernel), and CTAs with no tile exit at once.
// Limitations: num_experts <= kMaxExperts (the per-CTA tile prefix lives in shared memory).
#include "sm90/grouped_gemm.h"
#include "sm90/decode_gemm.h"
#include "sm90/grouped_gemm_kernel.cuh"
#include "sm90/tile_heuristic.h"

namespace mxmoe::sm90 {
namespace {

constexpr int kMaxExperts = 16384;

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

template <int BN, bool kGemm1>
cudaError_t launch_tiles(const KernelArgs& a, int num_sms, cudaStream_t stream) {
  auto* kernel = grouped_gemm_kernel<BN, kGemm1>;
  const size_t smem = kernel_smem_bytes(BN, a.num_experts);
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (err != cudaSuccess) return err;
  int per_sm = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarpgroup, smem);
  if (err != cudaSuccess) return err;
  if (per_sm < 1) return cudaErrorInvalidConfiguration;
  // Upper bound on the tiles any routing can produce: each expert adds at most one partial
  // token tile beyond max_rows / BN.
  const int64_t m_tiles = a.M / kTileM;
  const int64_t bound = ((a.max_rows + BN - 1) / BN + a.num_experts) * m_tiles;
  const int64_t grid = std::min<int64_t>(static_cast<int64_t>(num_sms) * per_sm, bound);
  if (grid < 1) return cudaSuccess;
  kernel<<<static_cast<unsigned>(grid), kWarpgroup, smem, stream>>>(a);
  return cudaGetLastError();
}

template <bool kGemm1>
cudaError_t dispatch(const KernelArgs& a, int tile_n, int num_sms, cudaStream_t stream) {
  const int bn = tile_n != 0 ? tile_n : choose_tile_n(a.max_rows, a.num_experts);
  switch (bn) {
    case 16: return launch_tiles<16, kGemm1>(a, num_sms, stream);
    case 32: return launch_tiles<32, kGemm1>(a, num_sms, stream);
    case 64: return launch_tiles<64, kGemm1>(a, num_sms, stream);
    case 128: return launch_tiles<128, kGemm1>(a, num_sms, stream);
    default: return cudaErrorInvalidValue;
  }
}

bool problem_ok(const GroupedProblem& g, int num_sms) {
  return g.num_experts >= 0 && g.num_experts <= kMaxExperts && g.max_rows >= 0 &&
         (g.num_experts == 0 || g.expert_offsets != nullptr) && num_sms > 0 &&
         (g.tile_n == 0 || valid_tile_n(g.tile_n));
}

}  // namespace

cudaError_t launch_gemm1(const Gemm1Params& p, int num_sms, cudaStream_t stream) {
  if (!problem_ok(p.g, num_sms) || p.I <= 0 || p.I % 32 != 0 || p.K <= 0 || p.K % kStepK != 0 ||
      p.x_stride < p.K || p.x_stride % 8 != 0) {
    return cudaErrorInvalidValue;
  }
  if (p.g.num_experts == 0 || p.g.max_rows == 0) return cudaSuccess;
  if (!p.w_packed || !p.w_scales || !p.x || !p.x_row || !p.beta || !p.linear_beta || !p.h ||
      !aligned16(p.w_packed) || !aligned16(p.x) || !aligned16(p.h)) {
    return cudaErrorInvalidValue;
  }
  KernelArgs a{};
  a.w_packed = p.w_packed;
  a.w_scales = p.w_scales;
  a.M = 2 * p.I;
  a.K = p.K;
  a.act = p.x;
  a.act_stride = p.x_stride;
  a.act_row = p.x_row;
  a.beta = p.beta;
  a.linear_beta = p.linear_beta;
  a.mxfp8_out = p.mxfp8_out ? 1 : 0;
  a.h = p.h;
  a.offsets = p.g.expert_offsets;
  a.num_experts = p.g.num_experts;
  a.max_rows = p.g.max_rows;
  if (cudaError_t e; try_launch_decode_gemm<true>(a, p.g, num_sms, stream, &e)) return e;
  return dispatch<true>(a, p.g.tile_n, num_sms, stream);
}

cudaError_t launch_gemm2(const Gemm2Params& p, int num_sms, cudaStream_t stream) {
  if (!problem_ok(p.g, num_sms) || p.H <= 0 || p.H % kTileM != 0 || p.I <= 0 ||
      p.I % kStepK != 0) {
    return cudaErrorInvalidValue;
  }
  if (p.g.num_experts == 0 || p.g.max_rows == 0) return cudaSuccess;
  if (!p.w_packed || !p.w_scales || !p.h || !p.row_weight || !p.y || !aligned16(p.w_packed) ||
      !aligned16(p.h) || !aligned16(p.y)) {
    return cudaErrorInvalidValue;
  }
  KernelArgs a{};
  a.w_packed = p.w_packed;
  a.w_scales = p.w_scales;
  a.M = p.H;
  a.K = p.I;
  a.act = p.h;
  a.act_stride = p.I;
  a.act_row = nullptr;
  a.row_weight = p.row_weight;
  a.y = p.y;
  a.offsets = p.g.expert_offsets;
  a.num_experts = p.g.num_experts;
  a.max_rows = p.g.max_rows;
  if (cudaError_t e; try_launch_decode_gemm<false>(a, p.g, num_sms, stream, &e)) return e;
  return dispatch<false>(a, p.g.tile_n, num_sms, stream);
}

}  // namespace mxmoe::sm90
