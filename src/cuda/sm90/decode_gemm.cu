// src/cuda/sm90/decode_gemm.cu: launcher of the SM90 decode grouped GEMM (decode_gemm.h):
// split-K choice, persistent cluster grid sizing, PDL launch.
//
// Nothing here reads device memory or synchronizes (graph capturable). The kernel attributes and
// occupancies are queried once per instantiation (a static), not per launch: at T = 1 a kernel
// runs for a few us and host calls before the launch would show up as idle GPU time.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <type_traits>

#include "sm90/decode_bulk_kernel.cuh"
#include "sm90/decode_gemm.h"
#include "sm90/decode_gemm_kernel.cuh"
#include "sm90/tile_heuristic.h"
#include "smxx/env_knob.h"
#include "smxx/pdl.cuh"

namespace mxmoe::sm90 {
namespace {

constexpr int kSplits[4] = {1, 2, 4, 8};
// The cluster reduction and the per-tile lockstep of a split, in K-step units: fitted to the
// first H200 run (bench/NOTES.md D): a split pays off only when the tiles leave SMs idle.
constexpr int kReduceCostSteps = 24;

// Forced mainloop (0 = the rule). Starts from MXMOE_DECODE_MAINLOOP=1|2 so an end-to-end
// `mxmoe bench` run can time the choices in one device session; tests set it directly.
int valid_mainloop(int m) { return m == kDecodeBulkRing || m == kDecodeRegStream ? m : 0; }
std::atomic<int> g_mainloop{valid_mainloop(smxx::env_int("MXMOE_DECODE_MAINLOOP", 0))};
std::atomic<bool> g_small{smxx::env_on_unless_zero("MXMOE_DECODE_SMALL")};

// Forced K split per GEMM (0 = decode_split_k's choice): MXMOE_DECODE_SPLIT1 / MXMOE_DECODE_SPLIT2
// = 1, 2 or 4, read once, so an end-to-end `mxmoe bench` run can time the splits in one device
// session (GroupedProblem::split_k, which tests set, still wins).
int valid_split(int s) { return s == 1 || s == 2 || s == 4 ? s : 0; }
const int g_forced_split[2] = {valid_split(smxx::env_int("MXMOE_DECODE_SPLIT2", 0)),
                               valid_split(smxx::env_int("MXMOE_DECODE_SPLIT1", 0))};
// The bulk ring's balanced tile stride (decode_gemm.h, kDecodeBalance*): MXMOE_DECODE_BALANCE
// 0 / 1 / 2, default the rule.
int valid_balance(int m) {
  return m >= kDecodeBalanceOff && m <= kDecodeBalanceAlways ? m : kDecodeBalanceDefault;
}
std::atomic<int> g_balance{
    valid_balance(smxx::env_int("MXMOE_DECODE_BALANCE", kDecodeBalanceDefault))};

// The grouping known before the wait (decode_gemm.h, DecodeSpec): MXMOE_DECODE_SPEC, a bit set
// (0..127; the preload and own inputs build on kDecodeSpecTiles; kDecodeSpecSmall stands alone).
int valid_spec(int m) {
  if (m <= 0 || m > 127) return kDecodeSpecOff;
  if ((m & kDecodeSpecSmall) != 0) return kDecodeSpecSmall;
  return (m & (kDecodeSpecPreload | kDecodeSpecOwnInputs)) != 0 ? m | kDecodeSpecTiles : m;
}
// (valid_spec(kDecodeSpecDefault) is the default itself.)
std::atomic<int> g_spec{valid_spec(smxx::env_int("MXMOE_DECODE_SPEC", kDecodeSpecDefault))};

// MXMOE_DECODE_TRACE (set: on): each decode launch's choices to stderr when they differ from
// the previous launch of the same GEMM, to see which kernels a benchmark or a chain runs (spec:
// 0 none, 1 the ids, 2 the ids and GEMM1's own inputs).
const bool g_trace = std::getenv("MXMOE_DECODE_TRACE") != nullptr;
void trace_launch(bool gemm1, bool bulk, int spec, int trigger, int S, int tiles, int experts,
                  int M, int K, int64_t clusters) {
  static std::mutex mu;
  static int64_t last[2][9];
  const int64_t now[9] = {bulk, spec, trigger, S, tiles, experts, M, K, clusters};
  std::lock_guard<std::mutex> lock(mu);
  if (std::equal(now, now + 9, last[gemm1])) return;
  std::copy(now, now + 9, last[gemm1]);
  std::fprintf(stderr,
               "decode trace: GEMM%d %s spec %d trigger %d split %d tiles %d experts %d M %d K %d "
               "clusters %lld\n",
               gemm1 ? 1 : 2, bulk ? "bulk" : "register", spec, trigger, S, tiles, experts, M, K,
               static_cast<long long>(clusters));
}

// kBulk: the bulk-copy ring (decode_bulk_kernel.cuh), else the register-streamed mainloop.
// kSpec: the instantiation that reads the ids before the wait; split 8 (only when forced) has
// none and takes the plain kernel.
// kSmall: the instantiation for launches with small_scales (no big-scale test per fragment).
template <int S, bool kGemm1, bool kBulk, bool kSpec, bool kSmall>
auto* kernel_of() {
  constexpr bool spec = kSpec && S <= 4;
  if constexpr (kBulk) {
    return decode::decode_bulk_kernel<S, kGemm1, spec, kSmall>;
  } else {
    return decode::decode_gemm_kernel<S, kGemm1, spec, kSmall>;
  }
}
template <int S, bool kBulk>
constexpr size_t smem_of() {
  return kBulk ? decode::BulkSmem<S>::kDynamic : decode::Smem<S>::kDynamic;
}
template <bool kBulk>
constexpr int threads_of() {
  return kBulk ? decode::kBulkThreads : decode::kThreads;
}

struct Occupancy {
  cudaError_t err = cudaSuccess;
  int per_sm[4] = {0, 0, 0, 0};
  int clusters[4] = {0, 0, 0, 0};  // co-resident clusters of 2^i CTAs on the device (0: unknown)
};

// How many clusters of S CTAs the device runs at once (a cluster's CTAs share a GPC, so fewer
// than per_sm x SMs / S); 0 when the query is not available.
template <bool kGemm1, bool kBulk, bool kSpec, bool kSmall, int S>
int max_active_clusters() {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(S * 64);
  cfg.blockDim = dim3(threads_of<kBulk>());
  cfg.dynamicSmemBytes = smem_of<S, kBulk>();
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel_of<S, kGemm1, kBulk, kSpec, kSmall>(), &cfg) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

template <bool kGemm1, bool kBulk, bool kSpec, bool kSmall, int S>
cudaError_t setup_one(int* per_sm) {
  auto* k = kernel_of<S, kGemm1, kBulk, kSpec, kSmall>();
  const int smem = static_cast<int>(smem_of<S, kBulk>());
  constexpr int kThreadsPerCta = threads_of<kBulk>();
  cudaError_t err = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  // The largest shared-memory carveout, as the chain's other kernels get from their smem needs:
  // an SM switching its L1 / shared split between consecutive kernels must drain first, which
  // would undo the PDL overlap of the chain (the decode kernel alone needs only ~26 KB per CTA).
  err = cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared);
  if (err != cudaSuccess) return err;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, k, kThreadsPerCta, smem);
  if (err != cudaSuccess) {
    // Should the query refuse a kernel with compile-time cluster dims, bound the CTAs per SM
    // by shared memory and registers instead.
    (void)cudaGetLastError();
    cudaFuncAttributes fa{};
    int dev = 0, smem_sm = 0, regs_sm = 0;
    if ((err = cudaFuncGetAttributes(&fa, k)) != cudaSuccess) return err;
    if ((err = cudaGetDevice(&dev)) != cudaSuccess) return err;
    if ((err = cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor,
                                      dev)) != cudaSuccess ||
        (err = cudaDeviceGetAttribute(&regs_sm, cudaDevAttrMaxRegistersPerMultiprocessor, dev)) !=
            cudaSuccess) {
      return err;
    }
    const int by_smem = smem_sm / (smem + static_cast<int>(fa.sharedSizeBytes) + 1024);
    const int by_regs = regs_sm / (std::max(fa.numRegs, 1) * kThreadsPerCta);
    *per_sm = std::min(by_smem, by_regs);
  }
  return *per_sm >= 1 ? cudaSuccess : cudaErrorInvalidConfiguration;
}

