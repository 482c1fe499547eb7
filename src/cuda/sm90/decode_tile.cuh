// src/cuda/sm90/decode_tile.cuh: what the two decode mainloops share (the register-streamed one,
// decode_gemm_kernel.cuh, and the bulk-copy ring, decode_bulk_kernel.cuh): the tile geometry, the
// PTX and cluster helpers, the walk over a CTA's tiles, and finish_tile, i.e. the split-K
// reduction across the cluster and the GEMM1 (SiTU-GLU, MXFP8) and GEMM2 (routing weight)
// epilogues. The algorithm, the split-K protocol and the epilogues' reasons are in
// decode_gemm_kernel.cuh's header.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "mxmoe/formats.h"
#include "sm90/decode_gemm.h"            // DecodeSpec
#include "sm90/grouped_gemm_kernel.cuh"  // KernelArgs, expand_fragment, tile_prefix.cuh
#include "sm90/mxfp4_fragment.h"
#include "smxx/gemm2_store.cuh"
#include "smxx/mxfp8_device.cuh"
#include "smxx/pdl.cuh"
#include "smxx/situ_device.cuh"

namespace mxmoe::sm90::decode {

constexpr int kBN = 16;            // tokens per tile
constexpr int kThreads = 128;      // 4 warps, 16 weight rows each
constexpr int kMaxExperts = 1024;  // tile prefix capacity (Kimi: at most 896 per GPU)
constexpr int kWBytes = kWarpgroup * kFragBytes;      // 2048 per 64-K step
constexpr int kSBytes = kRowPairs * kFragScaleBytes;  // 128 per 64-K step
constexpr int kPartBytes = kThreads * 8 * 4;          // one CTA's fp32 partial tile: 4 KB
constexpr int kStageOutBytes = kBN * kH1Pitch * 2;    // GEMM1's h staging (GEMM2 stores from
                                                      // its registers)

// ---- PTX wrappers (sm_90) beyond ptx.cuh's ----
// The split-K reduction's signals (header, Split-K): no cluster-scope release or acquire. Those
// cost each rank > 0 a wait for all its outstanding memory operations (the register kernel's
// next-tile weight loads among them) before its arrive, and rank 0 an L1 invalidation per
// polling iteration: ~20% of the T = 1 GEMMs' stall samples (bench/NOTES.md, twenty-first
// session, call 4).
// 16 bytes into the same offset of CTA `rank`'s shared memory, completing 16 transaction bytes
// on the mbarrier at `bar`'s offset there; the waiter sees the bytes once the phase completes.
__device__ __forceinline__ void st_async_v4(uint32_t local_addr, uint32_t bar, uint32_t rank,
                                            float a, float b, float c, float d) {
  asm volatile(
      "{\n.reg .b32 ra, rb;\nmapa.shared::cluster.u32 ra, %0, %2;\n"
      "mapa.shared::cluster.u32 rb, %1, %2;\n"
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [ra], {%3, %4, %5, %6}, "
      "[rb];\n}\n" ::"r"(local_addr),
      "r"(bar), "r"(rank), "f"(a), "f"(b), "f"(c), "f"(d)
      : "memory");
}
// A relaxed arrive on the mbarrier at `bar`'s offset in CTA `rank` (red_free: "your partial's
// slot may be written again"; no data travels with it).
__device__ __forceinline__ void mbar_arrive_remote_relaxed(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
      "mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Not ptx::mbar_wait (the same try_wait as one asm branch loop): both decode kernels waiting
// through that one measured ~1 us slower end to end at EP16 T=1 (H200, same call, bench/NOTES.md
// D round 19 review).
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
  return ok != 0;
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
// d[4] += A(16x16, a[4]) x B(16x8, b0 b1), fp32 accumulate.
__device__ __forceinline__ void mma_bf16_16816(float* d, const uint32_t* a, uint32_t b0,
                                               uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// One 64-K step's B fragments (the token rows) and MMAs. Wide: 16 tokens, 4 ldmatrix.x4 (matrix
// m = lane / 8 holds tokens 8 (m / 2) + lane % 8, k half m % 2, of k16 step i) and 8 mma.sync.
// Narrow (a tile of at most 8 rows, most tiles at decode): tokens 0..7 only, 2 ldmatrix.x4
// (matrix m: k16 step 2 x + m / 2, k half m % 2) and 4 mma.sync; accumulators 4..7 stay zero
// and belong to token columns 8..15, which the epilogue never stores.
template <bool kNarrow>
__device__ __forceinline__ uint32_t step_lm_offset(int lane, int pitch) {
  return kNarrow ? (lane & 7) * pitch + (lane >> 4) * 32 + ((lane >> 3) & 1) * 16
                 : ((lane >> 4) * 8 + (lane & 7)) * pitch + ((lane >> 3) & 1) * 16;
}
template <bool kNarrow>
__device__ __forceinline__ void step_load_b(uint32_t addr, uint32_t (&b)[4][4]) {
#pragma unroll
  for (int i = 0; i < (kNarrow ? 2 : 4); ++i) ldmatrix_x4(addr + (kNarrow ? 64 : 32) * i, b[i]);
}
template <bool kNarrow>
__device__ __forceinline__ void step_mma(float (&d)[8], const uint32_t (&a)[16],
                                         const uint32_t (&b)[4][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kNarrow) {
      mma_bf16_16816(d, &a[4 * i], b[i >> 1][2 * (i & 1)], b[i >> 1][2 * (i & 1) + 1]);
    } else {
      mma_bf16_16816(d, &a[4 * i], b[i][0], b[i][1]);
      mma_bf16_16816(d + 4, &a[4 * i], b[i][2], b[i][3]);
    }
  }
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t cluster_id_x() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t num_clusters_x() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%nclusterid.x;\n" : "=r"(r));
  return r;
}
// This CTA's place in a split-K cluster of S CTAs: its rank, its cluster and the cluster count
// (the persistent tile loop's start and stride), and its slice [k_begin, k_end) of the KT steps.
struct SplitSlice {
  uint32_t rank;
  int cid, nclu, k_begin, k_end;
};
template <int S>
__device__ __forceinline__ SplitSlice split_slice(int KT) {
  SplitSlice s;
  s.rank = S > 1 ? cluster_rank() : 0;
  s.cid = S > 1 ? static_cast<int>(cluster_id_x()) : blockIdx.x;
  s.nclu = S > 1 ? static_cast<int>(num_clusters_x()) : gridDim.x;
  s.k_begin = static_cast<int>(s.rank) * KT / S;
  s.k_end = (static_cast<int>(s.rank) + 1) * KT / S;
  return s;
}
// DecodeSpec::ids_ready (GroupedProblem::route_ids_ready): the ids are written by the chain's
// first kernel while this one is resident, so thread 0 waits until an acquire load sees the flag
// set; build_tile_prefix_from_ids' first __syncthreads then orders every thread's id loads
// (through L2) after it. Null: the ids were complete before the chain began.
__device__ __forceinline__ void wait_ids_ready(const int* ready) {
  if (ready != nullptr && threadIdx.x == 0)
    while (ptx::ld_acquire_gpu(ready) == 0) __nanosleep(64);
}
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// Named barrier of the CTA's 128 threads (id 1: build_tile_prefix uses __syncthreads, id 0).
// Immediate operands: ptx::named_barrier passes id and count in registers (different SASS).
__device__ __forceinline__ void cta_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kThreads) : "memory");
}

