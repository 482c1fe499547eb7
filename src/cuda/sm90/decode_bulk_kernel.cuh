// src/cuda/sm90/decode_bulk_kernel.cuh: the decode GEMM's second mainloop, for the sparsest
// problems (a few rows in all: T = 1 under EP): a producer warp streams each tile's prepacked
// weights, scales and token rows with 1-D bulk copies (cp.async.bulk, mbarrier complete_tx) into
// a 4-stage ring of 2 K steps per stage, 4 consumer warps expand and mma.sync them. Same tiles,
// split-K cluster reduction, epilogues (decode_tile.cuh finish_tile) and numerics as
// decode_gemm_kernel.cuh.
//
// Why two mainloops: per kernel the register-streamed one is as fast or faster everywhere
// (bench/NOTES.md D), but end to end at T = 1 the chain with this kernel measured 34.0 / 27.9 us
// (EP16 / TP8xEP4) against 42.2 / 40.5 with the register-streamed one, both binaries in one
// session, with equal per-kernel durations under ncu: the difference is in the launch chain,
// not yet explained. The launcher takes this kernel at <= kDecodeBulkMaxRows expected rows.
//
// kSpec (decode_gemm.h, DecodeSpec): the tile list from the caller's ids and (spec.preload) the
// first tile's first kStages stages of weights before pdl::wait(); GEMM1 given its own inputs
// (DecodeSpec::own, W4A16) reads the caller's rows and SiTU parameters and waits only before it
// exits, so it runs beside the glue kernel that precedes it.
#pragma once

#include "sm90/decode_tile.cuh"
#include "sm90/decode_timeline.cuh"