template <bool kGemm1, bool kBulk, bool kSpec, bool kSmall>
const Occupancy& occupancy() {
  static Occupancy occ;
  static std::once_flag once;
  std::call_once(once, [] {
    cudaError_t e = setup_one<kGemm1, kBulk, kSpec, kSmall, 1>(&occ.per_sm[0]);
    if (e == cudaSuccess) e = setup_one<kGemm1, kBulk, kSpec, kSmall, 2>(&occ.per_sm[1]);
    if (e == cudaSuccess) e = setup_one<kGemm1, kBulk, kSpec, kSmall, 4>(&occ.per_sm[2]);
    if (e == cudaSuccess) e = setup_one<kGemm1, kBulk, kSpec, kSmall, 8>(&occ.per_sm[3]);
    if (e == cudaSuccess) {
      occ.clusters[1] = max_active_clusters<kGemm1, kBulk, kSpec, kSmall, 2>();
      occ.clusters[2] = max_active_clusters<kGemm1, kBulk, kSpec, kSmall, 4>();
      occ.clusters[3] = max_active_clusters<kGemm1, kBulk, kSpec, kSmall, 8>();
    }
    occ.err = e;
  });
  return occ;
}

template <int S, bool kGemm1, bool kBulk, bool kSpec, bool kSmall>
cudaError_t launch_split(const KernelArgs& a, const DecodeSpec& spec, int64_t tile_bound, int slots,
                         int max_clusters, cudaStream_t stream) {
  // Persistent clusters: as many as run at once (one wave), but no more than the expected tiles
  // (the CTAs loop over tiles, so a grid smaller than the real tile count is still correct).
  const int64_t fit = S == 1 ? slots : max_clusters > 0 ? max_clusters : slots * 3 / (4 * S);
  const int64_t clusters = std::max<int64_t>(1, std::min<int64_t>(fit, tile_bound));
  if (g_trace) {
    const int spec_kind = kSpec ? (spec.own.x != nullptr ? 2 : 1) : 0;
    trace_launch(kGemm1, kBulk, spec_kind, spec.trigger, S, static_cast<int>(tile_bound),
                 a.num_experts, a.M, a.K, clusters);
  }
  const dim3 grid(static_cast<unsigned>(clusters * S));
  return pdl::launch_pdl(kernel_of<S, kGemm1, kBulk, kSpec, kSmall>(), grid,
                         dim3(threads_of<kBulk>()), smem_of<S, kBulk>(), stream, a, spec);
}

