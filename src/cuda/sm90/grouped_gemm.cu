// src/cuda/sm90/grouped_gemm.cu: host launchers of the SM90 grouped MoE GEMMs
// (grouped_gemm.h): argument checks, tile-width dispatch, persistent grid sizing. Tile widths
// 16..128 run the one-warpgroup kernel (grouped_gemm_kernel.cuh), 160 the warp-specialized
// one (grouped_gemm_ws_kernel.cuh: token tiles of at most 160 rows, three consumer warpgroups,
// wgmma N picked per tile). Every launch uses programmatic dependent launch (smxx/pdl.cuh).
//
// Nothing here reads device memory or synchronizes, so the launches can be captured in a CUDA
// graph: the grid is sized from host-known bounds (max_rows, num_experts, the occupancy of the
// kernel), and CTAs with no tile exit at once.
// Limitations: num_experts <= kMaxExperts (the per-CTA tile prefix lives in shared memory).
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sm90/decode_gemm.h"
#include "sm90/grouped_gemm.h"
#include "sm90/grouped_gemm_kernel.cuh"
#include "sm90/grouped_gemm_ws_kernel.cuh"
#include "sm90/tile_heuristic.h"
#include "smxx/env_knob.h"
#include "smxx/pdl.cuh"

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
  err =
      pdl::launch_pdl(kernel, dim3(static_cast<unsigned>(grid)), dim3(kWarpgroup), smem, stream, a);
  return err != cudaSuccess ? err : cudaGetLastError();
}

// The warp-specialized kernel (grouped_gemm_ws_kernel.cuh), token tiles of at most `cap` rows.
// The slot count fills the shared memory left after the unit list (max_units ints, a bound
// from host-known sizes); when fewer than kWsMinStages slots fit (a huge num_experts), the
// one-warpgroup kernel runs instead.
// MXMOE_SM90_WS_TUNE="lag,max_stages,flags" (grouped_gemm_ws_shape.cuh's `tune` bits): for the
// timing sweeps of tests/gpu/sm90_bench_grouped_gemm.cpp only.
struct WsTune {
  int lag = kWsLag, max_stages = kWsMaxStages, flags = kWsDefaultSkew << kWsTuneSkewShift;
};
WsTune ws_tune() {
  WsTune t;
  if (const char* env = std::getenv("MXMOE_SM90_WS_TUNE")) {
    int lag = 0, st = 0, fl = 0;
    if (std::sscanf(env, "%d,%d,%d", &lag, &st, &fl) == 3 && (lag == 2 || lag == 4 || lag == 6) &&
        st >= lag + 2 && st <= kWsMaxStages) {
      t.lag = lag;
      t.max_stages = st;
      t.flags = fl & (kWsTuneNoLoad | kWsTuneNoExpand | kWsTuneNoStore | kWsTuneNoSteady |
                      kWsTuneSkewMask | kWsTuneNoCountFence | kWsTuneNoCountBarrier);
    }
  }
  return t;
}

// GEMM2 under GEMM1 (grouped_gemm_ws_schedule.cuh, ws_wait_rows): GEMM1's counters, and for GEMM2
// the 64-row tiles of h per unit and the cap GEMM1 counted at. `counted` (GEMM1) receives the cap
// when the counting kernel was launched.
struct HReady {
  int32_t* counters = nullptr;
  int tiles = 0, cap = 0;
  int* counted = nullptr;
};
// Which GEMM2 launches start under GEMM1. By default those on the register weight path: TP8xEP4's
// GEMM2 on the slot path (K = 384, 6 steps per tile) measured 1-2% slower end to end with it
// (bench/NOTES.md P round 19). MXMOE_SM90_WS_OVERLAP (same-binary A/Bs): 0 never (GEMM1 does not
// count), all every warp-specialized GEMM2, check every one but without GEMM1's early trigger
// (the counters and waits alone; GEMM2 then starts once GEMM1 has exited).
enum class WsOverlap { kOff, kRegisterPath, kAll, kCheckOnly };
WsOverlap ws_overlap() {
  static const WsOverlap mode = [] {
    const char* v = std::getenv("MXMOE_SM90_WS_OVERLAP");
    if (v == nullptr) return WsOverlap::kRegisterPath;
    if (std::strcmp(v, "0") == 0) return WsOverlap::kOff;
    if (std::strcmp(v, "all") == 0) return WsOverlap::kAll;
    if (std::strcmp(v, "check") == 0) return WsOverlap::kCheckOnly;
    return WsOverlap::kRegisterPath;
  }();
  return mode;
}

// On unless MXMOE_SM90_WS_SMALL=0 (grouped_gemm.h, ws_set_small): launches with small_scales
// take the kernels compiled without the per-fragment big-scale test (kSmall).
std::atomic<bool> g_ws_small{smxx::env_on_unless_zero("MXMOE_SM90_WS_SMALL")};

