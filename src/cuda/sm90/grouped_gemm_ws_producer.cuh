// src/cuda/sm90/grouped_gemm_ws_producer.cuh: the warp-specialized kernel's producer warpgroup:
// it gathers each K step's activation rows (and, with kSlotW, the consumers' weight fragments)
// into the ring of shared-memory slots with cp.async and hands each slot to the consumers
// through its full / empty mbarriers. The kernel: grouped_gemm_ws_kernel.cuh.
#pragma once

#include <cstdint>

#include "sm90/grouped_gemm_kernel.cuh"
#include "sm90/grouped_gemm_ws_schedule.cuh"
#include "sm90/grouped_gemm_ws_shape.cuh"
#include "sm90/mxfp4_fragment.h"
#include "sm90/ptx.cuh"

namespace mxmoe::sm90 {

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
  const int tid = threadIdx.x;                                                  // 0..127
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

}  // namespace mxmoe::sm90