template <bool kGemm1, bool kBulk, bool kSpec, bool kSmall>
cudaError_t launch_decode(const KernelArgs& a, const DecodeSpec& spec, int split_k, int rows,
                          int num_sms, cudaStream_t stream) {
  const Occupancy& occ = occupancy<kGemm1, kBulk, kSpec, kSmall>();
  if (occ.err != cudaSuccess) return occ.err;
  int slots[4];
  for (int i = 0; i < 4; ++i) slots[i] = num_sms * occ.per_sm[i];
  const int m_tiles = a.M / kTileM, KT = a.K / kStepK;
  const int forced = split_k != 0 ? split_k : g_forced_split[kGemm1];
  const int S = forced != 0 ? forced : decode_split_k(m_tiles, KT, rows, a.num_experts, slots);
  // Tiles expected from the rows hint (at most one partial token tile per expert); the hint,
  // not max_rows (a worst-case bound: every pick local), so T=1 under EP launches ~the 96 x S
  // CTAs that have work rather than a full device of idle ones.
  const int hint = std::max(1, std::min(rows, a.max_rows));
  const int64_t tile_bound =
      static_cast<int64_t>(m_tiles) * (std::min(a.num_experts, hint) + hint / decode::kBN);
  switch (S) {
    case 1:
      return launch_split<1, kGemm1, kBulk, kSpec, kSmall>(a, spec, tile_bound, slots[0], 0,
                                                           stream);
    case 2:
      return launch_split<2, kGemm1, kBulk, kSpec, kSmall>(a, spec, tile_bound, slots[1],
                                                           occ.clusters[1], stream);
    case 4:
      return launch_split<4, kGemm1, kBulk, kSpec, kSmall>(a, spec, tile_bound, slots[2],
                                                           occ.clusters[2], stream);
    default:
      return launch_split<8, kGemm1, kBulk, kSpec, kSmall>(a, spec, tile_bound, slots[3],
                                                           occ.clusters[3], stream);
  }
}