// The warp-specialized kernel of a launch: GEMM1 with BF16 h or the MXFP8 epilogue; GEMM2 with
// or without its out_token table, its weights through the slots or registers.
template <int C, bool kGemm1, bool kSmall>
auto* ws_kernel_of(const KernelArgs& a, bool slot_weights) {
  if constexpr (kGemm1) {
    return a.mxfp8_out ? grouped_gemm_ws_kernel<C, true, false, false, kSmall>
                       : grouped_gemm_ws_kernel<C, true, true, false, kSmall>;  // BF16 h only
  } else {
    const bool out = a.out_token != nullptr;
    return slot_weights ? (out ? grouped_gemm_ws_kernel<C, false, true, true, kSmall>
                               : grouped_gemm_ws_kernel<C, false, false, true, kSmall>)
                        : (out ? grouped_gemm_ws_kernel<C, false, true, false, kSmall>
                               : grouped_gemm_ws_kernel<C, false, false, false, kSmall>);
  }
}

template <int C, bool kGemm1>
cudaError_t launch_ws(const KernelArgs& a, int num_sms, cudaStream_t stream, const HReady& hr) {
  const int cap = WsShape<C>::kMaxTileN;
  const WsTune tune = ws_tune();
  const int64_t max_units = a.max_rows / cap + a.num_experts + 1;
  int dev = 0, optin = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (err != cudaSuccess) return err;
  // GEMM2 at short K takes its weights through the producer's slots (kWsSlotWeightsMaxSteps),
  // when the producer's 32-bit offsets in 16-byte units reach every weight and the scale words
  // take 16-byte copies.
  const bool slot_weights = !kGemm1 && a.K / kStepK <= kWsSlotWeightsMaxSteps &&
                            static_cast<int64_t>(a.num_experts) * a.M * a.K / 32 <= UINT32_MAX &&
                            aligned16(a.w_scales);
  const int64_t room =
      static_cast<int64_t>(optin) - static_cast<int64_t>(ws_fixed_smem_bytes<C>(max_units));
  const int64_t stages = std::min<int64_t>(
      tune.max_stages, room / static_cast<int64_t>(ws_stage_smem_bytes<C>(cap, slot_weights)));
  if (max_units > (int64_t{1} << 30) || stages < tune.lag + 2) {
    return launch_tiles<128, kGemm1>(a, num_sms, stream);
  }
  const size_t smem =
      ws_fixed_smem_bytes<C>(max_units) + stages * ws_stage_smem_bytes<C>(cap, slot_weights);
  auto* kernel = a.small_scales && g_ws_small.load(std::memory_order_relaxed)
                     ? ws_kernel_of<C, kGemm1, true>(a, slot_weights)
                     : ws_kernel_of<C, kGemm1, false>(a, slot_weights);
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (err != cudaSuccess) return err;
  const int64_t m_groups = (a.M / kTileM + C - 1) / C;
  const int64_t grid = std::min<int64_t>(num_sms, max_units * m_groups);
  if (grid < 1) return cudaSuccess;
  // GEMM1 counts when given counters (launch_gemm1 decides for which GEMM2); GEMM2 waits on them
  // only when GEMM1 counted at this cap.
  int32_t* h_ready = nullptr;
  if (hr.counters != nullptr && (kGemm1 || hr.cap == cap)) h_ready = hr.counters;
  const int no_trigger = kGemm1 && ws_overlap() == WsOverlap::kCheckOnly ? kWsTuneNoTrigger : 0;
  err = pdl::launch_pdl(kernel, dim3(static_cast<unsigned>(grid)), dim3(WsShape<C>::kThreads), smem,
                        stream, a, cap, static_cast<int>(stages), static_cast<int>(max_units),
                        tune.lag | tune.flags | no_trigger, h_ready, hr.tiles);
  if (err == cudaSuccess) err = cudaGetLastError();
  if (kGemm1 && err == cudaSuccess && h_ready != nullptr && hr.counted) *hr.counted = cap;
  return err;
}

// MXMOE_SM90_WS_CAP=128|160 replaces the heuristic's prefill choice (the one-warpgroup kernel
// or the warp-specialized one), for same-binary timing A/Bs
// (tests/gpu/sm90_bench_grouped_gemm.cpp, mxmoe bench); an explicit tile_n is left alone. Read
// once per process, not per dispatch.
int ws_cap_override(int bn) {
  static const int cap = smxx::env_int("MXMOE_SM90_WS_CAP", 0);
  return bn >= 128 && (cap == 128 || cap == 160) ? cap : bn;
}

template <bool kGemm1>
cudaError_t dispatch(const KernelArgs& a, const GroupedProblem& g, int num_sms, cudaStream_t stream,
                     const HReady& hr) {
  const int bn =
      g.tile_n != 0 ? g.tile_n : ws_cap_override(choose_tile_n(choice_rows(g), a.num_experts));
  switch (bn) {
    case 16:
      return launch_tiles<16, kGemm1>(a, num_sms, stream);
    case 32:
      return launch_tiles<32, kGemm1>(a, num_sms, stream);
    case 64:
      return launch_tiles<64, kGemm1>(a, num_sms, stream);
    case 128:
      return launch_tiles<128, kGemm1>(a, num_sms, stream);
    case 160:
      return launch_ws<3, kGemm1>(a, num_sms, stream, hr);
    default:
      return cudaErrorInvalidValue;
  }
}

