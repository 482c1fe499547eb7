// src/cuda/sm90/grouped_gemm_ws_kernel.cuh: the warp-specialized SM90 grouped MoE GEMM for many
// tokens per expert (prefill): GEMM1 + SiTU-GLU (+ MXFP8 requantization), or GEMM2 + routing
// weight. Same numerics, operand layouts and outputs as grouped_gemm_kernel.cuh (read it first);
// this file changes who does what inside a CTA and how tiles are cut and ordered.
//
// CTA = 1 + C warpgroups, C = 3 consumers (512 threads, tile_n 160; WsShape below), one CTA per
// SM, persistent:
//  - warpgroup 0, the producer (setmaxnreg down to 32 registers): gathers the tile's
//    activation rows with cp.async (16 B per thread, the 128-byte swizzle, rows through act_row;
//    rows past the unit's end are not copied) into a ring of `stages` slots of cap x 128 B (64 K
//    of BF16 per row). A slot is handed over through two mbarriers: the producer waits on
//    empty[slot], copies, and kWsLag steps later (its own cp.async group has landed:
//    cp.async.wait_group, then the proxy fence so wgmma's async proxy sees the bytes) arrives on
//    full[slot] (128 arrivals).
//  - warpgroups 1..C, the consumers (setmaxnreg up to 160): a CTA tile is 64 C weight rows
//    = C 64-row weight tiles (mt = C mg + consumer), all over the same activation slot. Each
//    consumer streams its own prepacked MXFP4 fragments into registers two K steps ahead (the
//    last two steps of a tile already fetch the next tile's first two), expands them to BF16
//    (expand_fragment) and issues 4 wgmma m64nNk16 (RS) per 64-K step; after wgmma.wait_group 1
//    the previous step's slot is free: one arrival per warp on empty[slot] (4 C per phase). The
//    consumers are not synchronized with each other, so one converts while the tensor core
//    runs another's wgmmas; consumer c + 1 may start `skew` steps after consumer c (a named
//    barrier, once; tune bits 12-15, default 0), so their epilogues do not coincide. A consumer
//    whose mt is past the matrix (64-row tiles not a multiple of C) still waits full / arrives
//    empty for every step, keeping the barrier counts fixed.
//  - kSlotW (GEMM2 at short K, kWsSlotWeightsMaxSteps): the producer also copies each
//    consumer's fragments and scale words of the step into the slot (the same cp.async group
//    and full barrier), and the consumers read theirs back from shared memory.
// Token tiles ("units"): an expert of r rows is cut into n = ceil(r / cap) nearly equal units of
//  sz = ceil(r / n) rows (the last one may be shorter), and each unit runs the narrowest wgmma
//  N in {32, 64, ..., cap} that holds it. 293 rows at cap 160 -> 2 units of 147 -> N = 160
//  (8% padding), where fixed 128-wide tiles pad 31%.
// Schedule: every CTA builds the same unit list in shared memory from expert_offsets (on the
//  device, graph-capturable), ordered by N descending (heavy tiles first, the narrow ones fill
//  the tail; and a CTA meets the widths in order, so each width has its own loop), then by
//  expert; tile t = unit u x weight group mg with mg fastest (CTAs running
//  together share the unit's activation rows through L2); CTA b takes t = b, b + grid, ...
// Epilogues straight from the accumulator registers (no staging: the producer already fills
//  the slots with the next tile): GEMM1 writes each output (token, intermediate) once as BF16,
//  GEMM2 each (token, hidden) once as fp32; every output element has exactly one writer and
//  there are no atomics, so results are bit-identical run to run. The MX amax of a token's 32
//  intermediates spans the consumer's 4 warps: shuffles, then shared memory and named barriers
//  of that consumer's 128 threads, one of which works out the block's scale. GEMM2 rows whose
//  token owns no other pair go to out instead of y (smxx/gemm2_store.cuh); tiles of experts
//  that have such rows (the grouping's flag) take an epilogue that first tabulates each
//  column's weight and row address in the same scratch.
// Files: this one holds the consumer's per-tile loop (WsConsumerCtx, ws_consumer) and the kernel;
//  grouped_gemm_ws_shape.cuh the CTA shape and knobs, grouped_gemm_ws_schedule.cuh the units and
//  tiles, grouped_gemm_ws_producer.cuh the producer, grouped_gemm_ws_tile.cuh one consumer tile
//  (mainloop and epilogues).
// Limitations: the activation tile is gathered by cp.async (no TMA, since GEMM1's rows are
//  scattered through act_row); weights go to registers except in kSlotW; the unit list needs
//  max_rows / cap + num_experts ints of shared memory (the launcher falls back to
//  grouped_gemm_kernel.cuh when it does not fit with kWsMinStages slots).
#pragma once