// The mode in force for one problem (decode_gemm.h): MXMOE_DECODE_SPEC's bits, or under the rule
// (kDecodeSpecSmall) the own-inputs window where GEMM1 is offered its own inputs, else Tiles |
// EarlyGemm2 where the expected GEMM2 weight stream is small, else nothing. Both GEMMs see the
// same H x I per expert and the same rows hint, so both launches reach the same verdict, and so
// does the glue asking before it launches them (decode_spec_takes_ids).
int spec_mode(bool own_offered, int rows, int pairs, int num_experts, int64_t H, int64_t I) {
  const int mode = g_spec.load(std::memory_order_relaxed);
  if (mode != kDecodeSpecSmall) return mode;
  return own_offered && decode_spec_own(rows, pairs)
             ? kDecodeSpecTiles | kDecodeSpecEarlyGemm2 | kDecodeSpecOwnInputs
         : decode_spec_small(num_experts, rows, H, I) ? kDecodeSpecTiles | kDecodeSpecEarlyGemm2
                                                      : kDecodeSpecOff;
}

// The DecodeSpec of a launch (decode_gemm.h): for GEMM1 on the bulk ring the early trigger;
// the ids when the mode asks for them and the problem has them, with the mode's preload, and
// for GEMM1 on the bulk ring its own inputs (kDecodeSpecOwnInputs) when given and usable by
// bulk copies.
template <bool kGemm1>
DecodeSpec spec_of(const GroupedProblem& g, bool bulk, const KernelArgs& a,
                   const Gemm1OwnInputs* own) {
  DecodeSpec s;
  s.balance = bulk && decode_balance_applies(g_balance.load(std::memory_order_relaxed), a.K);
  const int64_t H = kGemm1 ? a.K : a.M, I = kGemm1 ? a.M / 2 : a.K;  // GEMM1 M = 2 I, K = H
  const int mode =
      spec_mode(g.gemm1_own_offered, choice_rows(g), g.route_pairs, a.num_experts, H, I);
  if (kGemm1 && bulk) {
    s.trigger = (mode & kDecodeSpecEarlyGemm2) != 0          ? kTriggerAlways
                : (mode & kDecodeSpecEarlyGemm2Split) != 0   ? kTriggerSplit
                : (mode & kDecodeSpecEarlyGemm2OneTile) != 0 ? kTriggerSplitOneTile
                                                             : 0;
  }
  if ((mode & kDecodeSpecTiles) == 0 || g.route_ids == nullptr || g.route_pairs <= 0 ||
      g.route_pairs > g.max_rows) {
    return s;
  }
  s.ids = g.route_ids;
  s.pairs = g.route_pairs;
  s.expert_start = g.route_expert_start;
  s.ids_ready = g.route_ids_ready;
  s.preload = (mode & kDecodeSpecPreload) != 0 ? 1 : 0;
  // (W4A16 only: the rows go to the MMA as they are, so a GEMM1 that requantizes h, W4A8's,
  // never takes them.)
  if (kGemm1 && bulk && (mode & kDecodeSpecOwnInputs) != 0 && own != nullptr && !a.mxfp8_out &&
      gemm1_own_usable(*own, a.K)) {
    s.own = *own;
  }
  return s;
}

// Whether this launch takes the kSmall kernels (decode_gemm.h, decode_set_small).
bool small_kernels(const KernelArgs& a) {
  return a.small_scales && g_small.load(std::memory_order_relaxed);
}