namespace mxmoe::sm90::decode {

constexpr int kBulkStageSteps = 2;           // 64-K steps per ring stage
constexpr int kBulkThreads = kThreads + 32;  // 4 consumer warps + 1 producer warp

// Ring geometry: one bulk copy moves the stage's KS steps of a tile's weights (consecutive steps
// are contiguous in the prepacked order), one more their scales, one per token row KS x 128
// bytes of activations.
struct BulkRing {
  static constexpr int KS = kBulkStageSteps;
  // NS. 4 rather than 6: the ring is most of the CTA's shared memory, and at 4 stages split 1
  // runs 4 CTAs per SM instead of 3 (registers allow 4); more warps beat more steps in flight per
  // CTA (H200, same call: TP8xEP4 T=64 GEMM2 56.2 -> 51.2 us, end to end ep16 T=8 78.3 -> 71.8,
  // tp8ep4 T=64 153.2 -> 149.5, T=8 49.7 -> 50.6; bench/NOTES.md D round 12).
  static constexpr int kStages = 4;
  static constexpr int kActPitch = KS * 128 + 16;  // bytes per token row: ldmatrix conflict-free
  static constexpr int kA = KS * (kWBytes + kSBytes);       // activation rows' offset in a stage
  static constexpr int kStageBytes = kA + kBN * kActPitch;  // a multiple of 128
  static_assert(kStageBytes % 128 == 0, "stage alignment");
};

// Shared-memory carve-up (offsets from a 128-byte aligned base); the members finish_tile uses
// have the same names as decode_gemm_kernel.cuh's Smem<S>.
template <int S>
struct BulkSmem {
  static constexpr int kStages = BulkRing::kStages;
  static constexpr int kRing = 0;
  static constexpr int kRed = kRing + kStages * BulkRing::kStageBytes;  // (S - 1) partials
  static constexpr int kOut = kRed + (S - 1) * kPartBytes;
  static constexpr int kAmax = kOut + kStageOutBytes;            // [4 warps][16]
  static constexpr int kPrefix = kAmax + 4 * kBN * 4;            // [kMaxExperts + 1]
  static constexpr int kSpan = kPrefix + (kMaxExperts + 1) * 4;  // [kMaxExperts] begin | rows << 16
  static constexpr int kWarpSum = kSpan + kMaxExperts * 4;       // [8]
  static constexpr int kBar = (kWarpSum + 8 * 4 + 7) & ~7;       // full[NS], empty[NS]
  static constexpr int kRedBar = kBar + 2 * kStages * 8;         // red_full, red_free
  static constexpr int kEnd = kRedBar + 2 * 8;
  static constexpr size_t kDynamic = kEnd + 128;  // + alignment slack
};
// Split 4 keeps 3 CTAs per SM (228 KB, 1 KB reserved per CTA): with 2 the split rule's cluster
// waves double and it falls back to no split at EP16 T=1 (GEMM2 11.4 -> 14.6 us, D round 11).
static_assert(3 * (BulkSmem<4>::kDynamic + 1024) <= 228 * 1024, "split 4: 3 CTAs per SM");

// ---- PTX wrappers (sm_90) beyond decode_tile.cuh's ----
// 1-D bulk copy global -> this CTA's shared memory, completing `bytes` on mbarrier `bar`.
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void* src, uint32_t bytes,
                                         uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void bulk_g2s_hint(uint32_t dst, const void* src, uint32_t bytes,
                                              uint32_t bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint "
      "[%0], [%1], %2, [%3], %4;\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}

// Adds `bytes` to the transactions the barrier's current phase waits for, without arriving: the
// weights a CTA copies before pdl::wait() (kSpec), whose stage completes only after the
// producer's arrive for the activation rows, issued after the wait.
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// GEMM1 on its own inputs (DecodeSpec::own): the token of row r of expert e's rows, i.e. of its
// r-th pair in pair order (the glue's stable grouping, x_row = pair / k), found in the ids 32
// pairs per ballot, 128 pairs per round of loads (one L2 round trip per round, not per ballot:
// the producer does this once per tile); lanes whose r is not a row of e get token 0 (unused).
// Whole warp.
__device__ __forceinline__ int own_row_token(const DecodeSpec& spec, int num_experts, int e, int r,
                                             int lane) {
  constexpr int kBatch = 4;
  int token = 0, seen = 0;
  for (int w0 = 0; w0 < spec.pairs; w0 += 32 * kBatch) {
    int id[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = w0 + 32 * j + lane;
      id[j] = i < spec.pairs ? __ldcg(spec.ids + i) : -1;  // -1: no expert's
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const bool hit = smxx::local_expert(id[j], spec.expert_start, num_experts) == e;
      unsigned m = __ballot_sync(0xFFFFFFFFu, hit);
      const int c = __popc(m);
      if (r >= seen && r < seen + c) {
        for (int q = seen; q < r; ++q) m &= m - 1;  // drop the pairs before the r-th
        token = (w0 + 32 * j + __ffs(static_cast<int>(m)) - 1) / spec.own.top_k;
      }
      seen += c;
    }
  }
  return token;
}

// kSpec (decode_gemm.h, DecodeSpec): the tile list from spec.ids and (spec.preload) the first
// tile's first kStages stages of weights requested before pdl::wait(); for GEMM1 on its own
// inputs, no wait before the mainloop at all (own_row_token, finish_tile's kOwn).
// kSmall: launched only with p.small_scales (expand_fragment's kSmallOnly).
template <int S, bool kGemm1, bool kSpec, bool kSmall = false>
__global__ void __cluster_dims__(S, 1, 1) __launch_bounds__(kBulkThreads)
    decode_bulk_kernel(const KernelArgs p, const DecodeSpec spec) {
  timeline_stamp(kGemm1, kTlStart);  // (empty outside MXMOE_DECODE_TIMELINE builds)
  constexpr int KS = kBulkStageSteps;
  using L = BulkSmem<S>;
  using R = BulkRing;
  constexpr int kStages = R::kStages, kStageBytes = R::kStageBytes, kActPitch = R::kActPitch;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = ptx::align_smem<128>(smem_raw);
  const uint32_t sbase = ptx::smem_addr(smem);
  int* sPrefix = reinterpret_cast<int*>(smem + L::kPrefix);
  uint32_t* sSpan = reinterpret_cast<uint32_t*>(smem + L::kSpan);
  int* sWarp = reinterpret_cast<int*>(smem + L::kWarpSum);
  const uint32_t bar_full = sbase + L::kBar;          // + 8 s
  const uint32_t bar_empty = bar_full + 8 * kStages;  // + 8 s
  const uint32_t bar_red_full = sbase + L::kRedBar;   // rank 0: partials landed
  const uint32_t bar_red_free = bar_red_full + 8;     // ranks > 0: rank 0 read them

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int KT = p.K / kStepK, m_tiles = p.M / kTileM;
  const SplitSlice sl = split_slice<S>(KT);
  const uint32_t rank = sl.rank;
  const int cid = sl.cid, nclu = sl.nclu, k_begin = sl.k_begin, k_end = sl.k_end;
  const int nk = k_end - k_begin;

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbar_init(bar_full + 8 * s, 1);
      ptx::mbar_init(bar_empty + 8 * s, 4);
    }
    ptx::mbar_init(bar_red_full, 1);  // rank 0's expect_tx + the partials' bytes
    ptx::mbar_init(bar_red_free, 1);
    ptx::mbar_init_fence();
  }
  const int64_t mk = static_cast<int64_t>(p.M) * p.K;
  TileWalker walk;  // per warp
  // A tile's weights and scales (the prepacked order: its K steps back to back).
  auto weight_src = [&](const TileInfo& ti) {
    return p.w_packed + ti.e * (mk / 2) + static_cast<int64_t>(ti.mt) * KT * kWBytes;
  };
  auto scale_src = [&](const TileInfo& ti) {
    return p.w_scales + ti.e * (mk / 32) + static_cast<int64_t>(ti.mt) * KT * kSBytes;
  };
  int pre = 0;  // stages of the first tile whose weights were requested before the wait
  // GEMM1 on its own inputs (DecodeSpec::own): it reads nothing the chain writes, so it waits
  // for the previous kernel only before it exits.
  const bool own = kSpec && kGemm1 && spec.own.x != nullptr;
  if constexpr (kSpec) {
    // Nothing here reads what the chain writes unfenced: the ids were complete before it began
    // or are published by their ready flag (the GPU router's, set by the prologue), the weights
    // never change (decode_gemm.h, DecodeSpec). (The prefix's barriers publish the mbarriers.)
    wait_ids_ready(spec.ids_ready);
    build_tile_prefix_from_ids<kBN, kBulkThreads, kMaxExperts>(
        p, spec.ids, spec.pairs, spec.expert_start, m_tiles, sPrefix, sWarp, sSpan);
    if constexpr (S > 1) cluster_sync_all();  // peers' barriers exist before any remote arrive
    // (A cluster past the balanced stride has no tile: it must not leave copies in flight.)
    const int tiles = sPrefix[p.num_experts];
    if (spec.preload && warp == 4 && cid < tiles &&
        cid < decode_tile_stride(tiles, nclu, spec.balance)) {
      const TileInfo ti = walk.next(sbase + L::kPrefix, sbase + L::kSpan, p.num_experts, cid, lane);
      const uint8_t* wq = weight_src(ti);
      const uint8_t* ws = scale_src(ti);
      const uint64_t policy = evict_first_policy();
      pre = min(kStages, (nk + KS - 1) / KS);
      for (int j = 0; j < pre; ++j) {
        const int kb = k_begin + j * KS;
        const uint32_t n = min(KS, k_end - kb);
        if (lane == 0) mbar_expect_tx(bar_full + 8 * j, n * (kWBytes + kSBytes));
        __syncwarp();
        const uint32_t stage = sbase + L::kRing + j * kStageBytes;
        if (lane == 30) {
          bulk_g2s_hint(stage, wq + static_cast<int64_t>(kb) * kWBytes, n * kWBytes,
                        bar_full + 8 * j, policy);
        } else if (lane == 31) {
          bulk_g2s_hint(stage + KS * kWBytes, ws + static_cast<int64_t>(kb) * kSBytes, n * kSBytes,
                        bar_full + 8 * j, policy);
        }
      }
    }
    if (!own) pdl::wait();  // offsets, rows, activations: written by earlier kernels
    timeline_stamp(kGemm1, kTlWaited);
    if constexpr (!kGemm1) pdl::launch_dependents();
  } else {
    // Everything below reads what earlier kernels of the chain wrote (offsets, rows,
    // activations).
    pdl::wait();
    timeline_stamp(kGemm1, kTlWaited);
    if constexpr (!kGemm1) pdl::launch_dependents();  // as decode_gemm_kernel.cuh's GEMM2
    // (its __syncthreads also publishes the mbarriers)
    build_tile_prefix<kBN, kBulkThreads>(p, m_tiles, sPrefix, sWarp, sSpan);
    if constexpr (S > 1) cluster_sync_all();  // peers' barriers exist before any remote arrive
  }
  const int total = sPrefix[p.num_experts];
  const int stride = decode_tile_stride(total, nclu, spec.balance);
  const int first = cid < stride ? cid : total;  // this cluster's first tile (total: none)
  // GEMM1's early trigger (DecodeSpec::trigger): GEMM2's CTAs start while this grid finishes.
  if constexpr (kGemm1) {
    if (spec.trigger == kTriggerAlways ||
        (S > 1 && (spec.trigger == kTriggerSplit ||
                   (spec.trigger == kTriggerSplitOneTile && total <= nclu)))) {
      pdl::launch_dependents();
    }
  }

