// src/cuda/sm90/grouped_gemm_ws_shape.cuh: the warp-specialized grouped GEMM's CTA shape
// (WsShape: threads, register split, shared-memory pieces, named barriers), its pipeline depths,
// the `tune` bits of its A/Bs and diagnostics, and the shared-memory sizes the launcher
// (grouped_gemm.cu) checks before it picks this kernel. The kernel: grouped_gemm_ws_kernel.cuh.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sm90/mxfp4_fragment.h"
#include "sm90/tile_heuristic.h"

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

}  // namespace mxmoe::sm90