struct TileInfo {
  int e, mt, p0, nrows;
};
// A warp's walk over its CTA's tiles, which come in increasing order: the next tile's expert
// (the last e with prefix[e] <= tile) is at or after the current one, so the warp tests the next
// 32 prefixes at once, one ld.shared and a ballot per 32 experts passed (the prefix is
// non-decreasing, so the hits are the ballot's low bits). The binary search it replaces took
// log2(E) dependent loads per tile, and the expert's rows two dependent global loads; at
// TP8xEP4 T=64 (6 K steps per GEMM2 tile) that per-tile chain was ~14% of GEMM2's stall samples
// (bench/NOTES.md D round 11). Called by whole warps, every lane with the same tile.
// prefix / span: the shared addresses of sPrefix [E + 1] and sSpan [E] (passed in, not held:
// the register kernel has no register to spare across its mainloop).
struct TileWalker {
  int e = 0;  // prefix[0] = 0 <= any tile
  __device__ __forceinline__ TileInfo next(uint32_t prefix, uint32_t span, int num_experts,
                                           int tile, int lane) {
    for (;;) {
      const int c = e + 1 + lane;
      const bool passed = c < num_experts && ptx::lds_s32(prefix + 4 * c) <= tile;
      const uint32_t m = __ballot_sync(0xFFFFFFFFu, passed);
      e += __popc(m);
      if (m != 0xFFFFFFFFu) break;
    }
    const uint32_t span_e = ptx::lds_u32(span + 4 * e);
    const int begin = static_cast<int>(span_e & 0xFFFFu), rows = static_cast<int>(span_e >> 16);
    const int u = tile - ptx::lds_s32(prefix + 4 * e);
    if (rows <= kBN) return {e, u, begin, rows};  // one token tile (rows >= 1): most at decode
    const int n_tok = (rows + kBN - 1) / kBN;
    const int rt = u % n_tok;
    return {e, u / n_tok, begin + rt * kBN, min(kBN, rows - rt * kBN)};
  }
};