template <bool kGemm1, bool kBulk>
cudaError_t launch_decode_for(const GroupedProblem& g, const KernelArgs& a, int rows, int num_sms,
                              cudaStream_t stream, const Gemm1OwnInputs* own) {
  const DecodeSpec spec = spec_of<kGemm1>(g, kBulk, a, own);
  auto launch = [&](auto small_tag) {
    constexpr bool kSmall = decltype(small_tag)::value;
    return spec.ids != nullptr ? launch_decode<kGemm1, kBulk, true, kSmall>(a, spec, g.split_k,
                                                                            rows, num_sms, stream)
                               : launch_decode<kGemm1, kBulk, false, kSmall>(a, spec, g.split_k,
                                                                             rows, num_sms, stream);
  };
  return small_kernels(a) ? launch(std::true_type()) : launch(std::false_type());
}

}  // namespace

#ifdef MXMOE_DECODE_TIMELINE
cudaError_t decode_timeline_read(std::vector<uint64_t>* out) {
  return cta_timeline::read(decode::g_decode_timeline, out);
}
cudaError_t decode_timeline_reset(cudaStream_t stream) {
  return cta_timeline::reset(decode::g_decode_timeline, stream);
}
#else
cudaError_t decode_timeline_read(std::vector<uint64_t>* out) {
  out->clear();
  return cudaErrorNotSupported;
}
cudaError_t decode_timeline_reset(cudaStream_t) { return cudaErrorNotSupported; }
#endif

void decode_set_small(bool on) { g_small.store(on, std::memory_order_relaxed); }
bool decode_small() { return g_small.load(std::memory_order_relaxed); }

void decode_set_mainloop(int m) { g_mainloop.store(valid_mainloop(m), std::memory_order_relaxed); }

bool decode_balance_applies(int mode, int K) {
  return mode == kDecodeBalanceAlways ||
         (mode == kDecodeBalanceLongK && K / kStepK > kDecodeBulkMaxSteps);
}
void decode_set_balance(int mode) {
  g_balance.store(valid_balance(mode), std::memory_order_relaxed);
}
int decode_balance() { return g_balance.load(std::memory_order_relaxed); }

void decode_set_spec(int mode) { g_spec.store(valid_spec(mode), std::memory_order_relaxed); }
int decode_spec() { return g_spec.load(std::memory_order_relaxed); }

bool decode_spec_small(int num_experts, int rows, int64_t H, int64_t I) {
  const int64_t experts = std::max(1, std::min(num_experts, rows));
  return experts * H * I / 2 <= kDecodeSpecSmallBytes;
}

bool decode_spec_takes_ids(int num_experts, int rows, int64_t H, int64_t I) {
  return (spec_mode(false, rows, 0, num_experts, H, I) & kDecodeSpecTiles) != 0;
}

bool decode_spec_own(int rows, int pairs) {
  return rows >= kDecodeOwnMinRows && rows <= kDecodeOwnMaxRows && pairs >= kDecodeOwnMinPairs &&
         pairs <= kDecodeOwnMaxPairs;
}

int decode_split_k(int m_tiles, int KT, int max_rows, int num_experts, const int (&slots)[4]) {
  const int64_t tiles =
      static_cast<int64_t>(m_tiles) *
      (std::min(num_experts, max_rows) + max_rows / decode::kBN);  // at most one partial per expert
  if (tiles >= slots[0]) return 1;                                 // every SM busy without a split
  int best = 1;
  int64_t best_cost = -1;
  for (int i = 0; i < 3; ++i) {  // 8-CTA clusters measured slower than 4 everywhere (NOTES D)
    const int S = kSplits[i];
    if (S > KT || slots[i] < S) break;
    // Clusters at once: a cluster's CTAs must share a GPC, so not every slot is usable; 3/4 is
    // fitted to the H200 runs (EP16 T=1: 96 clusters of 4 did not run in one wave of 3 x 132).
    const int64_t per_wave = S == 1 ? slots[0] : std::max<int64_t>(1, slots[i] * 3 / (4 * S));
    const int64_t waves = (tiles + per_wave - 1) / per_wave;
    const int64_t cost = waves * ((KT + S - 1) / S) + (S > 1 ? kReduceCostSteps : 0);
    if (best_cost < 0 || cost < best_cost) best = S, best_cost = cost;
  }
  return best;
}