  if (warp == 4) {
    // ================= producer warp =================
    const uint64_t policy = evict_first_policy();
    uint32_t it = 0;
    for (int tile = first; tile < total; tile += stride) {
      const TileInfo ti =
          walk.next(sbase + L::kPrefix, sbase + L::kSpan, p.num_experts, tile, lane);
      const uint8_t* wq = weight_src(ti);
      const uint8_t* ws = scale_src(ti);
      // This lane's token row (lane < nrows): the glue's (act_row), or with own inputs the
      // caller's, its token found in the ids.
      auto glue_row = [&] {
        const int64_t row = p.act_row ? p.act_row[ti.p0 + lane] : ti.p0 + lane;
        return p.act + row * p.act_stride;
      };
      const __nv_bfloat16* arow = p.act;
      if constexpr (kSpec && kGemm1) {
        if (own) {
          const uint32_t span = ptx::lds_u32(sbase + L::kSpan + 4 * ti.e);
          const int r = ti.p0 - static_cast<int>(span & 0xFFFFu) + lane;  // rank in the expert
          const int token = own_row_token(spec, p.num_experts, ti.e, r, lane);
          if (lane < ti.nrows) arow = spec.own.x + token * spec.own.x_stride;
        } else if (lane < ti.nrows) {
          arow = glue_row();
        }
      } else if (lane < ti.nrows) {
        arow = glue_row();
      }
      for (int kb = k_begin; kb < k_end; kb += KS, ++it) {
        const uint32_t n = min(KS, k_end - kb);  // steps in this stage
        const int s = it % kStages;
        if (it >= kStages) mbar_wait(bar_empty + 8 * s, ((it / kStages) - 1) & 1);
        const uint32_t stage = sbase + L::kRing + s * kStageBytes;
        // The first tile's first `pre` stages have their weights in flight already (kSpec).
        const bool weights = !kSpec || static_cast<int>(it) >= pre;
        if (lane == 0) {
          mbar_arrive_expect_tx(bar_full + 8 * s,
                                n * ((weights ? kWBytes + kSBytes : 0u) + 128u * ti.nrows));
        }
        __syncwarp();
        if (lane < ti.nrows) {
          bulk_g2s(stage + R::kA + lane * kActPitch, arow + kb * kStepK, 128 * n, bar_full + 8 * s);
        } else if (weights && lane == 30) {
          bulk_g2s_hint(stage, wq + static_cast<int64_t>(kb) * kWBytes, n * kWBytes,
                        bar_full + 8 * s, policy);
        } else if (weights && lane == 31) {
          bulk_g2s_hint(stage + KS * kWBytes, ws + static_cast<int64_t>(kb) * kSBytes, n * kSBytes,
                        bar_full + 8 * s, policy);
        }
      }
    }
    if (own) pdl::wait();  // (own inputs) the chain's earlier kernels end before this one
    return;                // the consumers' waits cover every copy this warp issued
  }