// GEMM2's per-token values for this thread's accumulator columns 8 (i / 2) + 2 t + i % 2: the
// routing weight and out_token, loaded when the tile is known so that their latency hides
// behind the mainloop (bulk kernel) or the next tile's start (register kernel).
struct Gemm2Cols {
  float w[4];
  int ot[4];
};
__device__ __forceinline__ Gemm2Cols gemm2_cols(const KernelArgs& p, const TileInfo& ti, int t) {
  Gemm2Cols c;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int col = 8 * (i >> 1) + 2 * t + (i & 1);
    const bool in = col < ti.nrows;
    c.w[i] = in ? p.row_weight[ti.p0 + col] : 0.0f;
    c.ot[i] = in ? smxx::gemm2_out_token(p.out_token, ti.p0 + col) : -1;
  }
  return c;
}

// After a tile's mainloop, by the CTA's 128 threads: the split-K reduction
// (S > 1: ranks > 0 hand their fp32 partial to rank 0 and return) and rank 0's epilogue.
// n_red counts the split tiles done (the parity of the red barriers); last: the cluster's last
// tile (rank 0 then frees no slot: the other ranks have exited or will without waiting).
// kOwn (GEMM1 on its own inputs, decode_gemm.h DecodeSpec): when spec.own.x is set, the SiTU
// parameters by smxx/situ_fill.cuh's rule from the caller's arrays instead of p's local ones.
template <int S, bool kGemm1, class L, bool kOwn = false>
__device__ __forceinline__ void finish_tile(const KernelArgs& p, const TileInfo& ti,
                                            const Gemm2Cols& cols, float (&d)[8], uint8_t* smem,
                                            uint32_t sbase, uint32_t rank, bool last, int& n_red,
                                            const DecodeSpec spec = DecodeSpec()) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const uint32_t bar_red_full = sbase + L::kRedBar, bar_red_free = bar_red_full + 8;
  if constexpr (S > 1) {
    const uint32_t part = sbase + L::kRed + tid * 32;  // this thread's slot in a partial
    if (rank != 0) {
      if (n_red > 0) mbar_wait(bar_red_free, (n_red - 1) & 1);  // rank 0 read the last
      const uint32_t slot = part + (rank - 1) * kPartBytes;
      st_async_v4(slot, bar_red_full, 0, d[0], d[1], d[2], d[3]);
      st_async_v4(slot + 16, bar_red_full, 0, d[4], d[5], d[6], d[7]);
      ++n_red;
      return;  // rank 0 stores the tile
    }
    if (tid == 0) mbar_arrive_expect_tx(bar_red_full, (S - 1) * kPartBytes);
    mbar_wait(bar_red_full, n_red & 1);
#pragma unroll 1
    for (int r = 1; r < S; ++r) {  // fixed order: bit-identical from run to run
      const float4* src =
          reinterpret_cast<const float4*>(smem + L::kRed + (r - 1) * kPartBytes + tid * 32);
      const float4 x0 = src[0], x1 = src[1];
      d[0] += x0.x;
      d[1] += x0.y;
      d[2] += x0.z;
      d[3] += x0.w;
      d[4] += x1.x;
      d[5] += x1.y;
      d[6] += x1.z;
      d[7] += x1.w;
    }
    // Every thread has read every partial (bar.sync orders the reads before thread 0..S-2's
    // signal); after the cluster's last tile no rank writes again, so no signal.
    cta_sync();
    if (!last && tid < S - 1) mbar_arrive_remote_relaxed(bar_red_free, tid + 1);
    ++n_red;
  }

  if constexpr (kGemm1) {
    // ---- SiTU-GLU (+ MXFP8): grouped_gemm_kernel.cuh's BN = 16 epilogue ----
    const smxx::SituCoeffs sc = [&] {
      if constexpr (kOwn) {
        const Gemm1OwnInputs& own = spec.own;
        if (own.x != nullptr) {
          const int ge = spec.expert_start + ti.e;  // the global id, as the glue's fill
          return smxx::situ_coeffs(
              own.per_expert_beta ? own.per_expert_beta[ge] : own.beta,
              own.per_expert_linear_beta ? own.per_expert_linear_beta[ge] : own.linear_beta);
        }
      }
      return smxx::situ_coeffs(p.beta[ti.e], p.linear_beta[ti.e]);
    }();
    float v[4];
    smxx::situ_glu_fragment<2>(v, d, sc);
    if (p.mxfp8_out) {
      float* sAmax = reinterpret_cast<float*>(smem + L::kAmax);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float m = fabsf(v[i]);
        m = smxx::max_over_row_lanes(m);
        if (g == 0) sAmax[warp * kBN + 8 * (i >> 1) + 2 * t + (i & 1)] = m;
      }
      cta_sync();
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = 8 * (i >> 1) + 2 * t + (i & 1);
        const float amax =
            fmaxf(fmaxf(sAmax[c], sAmax[kBN + c]), fmaxf(sAmax[2 * kBN + c], sAmax[3 * kBN + c]));
        v[i] = smxx::mxfp8_fake_quantize(v[i], smxx::mxfp8_exponent(amax));
      }
    }
    __nv_bfloat16* sH = reinterpret_cast<__nv_bfloat16*>(smem + L::kOut);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int c = 8 * (i >> 1) + 2 * t + (i & 1);
      sH[c * kH1Pitch + 8 * warp + g] = __float2bfloat16_rn(v[i]);
    }
    cta_sync();
    const int I = p.M / 2;
    if (tid < kBN * 4) {
      const int c = tid >> 2, part = tid & 3;
      if (c < ti.nrows) {
        const uint4 val = *reinterpret_cast<const uint4*>(sH + c * kH1Pitch + 8 * part);
        *reinterpret_cast<uint4*>(p.h + static_cast<int64_t>(ti.p0 + c) * I + 32 * ti.mt +
                                  8 * part) = val;
      }
    }
    cta_sync();  // staging read out before the next tile's epilogue writes it
  } else {
    // ---- GEMM2: y (or out) = row_weight * acc, straight from the accumulators ----
    // d[4 h + j] is weight row g, d[4 h + 2 + j] row g + 8, of token column 8 h + 2 t + j. In
    // one store the 8 lanes of a t hold 8 consecutive floats of one token row (32 bytes, whole
    // sectors), so staging through shared memory would buy no wider transactions, only two
    // CTA barriers per tile (~5% of the TP8xEP4 T=64 GEMM2's stall samples, D round 11).
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int col = 8 * (i >> 1) + 2 * t + (i & 1);
      if (col < ti.nrows) {
        float* row = smxx::gemm2_row(p.y, p.M, p.out, p.out_stride, cols.ot[i], ti.p0 + col) +
                     64 * ti.mt + 16 * warp + g;
        const float bias = smxx::gemm2_bias(cols.ot[i]);
        row[0] = smxx::gemm2_value(d[4 * (i >> 1) + (i & 1)], cols.w[i], bias);
        row[8] = smxx::gemm2_value(d[4 * (i >> 1) + 2 + (i & 1)], cols.w[i], bias);
      }
    }
  }
}

}  // namespace mxmoe::sm90::decode
