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
// Limitations: the activation tile is gathered by cp.async (no TMA, since GEMM1's rows are
//  scattered through act_row); weights go to registers except in kSlotW; the unit list needs
//  max_rows / cap + num_experts ints of shared memory (the launcher falls back to
//  grouped_gemm_kernel.cuh when it does not fit with kWsMinStages slots).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "mxmoe/formats.h"
#include "sm90/grouped_gemm_kernel.cuh"
#include "sm90/mxfp4_fragment.h"
#include "sm90/ptx.cuh"
#include "sm90/tile_heuristic.h"
#include "smxx/mxfp8_device.cuh"
#include "smxx/situ_device.cuh"
#include "smxx/pdl.cuh"
#include "smxx/warp_scan.cuh"

namespace mxmoe::sm90 {

// The CTA's shape by its number of consumer warpgroups C (a CTA tile is 64 C weight rows). All
// registers of the SM are split between the producer and the consumers: 512 threads, producer
// 32, consumers 160 (128 * 32 + 384 * 160 = 65536), so the widest token tile is 160 (80
// accumulators). Why three consumers: the consumers' step is latency bound (ncu, EP16 T=16384
// GEMM1 with two: 2 consumer warps per scheduler, 6.6 cycles per issued instruction, 45% of the
// cycles issue nothing; bench/NOTES.md P round 10), so a third warp per scheduler adds MMA work
// per step; each warp's chain grows less (8.1 cycles per instruction with three), and GEMM1 ran
// ~11% faster. The code keeps the consumer count as a parameter; two consumers (384 threads,
// 56 / 224 registers, tile_n 192) measured slower at every shape and were removed (thirteenth
// session).
template <int C>
struct WsShape {
  static_assert(C == 3, "three consumer warpgroups (two were removed: slower everywhere)");
  static constexpr int kThreads = (C + 1) * kWarpgroup;
  static constexpr int kMaxTileN = 160;
  static constexpr int kClasses = kMaxTileN / kWsWidthStep;  // wgmma widths (ws_width)
  static constexpr int kProducerRegs = 32;
  static constexpr int kConsumerRegs = 160;
  static_assert(kWarpgroup * kProducerRegs + C * kWarpgroup * kConsumerRegs <= 65536, "regs");
  static constexpr int kScanInts = (kThreads / 32) * kClasses + 16;
  // kSlotW kernels: a slot's weights, every consumer's fragments (2 KB, thread order) then its
  // scale words (128 B) of the slot's K step, copied by the producer with the activation rows.
  static constexpr int kWFragBytes = kWarpgroup * kFragBytes;
  static constexpr int kWScaleBytes = kRowPairs * kFragScaleBytes;
  static constexpr int kWStageBytes = C * (kWFragBytes + kWScaleBytes);
  static_assert(kWFragBytes == 16 * kWarpgroup && kWScaleBytes % 16 == 0 && C * 8 <= kWarpgroup,
                "one 16-byte fragment copy per producer thread and consumer, one per scale chunk");
  // GEMM1 MX amax: [consumer][token][warp] floats; GEMM2: [consumer][token] 16-byte entries.
  static constexpr int kAmaxConsumerBytes = 4 * kMaxTileN * 4;
  static constexpr int kAmaxBytes = C * kAmaxConsumerBytes;
  // Named barriers: 1..C the consumers' amax exchange, C + 1 + c the skew hand-off c -> c + 1,
  // 2 C + 1 the producer warpgroup's wait for GEMM1's rows (h_ready).
  static constexpr int kSkewBarrier = C + 1;
  static constexpr int kProducerBarrier = 2 * C + 1;
};
// cp.async groups a producer thread keeps in flight before it signals the oldest one full
// (cp.async.wait_group takes a constant: the kernel carries 2, 4 and 6; `tune` picks one).
constexpr int kWsLag = 2;
constexpr int kWsMinStages = kWsLag + 2;
// K steps ahead of use at which a consumer prefetches its weight lines into L2 (its register
// loads are 2 steps ahead; the first H200 profile after the producer fix showed GEMM2's
// consumers waiting on those loads: bench/NOTES.md P round 5). Known limit: ptxas gives every
// weight load of the step loop the same scoreboard, so a step's first use of its fragment also
// waits for the loads issued a step later, and the loop head drains them (~9% of the
// consumers' samples, P round 12; the shared-memory alternatives measured there lost more, and
// so did a per-thread cp.async ring counted by wait_group: EP16 GEMM1 +1.5-8%, P round 22).
constexpr int kWsL2Ahead = 6;
// kSlotW: the weights through the producer's slots instead (ws_producer copies them with the
// activation rows, a consumer reads its fragment back with LDS): GEMM2 with at most
// kWsSlotWeightsMaxSteps K steps (tile_heuristic.h).
// tune: bits 0-3 the producer lag (2, 4, 6; slots >= lag + 2), and three diagnostics that make
// the results wrong on purpose, for timing only: bit 8 the producer copies nothing, bit 9 the
// consumers skip the weight conversion, bit 10 they skip the epilogue's stores.
constexpr int kWsTuneNoLoad = 1 << 8, kWsTuneNoExpand = 1 << 9, kWsTuneNoStore = 1 << 10;
// tune bit 11 (results stay exact): every step takes the generic path (the A/B of the steady
// step, WsTileRunner::run).
constexpr int kWsTuneNoSteady = 1 << 11;
// tune bits 12-15: consumer c + 1 starts that many K steps after consumer c, so their epilogues
// do not coincide (the tensor core then runs one consumer's MMAs during another's epilogue).
constexpr int kWsTuneSkewShift = 12, kWsTuneSkewMask = 15 << kWsTuneSkewShift;
// tune bit 17 (exact; MXMOE_SM90_WS_OVERLAP=check): GEMM1 with h_ready does not trigger its
// dependents early (ws_wait_rows), so GEMM2 starts after it and only the counting is measured.
constexpr int kWsTuneNoTrigger = 1 << 17;
// tune bits 18, 19 (diagnostics, timing only: GEMM2 may then read h before it is visible): GEMM1's
// count of a tile skips the fence (18), and also the consumer's named barrier before it (19).
constexpr int kWsTuneNoCountFence = 1 << 18, kWsTuneNoCountBarrier = 1 << 19;
// The default skew: 0. H200, GEMM-only, EP16 T=16384 (us), three consumers, skew 0 / 2: GEMM1
// 1317 / 1325, GEMM1+MXFP8 1527 / 1585, GEMM2 637 / 658 (bench/NOTES.md P round 10; two
// consumers had preferred 2, P round 6).
constexpr int kWsDefaultSkew = 0;
constexpr int kWsMaxStages = 8;
// The BF16-h GEMM1 epilogue stores h as BF16 pairs (one shuffle per two values) from this wgmma
// width up, one value at a time below it. H100, end to end against single stores (bench/NOTES.md
// P round 26): ep16 T=8192-16384 (160-wide tiles) -0.3..-0.5%, but T=2048 (64-wide) +1.5% and
// T=4096 w4a8 (96-wide) +1%.
constexpr int kHPairsMinWidth = 128;
constexpr int kWsExpertBits = 14;  // unit = (k << 14) | expert: num_experts <= 16384

// Shared memory after the 1024-byte alignment: activation slots, weight slots (kSlotW only),
// full/empty barriers, MX amax, scan scratch, the unit list (max_units ints).
template <int C>
inline size_t ws_fixed_smem_bytes(int64_t max_units) {
  return 1024 + WsShape<C>::kAmaxBytes + WsShape<C>::kScanInts * 4 +
         static_cast<size_t>(max_units) * 4;
}
template <int C>
inline size_t ws_stage_smem_bytes(int cap, bool slot_weights) {
  return static_cast<size_t>(cap) * 128 + (slot_weights ? WsShape<C>::kWStageBytes : 0) + 16;
}

struct WsTile {
  int e, p0, nrows, ncls, mg;  // mg: the CTA's group of C 64-row weight tiles
};

// Units of expert e at width cap (tile_heuristic.h's cut; none for an empty expert). sz is
// ws_unit_rows(r, cap) spelled out: calling that helper here moved the registers of the whole
// kernel (cuobjdump), so the shipped schedule keeps the inline form.
__device__ __forceinline__ void ws_units_of(const KernelArgs& p, int e, int cap, int* begin,
                                            int* rows, int* units, int* sz) {
  expert_rows(p, e, begin, rows);
  const int r = *rows;
  if (r == 0) {
    *units = 0;
    *sz = 1;
    return;
  }
  const int n = (r + cap - 1) / cap;
  *sz = (r + n - 1) / n;
  *units = ws_unit_count(r, *sz);
}

// Fills sUnits (all threads of the CTA): units ordered by class (wgmma N) descending, then
// expert, then piece. Returns the unit count (the same in every thread).
template <int C>
__device__ int ws_build_units(const KernelArgs& p, int cap, int max_units, int* sScan,
                              int* sUnits) {
  constexpr int kThreads = WsShape<C>::kThreads, kWsClasses = WsShape<C>::kClasses;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  constexpr int kWarps = kThreads / 32;
  const int E = p.num_experts;
  const int chunk = (E + kThreads - 1) / kThreads;
  const int e0 = min(E, tid * chunk), e1 = min(E, e0 + chunk);
  int cnt[kWsClasses];
#pragma unroll
  for (int c = 0; c < kWsClasses; ++c) cnt[c] = 0;
  for (int e = e0; e < e1; ++e) {
    int b, r, n, sz;
    ws_units_of(p, e, cap, &b, &r, &n, &sz);
    if (n == 0) continue;
    const int cs = ws_class_of(sz), cl = ws_class_of(r - (n - 1) * sz);
#pragma unroll
    for (int c = 0; c < kWsClasses; ++c) cnt[c] += (c == cs ? n - 1 : 0) + (c == cl ? 1 : 0);
  }
  int incl[kWsClasses];
#pragma unroll
  for (int c = 0; c < kWsClasses; ++c) {
    const int v = smxx::warp_inclusive_sum(cnt[c], lane);
    incl[c] = v;
    if (lane == 31) sScan[warp * kWsClasses + c] = v;
  }
  __syncthreads();
  int run[kWsClasses];
  int total = 0;
#pragma unroll
  for (int c = kWsClasses - 1; c >= 0; --c) {  // widest class first
    int before = 0, all = 0;
    for (int w = 0; w < kWarps; ++w) {
      const int v = sScan[w * kWsClasses + c];
      all += v;
      if (w < warp) before += v;
    }
    run[c] = total + before + incl[c] - cnt[c];
    total += all;
  }
  for (int e = e0; e < e1; ++e) {
    int b, r, n, sz;
    ws_units_of(p, e, cap, &b, &r, &n, &sz);
    if (n == 0) continue;
    const int cs = ws_class_of(sz), cl = ws_class_of(r - (n - 1) * sz);
    int pos = 0;
#pragma unroll
    for (int c = 0; c < kWsClasses; ++c) pos = c == cs ? run[c] : pos;
    for (int k = 0; k < n - 1; ++k) {
      if (pos + k < max_units) sUnits[pos + k] = (k << kWsExpertBits) | e;
    }
#pragma unroll
    for (int c = 0; c < kWsClasses; ++c) run[c] += c == cs ? n - 1 : 0;
#pragma unroll
    for (int c = 0; c < kWsClasses; ++c) pos = c == cl ? run[c] : pos;
    if (pos < max_units) sUnits[pos] = ((n - 1) << kWsExpertBits) | e;
#pragma unroll
    for (int c = 0; c < kWsClasses; ++c) run[c] += c == cl ? 1 : 0;
  }
  __syncthreads();
  return min(total, max_units);
}

__device__ __forceinline__ WsTile ws_decode(const KernelArgs& p, const int* sUnits, int cap,
                                            int m_groups, int tile) {
  WsTile T;
  const int u = tile / m_groups;
  T.mg = tile - u * m_groups;
  const int packed = sUnits[u];
  T.e = packed & ((1 << kWsExpertBits) - 1);
  const int k = packed >> kWsExpertBits;
  int begin, rows, n, sz;
  ws_units_of(p, T.e, cap, &begin, &rows, &n, &sz);
  T.p0 = begin + k * sz;
  T.nrows = min(sz, rows - k * sz);
  T.ncls = ws_width(T.nrows);
  return T;
}

// ---- GEMM2 started under GEMM1 (h_ready) ----
// GEMM1 with h_ready counts, per expert, its consumers' finished 64-row tiles (each after its
// h stores, a release), and triggers its dependents at its start; GEMM2 launched after it with
// the same counters skips pdl::wait, so its CTAs take the SMs GEMM1's CTAs leave during GEMM1's
// last wave. Before a tile's first copy of h, thread 0 of GEMM2's producer waits (acquire) until
// expert e counts all its units' 2I / 64 tiles (units: the same cut, both kernels at the same
// cap), and the producer warpgroup passes a named barrier. Everything else GEMM2 reads was
// written before GEMM1's pdl::wait returned, which precedes GEMM2's launch. No deadlock: GEMM2
// is launched only once every GEMM1 CTA has triggered, i.e. is resident or done.
template <int C>
__device__ __forceinline__ void ws_wait_rows(const KernelArgs& p, int cap, const int* h_ready,
                                             int h_tiles, int e) {
  if (threadIdx.x == 0) {
    int begin, rows, units, sz;
    ws_units_of(p, e, cap, &begin, &rows, &units, &sz);
    const int need = units * h_tiles;
    while (ptx::ld_acquire_gpu(h_ready + e) < need) __nanosleep(128);
  }
  ptx::named_barrier(WsShape<C>::kProducerBarrier, kWarpgroup);
}

// ---- producer warpgroup: activation slots ----
// Thread (r0 = tid / 8, chunk = tid % 8) copies 16 bytes of rows r0 + 16 i, i < 10, of each
// step. Its shared-memory column is the same for every i ((r0 + 16 i) & 7 == r0 & 7), so
// the destinations are one base plus immediates, and rows past the tile's end are simply not
// copied: a token row of the slot only feeds its own output column, which the epilogue never
// stores. Per copy the step costs an add and a predicated cp.async, no branch (the first H200
// profile of this kernel showed ~25 dependent instructions and a divergent branch per copy, and
// the consumers waiting on the producer: bench/NOTES.md P round 4).
// kSlotW: the weights of the step go into the slot's weight stage in the same cp.async group:
// thread tid copies fragment tid of each consumer's 64-row tile (the tiles of one mg are adjacent
// in the prepacked order, KT * 128 16-byte units apart), threads 0 .. 8 C - 1 one 16-byte chunk
// of the scale words each; so the slot's full barrier hands over both operands, and every
// producer thread issues at most 3 + 1 copies more per step (six bulk copies from one warp made
// the slots late: bench/NOTES.md P round 12).
// The producer has 32 registers: 64-bit row pointers (2 x 10 registers) would spill, so it
// keeps 32-bit row offsets in 16-byte units and forms each address per copy from one
// (ptx::addr16: a mad.wide.u32 in asm, so the compiler cannot hoist 64-bit copies of them out
// of the step loop; SASS makes it two LEAs).
template <int C, int kLag, bool kSlotW>
__device__ __forceinline__ void ws_producer(const KernelArgs& p, int cap, int stages, bool load,
                                            const int* sUnits, int total, int m_groups, int KT,
                                            uint32_t slots, uint32_t wslots, uint32_t full,
                                            uint32_t empty, const int* h_ready, int h_tiles) {
  using S = WsShape<C>;
  constexpr int kRowsPerThread = S::kMaxTileN / 16;
  constexpr int kWStep = S::kWFragBytes / 16, kSStep16 = S::kWScaleBytes / 16;  // 16-byte units
  const int tid = threadIdx.x;  // 0..127
  const int chunk = tid & 7, r0 = tid >> 3;
  const uint32_t stage_bytes = cap * 128;
  const uint32_t col = r0 * 128 + ((chunk ^ (r0 & 7)) << 4);  // 128-byte swizzle
  const uint4* act4 = reinterpret_cast<const uint4*>(p.act);
  const uint4* w4 = reinterpret_cast<const uint4*>(p.w_packed);
  const uint4* s4 = reinterpret_cast<const uint4*>(p.w_scales);
  const int m_tiles = p.M / kTileM;
  const uint32_t mt_units = static_cast<uint32_t>(KT) * kWStep;  // one 64-row tile's fragments
  const uint32_t w_expert = static_cast<uint32_t>(static_cast<int64_t>(p.M) * p.K / 32);
  // This thread's shared destinations in a weight stage: fragment tid of consumer 0 (the others
  // at + 2 KB each), and scale chunk tid (consumer tid / 8) after the fragments.
  const uint32_t wcol = 16 * tid, scol = C * S::kWFragBytes + 16 * tid;
  int slot = 0, phase = 0, lag_slot = 0, pending = 0;
  for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
    const WsTile T = ws_decode(p, sUnits, cap, m_groups, tile);
    if (h_ready != nullptr) ws_wait_rows<C>(p, cap, h_ready, h_tiles, T.e);
    // Rows r0 + 16 i with i < nv are this thread's valid ones (act_stride % 8 == 0).
    const int nv = T.nrows > r0 ? (T.nrows - r0 + 15) / 16 : 0;
    uint32_t off[kRowsPerThread];  // 16-byte units from act4 + chunk
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      int64_t row = 0;
      if (i < nv) {
        const int r = r0 + 16 * i;
        row = p.act_row ? p.act_row[T.p0 + r] : T.p0 + r;
      }
      // One step before step 0 (unsigned: row 0's -8 wraps back to 0 at the first step).
      off[i] = static_cast<uint32_t>((row * p.act_stride) / 8) - 8u;
    }
    // kSlotW: the tile's consumers with weight rows (mt = C mg + c < m_tiles), and this thread's
    // weight offsets one step before step 0 (16-byte units; wrapping as off does; the launcher
    // checks that every offset fits 32 bits).
    const int mt0 = C * T.mg, nw = min(C, m_tiles - mt0);
    uint32_t woff = T.e * w_expert + mt0 * mt_units + tid - kWStep;
    uint32_t soff =
        T.e * (w_expert / 16) + (mt0 + (tid >> 3)) * (KT * kSStep16) + (tid & 7) - kSStep16;
    const bool scopy = tid < 8 * nw;
    for (int kb = 0; kb < KT; ++kb) {
      ptx::mbar_wait(empty + 8 * slot, phase ^ 1);
      if (load) {
        const uint32_t dst = slots + slot * stage_bytes + col;
        const uint32_t wdst = wslots + slot * S::kWStageBytes;
        // Advanced before the copies (off starts one step back): rewriting a source register
        // right after its cp.async would wait for the copy to read it (short scoreboard).
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) off[i] += 8;
        if constexpr (kSlotW) {
          woff += kWStep;
          soff += kSStep16;
        }
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) {
          if (i < nv) ptx::cp_async_16(dst + 2048 * i, ptx::addr16(act4 + chunk, off[i]), true);
        }
        if constexpr (kSlotW) {
#pragma unroll
          for (int w = 0; w < C; ++w) {
            if (w < nw) {
              ptx::cp_async_16(wdst + wcol + w * S::kWFragBytes,
                               ptx::addr16(w4, woff + w * mt_units), true);
            }
          }
          if (scopy) ptx::cp_async_16(wdst + scol, ptx::addr16(s4, soff), true);
        }
      }
      ptx::cp_async_commit();
      if (++pending > kLag) {
        ptx::cp_async_wait<kLag>();
        ptx::fence_proxy_async();
        ptx::mbar_arrive(full + 8 * lag_slot);
        lag_slot = lag_slot + 1 == stages ? 0 : lag_slot + 1;
        --pending;
      }
      if (++slot == stages) {
        slot = 0;
        phase ^= 1;
      }
    }
  }
  ptx::cp_async_wait<0>();
  ptx::fence_proxy_async();
  for (; pending > 0; --pending) {
    ptx::mbar_arrive(full + 8 * lag_slot);
    lag_slot = lag_slot + 1 == stages ? 0 : lag_slot + 1;
  }
}