bool problem_ok(const GroupedProblem& g, int num_sms) {
  return g.num_experts >= 0 && g.num_experts <= kMaxExperts && g.max_rows >= 0 &&
         (g.num_experts == 0 || g.expert_offsets != nullptr) && num_sms > 0 &&
         (g.tile_n == 0 || valid_tile_n(g.tile_n));
}

}  // namespace

void ws_set_small(bool on) { g_ws_small.store(on, std::memory_order_relaxed); }
bool ws_small() { return g_ws_small.load(std::memory_order_relaxed); }

cudaError_t launch_gemm1(const Gemm1Params& p, int num_sms, cudaStream_t stream,
                         CountedGemm1* counted) {
  if (counted) *counted = CountedGemm1{};
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
  a.small_scales = p.small_scales ? 1 : 0;
  a.h = p.h;
  a.offsets = p.g.expert_offsets;
  a.num_experts = p.g.num_experts;
  a.max_rows = p.g.max_rows;
  if (cudaError_t e; try_launch_decode_gemm<true>(a, p.g, num_sms, stream, &e, &p.own)) return e;
  // By default GEMM1 counts only where GEMM2 (K = I) will run on the register path, the one place
  // that decides which GEMM2 starts under GEMM1: counting alone costs (TP8xEP4 T=8192 +1% end to
  // end with a slot-path GEMM2), and a GEMM2 with K > kWsSlotWeightsMaxSteps steps never takes
  // the slots.
  HReady hr;
  const WsOverlap mode = ws_overlap();
  if (mode == WsOverlap::kAll || mode == WsOverlap::kCheckOnly ||
      (mode == WsOverlap::kRegisterPath && p.I / kStepK > kWsSlotWeightsMaxSteps)) {
    hr.counters = p.h_ready;
  }
  int cap = 0;
  hr.counted = &cap;
  const cudaError_t err = dispatch<true>(a, p.g, num_sms, stream, hr);
  if (counted && cap > 0) {
    *counted = CountedGemm1{cap, p.h_ready, p.g.expert_offsets, p.g.num_experts, p.I};
  }
  return err;
}

cudaError_t launch_gemm2(const Gemm2Params& p, int num_sms, cudaStream_t stream) {
  if (!problem_ok(p.g, num_sms) || p.H <= 0 || p.H % kTileM != 0 || p.I <= 0 || p.I % kStepK != 0) {
    return cudaErrorInvalidValue;
  }
  if (p.g.num_experts == 0 || p.g.max_rows == 0) return cudaSuccess;
  if (!p.w_packed || !p.w_scales || !p.h || !p.row_weight || !p.y || !aligned16(p.w_packed) ||
      !aligned16(p.h) || !aligned16(p.y)) {
    return cudaErrorInvalidValue;
  }
  if (p.out_token && (!p.out || !aligned16(p.out) || p.out_stride < p.H || p.out_stride % 4 != 0 ||
                      p.out_stride > INT32_MAX))
    return cudaErrorInvalidValue;
  KernelArgs a{};
  a.w_packed = p.w_packed;
  a.w_scales = p.w_scales;
  a.M = p.H;
  a.K = p.I;
  a.act = p.h;
  a.act_stride = p.I;
  a.act_row = nullptr;
  a.row_weight = p.row_weight;
  a.small_scales = p.small_scales ? 1 : 0;
  a.y = p.y;
  a.out_token = p.out_token;
  a.expert_has_out = p.out_token ? p.expert_has_out : nullptr;
  a.out = p.out_token ? p.out : nullptr;
  a.out_stride = p.out_token ? static_cast<int>(p.out_stride) : 0;
  a.offsets = p.g.expert_offsets;
  a.num_experts = p.g.num_experts;
  a.max_rows = p.g.max_rows;
  if (cudaError_t e; try_launch_decode_gemm<false>(a, p.g, num_sms, stream, &e)) return e;
  // GEMM1's counts describe this problem only with the same experts, offsets and I (h's width).
  const CountedGemm1& c1 = p.after_gemm1;
  HReady hr;
  if (c1.cap > 0 && c1.h_ready != nullptr && c1.expert_offsets == p.g.expert_offsets &&
      c1.num_experts == p.g.num_experts && c1.I == p.I) {
    hr.counters = const_cast<int32_t*>(c1.h_ready);
    hr.tiles = 2 * p.I / kTileM;
    hr.cap = c1.cap;
  }
  return dispatch<false>(a, p.g, num_sms, stream, hr);
}

}  // namespace mxmoe::sm90
