// src/cuda/sm90/fp8_gemm.cu: host launchers of the SM90 FP8 grouped MoE GEMMs (fp8_gemm.h):
// argument checks, tile-width dispatch, persistent grid sizing, PDL launch.
//
// Nothing here reads device memory or synchronizes (graph-capturable): the grid comes from
// max_rows, num_experts and the kernel's occupancy. Function attributes and occupancy are looked
// up once per (device, kernel, smem size) and cached.
// Limitations: num_experts <= kMaxExperts (the tile prefix lives in shared memory).
#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "sm90/fp8_gemm.h"
#include "sm90/fp8_gemm_kernel.cuh"
#include "smxx/pdl.cuh"

namespace mxmoe::sm90 {
namespace {

constexpr int kMaxExperts = 8192;

// The token-tile width: the mean rows per expert picks the smallest tile that holds it (its own
// rule, independent of the BF16 kernels' tile_heuristic.h). Host-known bounds only.
bool fp8_valid_tile_n(int bn) { return bn == 16 || bn == 32 || bn == 64 || bn == 128; }
// Measured on the H200 (bench/NOTES.md, "F. W4A8 on FP8 wgmma"): BN = 64 beat 128 at every
// prefill size (EP16 T = 4096..16384, TP8xEP4 8192), with one or two warpgroups: two CTAs of 256
// threads per SM hide more latency than one CTA with the wider tile.
int fp8_choose_tile_n(int max_rows, int num_experts) {
  const int mean = num_experts > 0 ? (max_rows + num_experts - 1) / num_experts : max_rows;
  if (mean <= 16) return 16;
  if (mean <= 32) return 32;
  return 64;
}
// Two consumer warpgroups (128 weight rows per tile) whenever the rows allow: 1.10-1.15x one
// warpgroup at BN = 64 (measured, same note).
int fp8_choose_warpgroups(int M) { return M % (2 * fp8::kTileRows) == 0 ? 2 : 1; }

bool aligned(const void* ptr, uintptr_t a) { return (reinterpret_cast<uintptr_t>(ptr) % a) == 0; }

// CTAs per SM of kernel at smem bytes on the current device: cudaFuncSetAttribute (a per-device
// setting) + occupancy, once per (device, kernel, smem size).
cudaError_t blocks_per_sm(const void* kernel, size_t smem, int threads, int* per_sm) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  static std::mutex mu;
  static std::map<std::tuple<int, const void*, size_t>, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(device, kernel, smem);
  auto it = cache.find(key);
  if (it != cache.end()) {
    *per_sm = it->second;
    return cudaSuccess;
  }
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, kernel, threads, smem);
  if (err != cudaSuccess) return err;
  cache[key] = *per_sm;
  return cudaSuccess;
}