namespace {
// decode_gemm.h's rule for the two mainloops: true for the bulk ring. r rows over e experts, K
// the reduction length, small whether the kSmall kernels run.
constexpr bool bulk_by_rule(int64_t r, int64_t e, int K, bool small, bool gemm1) {
  if (r <= kDecodeBulkMaxRows || r * kDecodeBulkExpertsPerRow <= e) return true;
  if (K / kStepK <= kDecodeBulkMaxSteps) return true;
  if (gemm1 && r >= kDecodeGemm1RegMinMeanRows * e) return false;
  return small && 2 * r <= kDecodeSmallBulkMeanRowsX2 * e;
}
// The rule at Kimi-K3's decode shapes (EP16: 56 experts, GEMM1 K 3584, GEMM2 K 3072; TP8xEP4:
// 224 experts, GEMM2 K 384), kSmall kernels: the ring up to 4 rows and for TP8xEP4's short
// GEMM2 always; GEMM1 on the register mainloop from one row per expert (EP16 T=64), GEMM2 on the
// ring up to 1.5 rows per expert.
static_assert(bulk_by_rule(4, 56, 3584, true, true) && bulk_by_rule(14, 56, 3584, false, true),
              "few rows: the ring");
static_assert(bulk_by_rule(48, 56, 3584, true, true) && !bulk_by_rule(64, 56, 3584, true, true),
              "EP16 GEMM1: the ring below one row per expert, the register mainloop from one");
static_assert(bulk_by_rule(64, 56, 3072, true, false) && bulk_by_rule(84, 56, 3072, true, false) &&
                  !bulk_by_rule(85, 56, 3072, true, false),
              "EP16 GEMM2: the ring up to 1.5 rows per expert");
static_assert(!bulk_by_rule(64, 56, 3072, false, false), "no kSmall kernels: the register loop");
static_assert(bulk_by_rule(4096, 224, 384, true, false), "TP8xEP4 GEMM2 (8 steps): the ring");
}  // namespace

template <bool kGemm1>
bool try_launch_decode_gemm(const KernelArgs& a, const GroupedProblem& g, int num_sms,
                            cudaStream_t stream, cudaError_t* err, const Gemm1OwnInputs* own) {
  *err = cudaErrorInvalidValue;
  if (g.kernel != kGemmAuto && g.kernel != kGemmTiled && g.kernel != kGemmDecode) return true;
  if (g.split_k != 0 && g.split_k != 1 && g.split_k != 2 && g.split_k != 4 && g.split_k != 8) {
    return true;
  }
  const int rows = choice_rows(g);  // heuristics only; grids are sized from max_rows
  const int bn = g.tile_n != 0 ? g.tile_n : choose_tile_n(rows, a.num_experts);
  // Bulk copies need 16-byte aligned sources: the launchers check w_packed, x / h and the row
  // strides; the scales' base is checked here (every per-expert and per-step offset is a
  // multiple of 128 bytes).
  const bool fits = bn == decode::kBN && a.num_experts <= kDecodeMaxExperts &&
                    a.max_rows <= kDecodeMaxRows &&
                    (reinterpret_cast<uintptr_t>(a.w_scales) & 15u) == 0;
  if (g.kernel == kGemmDecode) {
    if (!fits) return true;  // forced onto a problem it cannot serve
  } else if (g.kernel == kGemmTiled || !kDecodeByDefault || !fits ||
             rows > static_cast<int64_t>(kDecodeMaxMeanRows) * a.num_experts) {
    return false;
  }
  const int forced = g_mainloop.load(std::memory_order_relaxed);
  const bool bulk = forced == kDecodeBulkRing ||
                    (forced != kDecodeRegStream &&
                     bulk_by_rule(rows, a.num_experts, a.K, small_kernels(a), kGemm1));
  *err = bulk ? launch_decode_for<kGemm1, true>(g, a, rows, num_sms, stream, own)
              : launch_decode_for<kGemm1, false>(g, a, rows, num_sms, stream, own);
  return true;
}

template bool try_launch_decode_gemm<true>(const KernelArgs&, const GroupedProblem&, int,
                                           cudaStream_t, cudaError_t*, const Gemm1OwnInputs*);
template bool try_launch_decode_gemm<false>(const KernelArgs&, const GroupedProblem&, int,
                                            cudaStream_t, cudaError_t*, const Gemm1OwnInputs*);

}  // namespace mxmoe::sm90