  // ================= consumer warps =================
  const int g = lane >> 2, t = lane & 3;
  // ldmatrix.x4 row addresses of the wide and narrow steps (step_lm_offset).
  const uint32_t lm_wide = step_lm_offset<false>(lane, kActPitch);
  const uint32_t lm_narrow = step_lm_offset<true>(lane, kActPitch);
  uint32_t it = 0;
  int n_red = 0;  // split tiles done (parity of the red barriers)
  for (int tile = first; tile < total; tile += stride) {
    const TileInfo ti = walk.next(sbase + L::kPrefix, sbase + L::kSpan, p.num_experts, tile, lane);
    Gemm2Cols cols{};
    if (!kGemm1 && rank == 0) cols = gemm2_cols(p, ti, t);  // in flight during the mainloop
    float d[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) d[i] = 0.0f;
    // kNarrow: <= 8 token rows (step_mma).
    auto stages = [&](auto narrow_tag) {
      constexpr bool kNarrow = decltype(narrow_tag)::value;
      // One stage of n steps; kFull (kSmall kernels only): n == KS known at compile time, so
      // the stage has no per-step predicates and its steps' expansions and MMAs are one basic
      // block (with the predicates each step is a block of its own, and its MMA chain drains
      // before the next step's expansion may start).
      auto stage_math = [&](int n, auto full_tag) {
        constexpr bool kFull = decltype(full_tag)::value;
        const int s = it % kStages;
        mbar_wait(bar_full + 8 * s, (it / kStages) & 1);
        if (it == 0) timeline_stamp(kGemm1, kTlData);
        const uint8_t* stage = smem + L::kRing + s * kStageBytes;
        const uint32_t act =
            sbase + L::kRing + s * kStageBytes + R::kA + (kNarrow ? lm_narrow : lm_wide);
        // All of the stage's loads first (independent, in flight together), then the math.
        uint4 q[KS];
        uint32_t sc[KS], b[KS][4][4];
#pragma unroll
        for (int j = 0; j < KS; ++j) {
          if (kFull || j < n) {
            q[j] = *reinterpret_cast<const uint4*>(stage + j * kWBytes + tid * kFragBytes);
            sc[j] = *reinterpret_cast<const uint32_t*>(stage + KS * kWBytes + j * kSBytes +
                                                       (8 * warp + g) * kFragScaleBytes);
            step_load_b<kNarrow>(act + 128 * j, b[j]);
          }
        }
        __syncwarp();
        if (lane == 0) ptx::mbar_arrive(bar_empty + 8 * s);  // the stage is in registers: refill it
#pragma unroll
        for (int j = 0; j < KS; ++j) {
          if (kFull || j < n) {
            uint32_t a[16];
            expand_fragment<kSmall>(q[j], sc[j], a, p.small_scales);
            step_mma<kNarrow>(d, a, b[j]);
          }
        }
      };
      for (int kb = 0; kb < nk; kb += KS, ++it) {
        const int n = min(KS, nk - kb);  // steps in this stage
        if (kSmall && n == KS) {
          stage_math(n, std::true_type());
        } else {
          stage_math(n, std::false_type());
        }
      }
    };
    if (ti.nrows <= kBN / 2)
      stages(std::true_type());
    else
      stages(std::false_type());
    if (tile + stride >= total) timeline_stamp(kGemm1, kTlMath);

    if constexpr (kSpec && kGemm1) {
      finish_tile<S, kGemm1, L, true>(p, ti, cols, d, smem, sbase, rank, tile + stride >= total,
                                      n_red, spec);
    } else {
      finish_tile<S, kGemm1, L>(p, ti, cols, d, smem, sbase, rank, tile + stride >= total, n_red);
    }
  }
  if (own) pdl::wait();             // (own inputs) the chain's earlier kernels end before this one
  timeline_stamp(kGemm1, kTlExit);  // thread 0: a consumer, the CTA's last warps to finish
}

}  // namespace mxmoe::sm90::decode