template <int BN, bool kGemm1, int WGS>
cudaError_t launch_tiles(const fp8::Args& a, int num_sms, cudaStream_t stream) {
  auto* kernel = fp8::fp8_grouped_gemm_kernel<BN, kGemm1, WGS>;
  const size_t smem = fp8::smem_bytes(BN, WGS, a.num_experts);
  int per_sm = 0;
  cudaError_t err =
      blocks_per_sm(reinterpret_cast<const void*>(kernel), smem, WGS * fp8::kWarpgroup, &per_sm);
  if (err != cudaSuccess) return err;
  if (per_sm < 1) return cudaErrorInvalidConfiguration;
  const int64_t m_tiles = a.M / (fp8::kTileRows * WGS);
  const int64_t bound = ((a.max_rows + BN - 1) / BN + a.num_experts) * m_tiles;
  const int64_t grid = std::min<int64_t>(static_cast<int64_t>(num_sms) * per_sm, bound);
  if (grid < 1) return cudaSuccess;
  err = pdl::launch_pdl(kernel, dim3(static_cast<unsigned>(grid)), dim3(WGS * fp8::kWarpgroup),
                        smem, stream, a);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

template <bool kGemm1, int WGS>
cudaError_t dispatch_bn(const fp8::Args& a, int bn, int num_sms, cudaStream_t stream) {
  switch (bn) {
    case 16:
      return launch_tiles<16, kGemm1, WGS>(a, num_sms, stream);
    case 32:
      return launch_tiles<32, kGemm1, WGS>(a, num_sms, stream);
    case 64:
      return launch_tiles<64, kGemm1, WGS>(a, num_sms, stream);
    case 128:
      return launch_tiles<128, kGemm1, WGS>(a, num_sms, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

template <bool kGemm1>
cudaError_t dispatch(const fp8::Args& a, int tile_n, int warpgroups, int num_sms,
                     cudaStream_t stream) {
  const int bn = tile_n != 0 ? tile_n : fp8_choose_tile_n(a.max_rows, a.num_experts);
  const int wgs = warpgroups != 0 ? warpgroups : fp8_choose_warpgroups(a.M);
  if (wgs == 2 && a.M % (2 * fp8::kTileRows) != 0) return cudaErrorInvalidValue;
  return wgs == 2 ? dispatch_bn<kGemm1, 2>(a, bn, num_sms, stream)
                  : dispatch_bn<kGemm1, 1>(a, bn, num_sms, stream);
}

bool problem_ok(const GroupedProblem& g, int num_sms) {
  return g.num_experts >= 0 && g.num_experts <= kMaxExperts && g.max_rows >= 0 &&
         (g.num_experts == 0 || g.expert_offsets != nullptr) && num_sms > 0 &&
         (g.tile_n == 0 || fp8_valid_tile_n(g.tile_n));
}
bool weights_ok(const Fp8WeightsView& w) {
  return w.w && w.row_exp && w.extra_begin && aligned(w.w, 16);
}

}  // namespace

cudaError_t launch_fp8_gemm1(const Fp8Gemm1Params& p, int num_sms, cudaStream_t stream) {
  if (!problem_ok(p.g, num_sms) || p.warpgroups < 0 || p.warpgroups > 2 || p.I <= 0 ||
      p.I % 32 != 0 || p.K <= 0 || p.K % fp8::kStepK != 0) {
    return cudaErrorInvalidValue;
  }
  if (p.g.num_experts == 0 || p.g.max_rows == 0) return cudaSuccess;
  if (!weights_ok(p.w) || !p.x_codes || !p.x_scales || !p.x_row || !p.beta || !p.linear_beta ||
      !p.h_codes || !p.h_scales || !aligned(p.x_codes, 16) || !aligned(p.x_scales, 4) ||
      !aligned(p.h_codes, 16)) {
    return cudaErrorInvalidValue;
  }
  fp8::Args a{};
  a.w = p.w.w;
  a.row_exp = p.w.row_exp;
  a.extra_begin = p.w.extra_begin;
  a.extra_w = p.w.extra_w;
  a.extra_exp = p.w.extra_exp;
  a.M = 2 * p.I;
  a.K = p.K;
  a.act = p.x_codes;
  a.act_scales = p.x_scales;
  a.act_row = p.x_row;
  a.beta = p.beta;
  a.linear_beta = p.linear_beta;
  a.h = p.h_codes;
  a.h_scales = p.h_scales;
  a.offsets = p.g.expert_offsets;
  a.num_experts = p.g.num_experts;
  a.max_rows = p.g.max_rows;
  return dispatch<true>(a, p.g.tile_n, p.warpgroups, num_sms, stream);
}

cudaError_t launch_fp8_gemm2(const Fp8Gemm2Params& p, int num_sms, cudaStream_t stream) {
  if (!problem_ok(p.g, num_sms) || p.warpgroups < 0 || p.warpgroups > 2 || p.H <= 0 ||
      p.H % fp8::kTileRows != 0 || p.I <= 0 || p.I % fp8::kStepK != 0) {
    return cudaErrorInvalidValue;
  }
  if (p.g.num_experts == 0 || p.g.max_rows == 0) return cudaSuccess;
  if (!weights_ok(p.w) || !p.h_codes || !p.h_scales || !p.row_weight || !p.y ||
      !aligned(p.h_codes, 16) || !aligned(p.h_scales, 4) || !aligned(p.y, 16)) {
    return cudaErrorInvalidValue;
  }
  if (p.out_token && (!p.out || !aligned(p.out, 16) || p.out_stride < p.H || p.out_stride % 4 != 0))
    return cudaErrorInvalidValue;
  fp8::Args a{};
  a.w = p.w.w;
  a.row_exp = p.w.row_exp;
  a.extra_begin = p.w.extra_begin;
  a.extra_w = p.w.extra_w;
  a.extra_exp = p.w.extra_exp;
  a.M = p.H;
  a.K = p.I;
  a.act = p.h_codes;
  a.act_scales = p.h_scales;
  a.act_row = nullptr;
  a.row_weight = p.row_weight;
  a.y = p.y;
  a.out_token = p.out_token;
  a.out = p.out_token ? p.out : nullptr;
  a.out_stride = p.out_token ? p.out_stride : 0;
  a.offsets = p.g.expert_offsets;
  a.num_experts = p.g.num_experts;
  a.max_rows = p.g.max_rows;
  return dispatch<false>(a, p.g.tile_n, p.warpgroups, num_sms, stream);
}

}  // namespace mxmoe::sm90