// ---- consumer warpgroups ----
// One tile of wgmma width N (a multiple of 32): its own N / 2 accumulators, so every width
// gets an exact register allocation (one shared 128-register array made ptxas serialize the
// wgmmas), then the epilogue.
// kOut, GEMM1 (kBf16H): the BF16-h kernel (mxfp8_out == 0 promised by the launcher), without the
// MXFP8 epilogue; the kernel without kOut serves both forms (P round 16: a split whose MXFP8
// kernel lost its clean step loop was a wash; this keeps that kernel as it was and gives BF16 h,
// the w4a16 path, a kernel of its own: w4a16 end to end -0.3..-0.7% in two H200 calls, P round
// 20).
// kOut, GEMM2 (kToOut): the launch has an out_token table (smxx/gemm2_store.cuh). Without it the
// kernel is compiled exactly as before the table existed: the out-capable epilogue's code
// changed the plain one's schedule, ~2% on TP8xEP4's GEMM2 (bench/NOTES.md G round 5).
// kSlotW: the weights come through the slots (kWsSlotWeightsMaxSteps), else through registers.
// kSmall: launched only with p.small_scales (expand_fragment's kSmallOnly; ws_set_small).
template <int C, int N, bool kGemm1, bool kOut, bool kSlotW, bool kSmall = false>
struct WsTileRunner {
  static constexpr int kMaxTileN = WsShape<C>::kMaxTileN;
  static constexpr bool kBf16H = kGemm1 && kOut;   // GEMM1: BF16 h only, no MXFP8 epilogue
  static constexpr bool kToOut = !kGemm1 && kOut;  // GEMM2: an out_token table (direct stores)
  // Every step form's MMA half: A buffer B's registers fenced, 4 wgmmas on the slot whose
  // descriptor low word is desc_lo, commit, and wait for the previous step's group (then the
  // caller frees that step's slot).
  template <int B>
  static __device__ __forceinline__ void mma_on_slot(float (&d)[N / 2], uint32_t (&a)[2][16],
                                                     uint32_t desc_lo) {
#pragma unroll
    for (int i = 0; i < 16; ++i) ptx::fence_operand(a[B][i]);
    ptx::wgmma_fence();
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      ptx::WgmmaRS<N>::mma(d, &a[B][4 * j], ptx::desc_sw128_lo(desc_lo + 2 * j), 1);
    }
    ptx::wgmma_commit();
    ptx::wgmma_wait<1>();  // the previous step's wgmmas are done: its slot is free
  }
  // A generic step's L2 prefetch of step kb + kWsL2Ahead's lines: q / s + `ahead` steps while
  // that step is in this tile, else the next tile's (c.nact), else none.
  template <typename Ctx>
  static __device__ __forceinline__ void prefetch_ahead(const Ctx& c, const uint8_t* q,
                                                        const uint8_t* s, int ahead, int kb) {
    if (kb + kWsL2Ahead < c.KT) {
      ptx::prefetch_l2(q + ahead * c.kQStep);
      ptx::prefetch_l2(s + ahead * c.kSStep);
    } else if (c.nact && kb + kWsL2Ahead - c.KT < c.KT) {
      ptx::prefetch_l2(c.nq + (kb + kWsL2Ahead - c.KT) * c.kQStep);
      ptx::prefetch_l2(c.ns + (kb + kWsL2Ahead - c.KT) * c.kSStep);
    }
  }
  // A generic step's end: its wgmmas on the slot, the previous step's slot freed (after the
  // wait in mma_on_slot), the skew hand-off, the next slot.
  template <int B, typename Ctx>
  static __device__ __forceinline__ void mma_and_release(Ctx& c, float (&d)[N / 2],
                                                         uint32_t (&a)[2][16], int kb,
                                                         int& prev_slot) {
    mma_on_slot<B>(d, a, c.desc0 + c.slot * c.desc_stride);
    if (kb > 0 && c.lane == 0) ptx::mbar_arrive(c.empty + 8 * prev_slot);
    c.skew_arrive(kb);
    prev_slot = c.slot;
    c.advance();
  }
  // A steady step's end (kb > 0, no skew hand-off pending): the L2 prefetch of the lines at
  // q and s, its wgmmas, the previous step's slot freed, the next slot.
  template <int B, typename Ctx>
  static __device__ __forceinline__ void steady_release(Ctx& c, float (&d)[N / 2],
                                                        uint32_t (&a)[2][16], const uint8_t* q,
                                                        const uint8_t* s, int& prev_slot) {
    ptx::prefetch_l2(q);
    ptx::prefetch_l2(s);
    mma_on_slot<B>(d, a, c.desc0 + c.slot * c.desc_stride);
    if (c.lane == 0) ptx::mbar_arrive(c.empty + 8 * prev_slot);
    prev_slot = c.slot;
    c.advance();
  }
  template <typename Ctx>
  static __device__ __forceinline__ void run(Ctx& c, const WsTile& T) {
    const KernelArgs& p = c.p;
    const int KT = c.KT;
    float d[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; ++i) d[i] = 0.0f;
    uint32_t a[2][16];
    int prev_slot = 0;
    // GEMM1: the expert's SiTU betas; GEMM2: its out flag. Loaded now so the epilogue does not
    // wait on them (dependent L2 round trips per tile otherwise; bench/NOTES.md P round 9).
    float beta_e = 0.0f, linear_beta_e = 0.0f;
    bool any_out = false;  // GEMM2: may a token column of this tile go to out?
    if constexpr (kGemm1) {
      beta_e = p.beta[T.e];
      linear_beta_e = p.linear_beta[T.e];
    } else if constexpr (kToOut) {
      any_out = p.expert_has_out == nullptr || p.expert_has_out[T.e] != 0;
    }
    if constexpr (kSlotW) {
      // One 64-K step on A buffer B: the slot's activations and this consumer's weights arrive
      // together (one full barrier); read the fragment and scale word, expand them to BF16, 4
      // wgmmas on the slot, then free the previous step's slot. (Reading the next slot's
      // fragment during this step's wgmmas measured slower: bench/NOTES.md P round 17.)
      auto step = [&](int kb, auto buf) {
        constexpr int B = decltype(buf)::value;
        ptx::mbar_wait(c.full + 8 * c.slot, c.phase);
        const uint32_t wst = c.slot * WsShape<C>::kWStageBytes;
        const uint4 fq = ptx::lds_v4_b32(c.wfrag + wst);
        const uint32_t fs = ptx::lds_u32(c.wscale + wst);
        if (c.expand) expand_fragment<kSmall>(fq, fs, a[B], p.small_scales);
        mma_and_release<B>(c, d, a, kb, prev_slot);
      };
      using B0 = std::integral_constant<int, 0>;
      using B1 = std::integral_constant<int, 1>;
      // The previous tile ended with wgmma.wait_group 0, so both A buffers are free at step 0.
      int kb = 0;
      for (; kb + 1 < KT; kb += 2) {
        step(kb, B0());
        step(kb + 1, B1());
      }
      if (kb < KT) step(kb, B0());
    } else {
      // q, s: this tile's fragment and scale words of step kb + 2, advanced with kb (the only
      // weight pointers live through the mainloop).
      const uint8_t* q = c.wq + 2 * c.kQStep;
      const uint8_t* s = c.ws + 2 * c.kSStep;
      // One 64-K step on weight buffer B: expand step kb's fragment, fetch step kb + 2's (or the
      // next tile's first steps), 4 wgmmas on the slot, then free the previous step's slot.
      auto step = [&](int kb, auto buf) {
        constexpr int B = decltype(buf)::value;
        ptx::mbar_wait(c.full + 8 * c.slot, c.phase);
        if (c.expand) expand_fragment<kSmall>(c.rq[B], c.rs[B], a[B], p.small_scales);
        if (kb + 2 < KT) {
          c.rq[B] = ptx::ld_stream_v4(q);
          c.rs[B] = ptx::ld_stream_u32(s);
        } else if (c.nact) {  // the next tile's step kb + 2 - KT lands in the same buffer parity
          c.rq[B] = ptx::ld_stream_v4(c.nq + (kb + 2 - KT) * c.kQStep);
          c.rs[B] = ptx::ld_stream_u32(c.ns + (kb + 2 - KT) * c.kSStep);
        }
        // The register loads above are only two steps ahead; the weights of step kb + kWsL2Ahead
        // are pulled into L2 now so those loads hit L2 instead of waiting on DRAM.
        prefetch_ahead(c, q, s, kWsL2Ahead - 2, kb);
        q += c.kQStep;
        s += c.kSStep;
        mma_and_release<B>(c, d, a, kb, prev_slot);
      };
      // The steady step: every step of the tile's body, where step kb + 2's fragment and step
      // kb + kWsL2Ahead's lines are both in this tile, kb > 0, and no skew hand-off or diagnostic
      // is pending. It does what `step` does with none of its run-time tests: the fetch and
      // prefetch addresses are q plus immediates (q advances once per pair of steps), and the
      // four descriptors one multiply-add from the slot plus immediates. `step` spent ~95 of its
      // ~150 SASS instructions outside the conversion and the wgmmas (bench/NOTES.md P round 11).
      auto steady = [&](auto buf) {
        constexpr int B = decltype(buf)::value;  // also the step's offset from q
        ptx::mbar_wait(c.full + 8 * c.slot, c.phase);
        expand_fragment<kSmall>(c.rq[B], c.rs[B], a[B], p.small_scales);
        c.rq[B] = ptx::ld_stream_v4(q + B * c.kQStep);
        c.rs[B] = ptx::ld_stream_u32(s + B * c.kSStep);
        steady_release<B>(c, d, a, q + (B + kWsL2Ahead - 2) * c.kQStep,
                          s + (B + kWsL2Ahead - 2) * c.kSStep, prev_slot);
      };
      using B0 = std::integral_constant<int, 0>;
      using B1 = std::integral_constant<int, 1>;
      int kb = 0;
      if (c.par) {
        step(kb, B1());
        ++kb;
      }
      const bool fast = c.steady && c.skew_at < 0;
      for (; kb + 1 < KT; kb += 2) {
        if (fast && kb > 0 && kb + 1 + kWsL2Ahead < KT) {
          steady(B0());
          steady(B1());
          q += 2 * c.kQStep;
          s += 2 * c.kSStep;
        } else {
          step(kb, B0());
          step(kb + 1, B1());
        }
      }
      if (kb < KT) step(kb, B0());
    }
    ptx::wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < N / 2; ++i) ptx::fence_operand(d[i]);
    if (c.lane == 0) ptx::mbar_arrive(c.empty + 8 * prev_slot);

    const int warp = c.warp, g = c.lane >> 2, t = c.lane & 3;
    if (!c.store) return;
    const int mt = C * T.mg + c.cw;
    if constexpr (kGemm1) {
      // ---- SiTU-GLU (+ MXFP8) epilogue: d[4j + {0,1}] gate, d[4j + {2,3}] up ----
      const smxx::SituCoeffs sc = smxx::situ_coeffs(beta_e, linear_beta_e);
      float v[N / 4];
      smxx::situ_glu_fragment<N / 8>(v, d, sc);
      if (!kBf16H && p.mxfp8_out) {
        // The tile's 32 intermediates of a token are one MX block: 8 lanes (g) of each of this
        // consumer's 4 warps hold one each. (1) The max over g as a reduce-scatter: three
        // butterfly steps halve the list each time, so lane g ends with the maxima of its
        // K / 8 elements g K / 8 + j (35 shuffles at N = 160 instead of 120), and stores them
        // as [token][warp]. (2) Thread c of the consumer takes token columns c, c + 128: the
        // four warps' maxima (one LDS.128), the exponent and the block's multipliers
        // (mxfp8_scale), written back over the maxima. (3) Every thread reads its tokens'
        // multipliers and converts two tokens per pair. The exponent and multipliers are thus
        // worked out once per block, not by each of its 32 holders; and nothing is branched
        // per element (a branch each made the elements run one after another: P rounds 14-15).
        constexpr int K = N / 4;
        static_assert(K % 8 == 0, "the reduce-scatter halves K three times");
        const uint32_t sAmax = c.sAmax;  // shared address of [kMaxTileN][4] floats
        float m[K];  // |v|, then the running maxima
#pragma unroll
        for (int i = 0; i < K; ++i) m[i] = fabsf(v[i]);
        auto halve = [&](auto half_tag, int lane_bit) {
          constexpr int H = decltype(half_tag)::value;  // keep [0, H) or [H, 2 H)
          const bool upper = (c.lane & lane_bit) != 0;
#pragma unroll
          for (int j = 0; j < H; ++j) {
            const float send = upper ? m[j] : m[j + H], keep = upper ? m[j + H] : m[j];
            m[j] = fmaxf(keep, __shfl_xor_sync(0xFFFFFFFFu, send, lane_bit));
          }
        };
        halve(std::integral_constant<int, K / 2>(), 16);
        halve(std::integral_constant<int, K / 4>(), 8);
        halve(std::integral_constant<int, K / 8>(), 4);
#pragma unroll
        for (int j = 0; j < K / 8; ++j) {
          const int i = g * (K / 8) + j;
          ptx::sts_f32(sAmax + 16 * (8 * (i >> 1) + 2 * t + (i & 1)) + 4 * warp, m[j]);
        }
        ptx::named_barrier(1 + c.cw, kWarpgroup);
#pragma unroll
        for (int col = 32 * warp + c.lane; col < N; col += kWarpgroup) {
          const uint4 w = ptx::lds_v4_b32(sAmax + 16 * col);
          const float amax = fmaxf(fmaxf(__uint_as_float(w.x), __uint_as_float(w.y)),
                                   fmaxf(__uint_as_float(w.z), __uint_as_float(w.w)));
          // formats.h's scale rule, bit for bit (smxx/mxfp8_device.cuh).
          const smxx::Mxfp8Scale sc8 = smxx::mxfp8_scale(smxx::mxfp8_exponent(amax));
          ptx::sts_v4_b32(sAmax + 16 * col, make_uint4(__float_as_uint(sc8.inv),
                                                       __float_as_uint(sc8.s),
                                                       __float_as_uint(sc8.s2), 0u));
        }
        ptx::named_barrier(1 + c.cw, kWarpgroup);
        auto scale_of = [&](int col) {
          const uint4 w = ptx::lds_v4_b32(sAmax + 16 * col);
          return smxx::Mxfp8Scale{__uint_as_float(w.x), __uint_as_float(w.y),
                                  __uint_as_float(w.z)};
        };
#pragma unroll
        for (int i = 0; i < K; i += 2) {  // tokens col and col + 1
          const int col = 8 * (i >> 1) + 2 * t;
          const float2 q =
              smxx::mxfp8_fake_quantize_scaled(v[i], scale_of(col), v[i + 1], scale_of(col + 1));
          v[i] = q.x;  // exact in BF16
          v[i + 1] = q.y;
        }
        ptx::named_barrier(1 + c.cw, kWarpgroup);  // sAmax read before the next tile writes it
      }
      const int I = p.M / 2;
      if constexpr (N >= kHPairsMinWidth) {
        // h as BF16 pairs: v[i], v[i + 1] (i even) are row g's tokens 2t, 2t + 1 of column
        // group i / 2; lane g ^ 1 (lane ^ 4) holds row g ^ 1 of the same tokens. One shuffle of
        // the packed pair gives the even lane rows (g, g + 1) of token 2t and the odd lane rows
        // (g - 1, g) of token 2t + 1: one 4-byte store each instead of two 2-byte stores, with
        // the same bits (the pack is the same round-to-nearest per value).
        const int odd = g & 1;
        const uint32_t pick = odd ? 0x3276u : 0x5410u;  // odd: (other.hi, mine.hi); even: lo, lo
        __nv_bfloat16* hrow =
            p.h + static_cast<int64_t>(T.p0 + 2 * t + odd) * I + 32 * mt + 8 * warp + (g - odd);
#pragma unroll
        for (int i = 0; i < N / 4; i += 2) {
          const int col = 8 * (i >> 1) + 2 * t + odd;
          const uint32_t mine = ptx::pack_bf16x2(v[i], v[i + 1]);
          const uint32_t other = __shfl_xor_sync(0xFFFFFFFFu, mine, 4);
          ptx::stg_b32_if(hrow + static_cast<int64_t>(8 * (i >> 1)) * I,
                          __byte_perm(mine, other, pick), col < T.nrows);
        }
      } else {
        // Narrow tiles store h one value at a time (the pairs lost there: bench/NOTES.md P
        // round 26).
        __nv_bfloat16* hcol = p.h + 32 * mt + 8 * warp + g;
#pragma unroll
        for (int i = 0; i < N / 4; ++i) {
          const int col = 8 * (i >> 1) + 2 * t + (i & 1);
          ptx::stg_b16_if(hcol + static_cast<int64_t>(T.p0 + col) * I,
                          __bfloat16_as_ushort(__float2bfloat16_rn(v[i])), col < T.nrows);
        }
      }
    } else {
      // ---- GEMM2 epilogue: y (or out) = row_weight * acc ----
      // any_out (loaded with the tile, before the mainloop): the grouping's flag for the
      // expert. A per-tile vote over out_token here (ceil(N / 32) loads per lane, one more L2
      // round trip per tile) was slower at TP8xEP4, where no row goes to out, and loaded
      // together with the weights below it spilled (bench/NOTES.md G round 5).
      if (!any_out) {  // every column to y
        // This thread's N / 4 token columns' weights, all loaded before the first store: y and
        // row_weight may alias for the compiler, which otherwise reloads a weight after every
        // store and waits on each load in turn. (Loading them before the last wgmma wait, as
        // the betas are, measured no faster and spilled: P round 9.)
        float* ycol = p.y + 64 * mt + 16 * warp + g;
        // 160 registers: the N / 4 weights beside the N / 2 accumulators spilled ~0.5 KB, so the
        // columns go in chunks of 8 weights (all loaded before the chunk's stores).
        constexpr int kChunk = 8;
#pragma unroll
        for (int j0 = 0; j0 < N / 4; j0 += kChunk) {
          float rw[kChunk];
#pragma unroll
          for (int j = j0; j < j0 + kChunk && j < N / 4; ++j) {
            const int col = 8 * (j >> 1) + 2 * t + (j & 1);
            rw[j - j0] = col < T.nrows ? p.row_weight[T.p0 + col] : 0.0f;
          }
#pragma unroll
          for (int j = j0; j < j0 + kChunk && j < N / 4; ++j) {
            const int col = 8 * (j >> 1) + 2 * t + (j & 1);
            const int i = 4 * (j >> 1) + (j & 1);  // rows g and g + 8: d[i], d[i + 2]
            if (col < T.nrows) {
              float* y = ycol + static_cast<int64_t>(T.p0 + col) * p.M;
              y[0] = d[i] * rw[j - j0];
              y[8] = d[i + 2] * rw[j - j0];
            }
          }
        }
        return;
      }
      // Some columns to out: each column's weight, bias and destination row are worked out once
      // per consumer (one or two columns per thread) into this consumer's MX amax scratch
      // (unused by GEMM2; 16 B per column, 2.5 KB at N = 160), then read back 8 columns at a time
      // (8 LDS.128 in flight) for the stores. Holding N / 4 out_tokens beside the weights in
      // registers spilled ~0.5 KB, and an address select per element made the epilogue slower
      // (bench/NOTES.md G round 5).
      const uint32_t sCol = c.sAmax;  // [kMaxTileN] x {weight, bias, row address lo, hi}
      for (int col = 32 * warp + c.lane; col < N; col += kWarpgroup) {
        float w = 0.0f;
        int ot = -1;
        if (col < T.nrows) {
          w = p.row_weight[T.p0 + col];
          ot = p.out_token[T.p0 + col];
        }
        ptx::sts_v4_b32(sCol + 16 * col,
                        smxx::gemm2_column_entry(
                            w, ot, smxx::gemm2_row(p.y, p.M, p.out, p.out_stride, ot, T.p0 + col)));
      }
      ptx::named_barrier(1 + c.cw, kWarpgroup);
      const int m0 = 64 * mt + 16 * warp + g;
#pragma unroll
      for (int j0 = 0; j0 < N / 4; j0 += 8) {
        uint4 c4[8];  // column 8 (j / 2) + 2 t + j % 2 holds d[4 (j / 2) + j % 2 + {0, 2}]
#pragma unroll
        for (int j = j0; j < j0 + 8 && j < N / 4; ++j)
          c4[j - j0] = ptx::lds_v4_b32(sCol + 16 * (8 * (j >> 1) + 2 * t + (j & 1)));
#pragma unroll
        for (int j = j0; j < j0 + 8 && j < N / 4; ++j) {
          const smxx::Gemm2Column e = smxx::gemm2_column(c4[j - j0]);
          const int i = 4 * (j >> 1) + (j & 1);
          ptx::stg2_f32_if(e.row + m0, smxx::gemm2_value(d[i], e.w, e.bias),
                           smxx::gemm2_value(d[i + 2], e.w, e.bias),
                           8 * (j >> 1) + 2 * t + (j & 1) < T.nrows);
        }
      }
      ptx::named_barrier(1 + c.cw, kWarpgroup);  // read out before the next tile writes it
    }
  }
};

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
  bool steady = true;  // steady steps allowed (not with the no-conversion diagnostic)
  uint32_t wfrag = 0, wscale = 0;  // kSlotW: this thread's fragment and scale word in stage 0
  int skew_at = -1;  // consumer c < C - 1: the first tile's step after which c + 1 starts
  int* h_ready = nullptr;  // GEMM1: per-expert counters of finished 64-row tiles (ws_wait_rows)
  int count_tune = 0;  // kWsTuneNoCountFence / kWsTuneNoCountBarrier (diagnostics)
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
    c.wscale = wslots + C * S::kWFragBytes + c.cw * S::kWScaleBytes +
               (8 * c.warp + g) * kFragScaleBytes;
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
  static_assert(WsShape<C>::kClasses == 5 && ws_width_of_class(4) == 160 &&
                    ws_width_of_class(0) == 32,
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
        ws_producer<C, 4, kSlotW>(p, cap, stages, load, sUnits, total, m_groups, KT, slots,
                                   wslots, full, empty, kGemm1 ? nullptr : h_ready, h_tiles);
        break;
      case 6:
        ws_producer<C, 6, kSlotW>(p, cap, stages, load, sUnits, total, m_groups, KT, slots,
                                   wslots, full, empty, kGemm1 ? nullptr : h_ready, h_tiles);
        break;
      default:
        ws_producer<C, 2, kSlotW>(p, cap, stages, load, sUnits, total, m_groups, KT, slots,
                                   wslots, full, empty, kGemm1 ? nullptr : h_ready, h_tiles);
        break;
    }
  } else {
    ptx::setmaxnreg_inc<S::kConsumerRegs>();
    ws_consumer<C, kGemm1, kOut, kSlotW, kSmall>(p, cap, stages, sUnits, total, m_groups, KT,
                                                 slots, wslots, full, empty,
                                                 ptx::smem_addr(sAmax), tune, h_ready);
  }
}

}  // namespace mxmoe::sm90