#include <cstdint>

#include "sm90/grouped_gemm_kernel.cuh"
#include "sm90/grouped_gemm_ws_producer.cuh"
#include "sm90/grouped_gemm_ws_schedule.cuh"
#include "sm90/grouped_gemm_ws_shape.cuh"
#include "sm90/grouped_gemm_ws_tile.cuh"
#include "sm90/ptx.cuh"
#include "smxx/pdl.cuh"

namespace mxmoe::sm90 {

// The state a consumer carries from tile to tile.
template <int C>
struct WsConsumerCtx {
  const KernelArgs& p;
  int KT, cw, warp, lane;
  uint32_t full, empty;
  uint32_t desc0, desc_stride;  // slot 0's wgmma descriptor low word, and its step per slot
  int stages, slot = 0, phase = 0;
  uint32_t sAmax;  // shared address of this consumer's amax scratch
  static constexpr int kQStep = kWarpgroup * kFragBytes, kSStep = kRowPairs * kFragScaleBytes;
  uint4 rq[2];
  uint32_t rs[2];
  int par = 0;  // weight buffer of the tile's step 0
  const uint8_t *wq = nullptr, *ws = nullptr, *nq = nullptr, *ns = nullptr;
  bool nact = false;
  bool expand = true, store = true;
  bool steady = true;              // steady steps allowed (not with the no-conversion diagnostic)
  uint32_t wfrag = 0, wscale = 0;  // kSlotW: this thread's fragment and scale word in stage 0
  int skew_at = -1;        // consumer c < C - 1: the first tile's step after which c + 1 starts
  int* h_ready = nullptr;  // GEMM1: per-expert counters of finished 64-row tiles (ws_wait_rows)
  int count_tune = 0;      // kWsTuneNoCountFence / kWsTuneNoCountBarrier (diagnostics)
  // GEMM1, after a tile's h stores: this consumer's 128 threads have issued them (named barrier),
  // then one thread releases them to GPU scope and counts the tile for expert e.
  __device__ __forceinline__ void count_rows(int e) {
    if (h_ready == nullptr) return;
    if ((count_tune & kWsTuneNoCountBarrier) == 0) ptx::named_barrier(1 + cw, kWarpgroup);
    if (warp == 0 && lane == 0) {
      if ((count_tune & kWsTuneNoCountFence) == 0) __threadfence();
      atomicAdd(h_ready + e, 1);
    }
  }
  __device__ __forceinline__ WsConsumerCtx(const KernelArgs& args) : p(args) {}
  __device__ __forceinline__ void skew_arrive(int kb) {
    if (kb == skew_at) {
      ptx::named_barrier_arrive(WsShape<C>::kSkewBarrier + cw, 2 * kWarpgroup);
      skew_at = -1;
    }
  }
  __device__ __forceinline__ void advance() {
    if (++slot == stages) {
      slot = 0;
      phase ^= 1;
    }
  }
};

template <int C, bool kGemm1, bool kOut, bool kSlotW, bool kSmall = false>
__device__ __forceinline__ void ws_consumer(const KernelArgs& p, int cap, int stages,
                                            const int* sUnits, int total, int m_groups, int KT,
                                            uint32_t slots, uint32_t wslots, uint32_t full,
                                            uint32_t empty, uint32_t sAmaxAll, int tune,
                                            int* h_ready) {
  WsConsumerCtx<C> c(p);
  if constexpr (kGemm1) c.h_ready = h_ready;
  c.expand = (tune & kWsTuneNoExpand) == 0;
  c.store = (tune & kWsTuneNoStore) == 0;
  c.count_tune = tune & (kWsTuneNoCountFence | kWsTuneNoCountBarrier);
  c.steady = c.expand && (tune & kWsTuneNoSteady) == 0;
  c.cw = threadIdx.x / kWarpgroup - 1;  // 0 .. C - 1
  const int tid = threadIdx.x & (kWarpgroup - 1);
  c.warp = tid >> 5;
  c.lane = tid & 31;
  c.KT = KT;
  c.full = full;
  c.empty = empty;
  c.desc0 = ptx::desc_sw128_lo_of(slots);
  c.desc_stride = cap * 128 / 16;
  c.stages = stages;
  c.sAmax = sAmaxAll + c.cw * WsShape<C>::kAmaxConsumerBytes;
  const int m_tiles = p.M / kTileM, g = c.lane >> 2;
  const int64_t mk = static_cast<int64_t>(p.M) * p.K;
  if constexpr (kSlotW) {
    // The producer's order in a weight stage (ws_producer): fragments [consumer][thread], then
    // scale words [consumer][row pair].
    using S = WsShape<C>;
    c.wfrag = wslots + c.cw * S::kWFragBytes + tid * kFragBytes;
    c.wscale =
        wslots + C * S::kWFragBytes + c.cw * S::kWScaleBytes + (8 * c.warp + g) * kFragScaleBytes;
  }

  // This consumer's weight fragments of tile T (false: its 64-row tile is past the matrix).
  auto weights_of = [&](const WsTile& T, const uint8_t** wq, const uint8_t** ws) {
    const int mt = C * T.mg + c.cw;
    if (mt >= m_tiles) return false;
    *wq = p.w_packed + T.e * (mk / 2) +
          (static_cast<int64_t>(mt) * KT * kWarpgroup + tid) * kFragBytes;
    *ws = p.w_scales + T.e * (mk / 32) +
          (static_cast<int64_t>(mt) * KT * kRowPairs + 8 * c.warp + g) * kFragScaleBytes;
    return true;
  };

  // A CTA's tiles come in non-increasing wgmma width (the unit list is sorted by it), so one
  // loop per width runs them in order: each loop inlines one width only (one loop with a switch
  // over widths made ptxas serialize the wgmmas, C7512).
  bool prefetched = false;  // steps 0 and 1 of this tile already loaded by the previous tile
  int tile = blockIdx.x;
  const int skew = (tune & kWsTuneSkewMask) >> kWsTuneSkewShift;
  // Consumer c + 1 starts `skew` K steps after consumer c (a named barrier each, once).
  // Consumer 0's mt = C mg is always a real tile; a later one may be past the matrix in its
  // first tile, and then arrives from the barrier-keeping loop below.
  if (skew > 0 && tile < total) {
    if (c.cw > 0) ptx::named_barrier(WsShape<C>::kSkewBarrier + c.cw - 1, 2 * kWarpgroup);
    if (c.cw < C - 1) c.skew_at = min(skew, KT) - 1;
  }
  // A tile without weight rows for this consumer (its mt is past the matrix): keep the barrier
  // counts, waiting for each fill and freeing it at once.
  auto idle_tile = [&]() {
    for (int kb = 0; kb < KT; ++kb) {
      ptx::mbar_wait(full + 8 * c.slot, c.phase);
      if (c.lane == 0) ptx::mbar_arrive(empty + 8 * c.slot);
      c.skew_arrive(kb);
      c.advance();
    }
  };
  auto tiles_of_width = [&](auto n_tag) {
    constexpr int N = decltype(n_tag)::value;
    for (; tile < total; tile += gridDim.x) {
      const WsTile T = ws_decode(p, sUnits, cap, m_groups, tile);
      if (T.ncls < N) return;  // the next (narrower) loop continues with this tile
      if constexpr (kSlotW) {
        if (C * T.mg + c.cw < m_tiles) {
          WsTileRunner<C, N, kGemm1, kOut, true, kSmall>::run(c, T);
        } else {
          idle_tile();
        }
        continue;
      }
      const bool active = weights_of(T, &c.wq, &c.ws);
      const int next = tile + gridDim.x;
      c.nact = next < total && KT >= 2 &&
               weights_of(ws_decode(p, sUnits, cap, m_groups, next), &c.nq, &c.ns);
      if (!active) {
        idle_tile();
        prefetched = false;
        c.par = (c.par + KT) & 1;
        continue;
      }
      if (!prefetched) {  // buffers by constant index: a run-time one spills to local memory
        const uint8_t* q1 = c.wq + (KT > 1 ? c.kQStep : 0);
        const uint8_t* s1 = c.ws + (KT > 1 ? c.kSStep : 0);
        if (c.par) {
          c.rq[1] = ptx::ld_stream_v4(c.wq);
          c.rs[1] = ptx::ld_stream_u32(c.ws);
          c.rq[0] = ptx::ld_stream_v4(q1);
          c.rs[0] = ptx::ld_stream_u32(s1);
        } else {
          c.rq[0] = ptx::ld_stream_v4(c.wq);
          c.rs[0] = ptx::ld_stream_u32(c.ws);
          c.rq[1] = ptx::ld_stream_v4(q1);
          c.rs[1] = ptx::ld_stream_u32(s1);
        }
      }
      WsTileRunner<C, N, kGemm1, kOut, false, kSmall>::run(c, T);
      if constexpr (kGemm1) c.count_rows(T.e);
      prefetched = c.nact;
      c.par = (c.par + KT) & 1;
    }
  };
  // One loop per width a tile can take (tile_heuristic.h ws_width), widest first. Spelled out:
  // the same calls through a fold over the class list changed the kernel's SASS.
  static_assert(
      WsShape<C>::kClasses == 5 && ws_width_of_class(4) == 160 && ws_width_of_class(0) == 32,
      "a tiles_of_width call for every width");
  tiles_of_width(std::integral_constant<int, 160>());
  tiles_of_width(std::integral_constant<int, 128>());
  tiles_of_width(std::integral_constant<int, 96>());
  tiles_of_width(std::integral_constant<int, 64>());
  tiles_of_width(std::integral_constant<int, 32>());
}

template <int C, bool kGemm1, bool kOut, bool kSlotW, bool kSmall = false>
__global__ void __launch_bounds__(WsShape<C>::kThreads, 1)
    grouped_gemm_ws_kernel(const KernelArgs p, int cap, int stages, int max_units, int tune,
                           int* h_ready, int h_tiles) {
  static_assert(!(kGemm1 && kSlotW), "the slot weights serve GEMM2 only (launch_ws)");
  using S = WsShape<C>;
  constexpr int kWStage = kSlotW ? S::kWStageBytes : 0;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = ptx::align_smem<1024>(smem_raw);
  const uint32_t slots = ptx::smem_addr(smem);
  const uint32_t wslots = slots + stages * cap * 128;  // cap * 128 keeps slot 0 1024-aligned
  const uint32_t full = wslots + stages * kWStage, empty = full + 8 * stages;
  float* sAmax =
      reinterpret_cast<float*>(smem + static_cast<size_t>(stages) * (cap * 128 + kWStage + 16));
  int* sScan = reinterpret_cast<int*>(reinterpret_cast<uint8_t*>(sAmax) + S::kAmaxBytes);
  int* sUnits = sScan + S::kScanInts;

  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      ptx::mbar_init(full + 8 * s, kWarpgroup);  // every producer thread, once per fill
      ptx::mbar_init(empty + 8 * s, 4 * C);      // every consumer warp, once per use
    }
    ptx::mbar_init_fence();
  }
  // expert_offsets, act_row and the activations come from earlier kernels; GEMM2 with h_ready
  // waits per expert instead (ws_wait_rows), GEMM1 with it lets GEMM2 launch now.
  if (kGemm1 || h_ready == nullptr) pdl::wait();
  if (kGemm1 && h_ready != nullptr && (tune & kWsTuneNoTrigger) == 0) pdl::launch_dependents();
  const int total_units = ws_build_units<C>(p, cap, max_units, sScan, sUnits);  // syncs the CTA
  const int m_groups = (p.M / kTileM + C - 1) / C;
  const int total = total_units * m_groups;
  const int KT = p.K / kStepK;
  if (threadIdx.x < kWarpgroup) {
    ptx::setmaxnreg_dec<S::kProducerRegs>();
    const bool load = (tune & kWsTuneNoLoad) == 0;
    switch (tune & 15) {
      case 4:
        ws_producer<C, 4, kSlotW>(p, cap, stages, load, sUnits, total, m_groups, KT, slots, wslots,
                                  full, empty, kGemm1 ? nullptr : h_ready, h_tiles);
        break;
      case 6:
        ws_producer<C, 6, kSlotW>(p, cap, stages, load, sUnits, total, m_groups, KT, slots, wslots,
                                  full, empty, kGemm1 ? nullptr : h_ready, h_tiles);
        break;
      default:
        ws_producer<C, 2, kSlotW>(p, cap, stages, load, sUnits, total, m_groups, KT, slots, wslots,
                                  full, empty, kGemm1 ? nullptr : h_ready, h_tiles);
        break;
    }
  } else {
    ptx::setmaxnreg_inc<S::kConsumerRegs>();
    ws_consumer<C, kGemm1, kOut, kSlotW, kSmall>(p, cap, stages, sUnits, total, m_groups, KT, slots,
                                                 wslots, full, empty, ptx::smem_addr(sAmax), tune,
                                                 h_ready);
  }
}

}  // namespace mxmoe::sm90
