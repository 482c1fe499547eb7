// src/cuda/sm90/decode_gemm_kernel.cuh: the SM90 decode grouped MoE GEMM (tile_n 16: at most ~16
// rows per expert), GEMM1 + SiTU-GLU (+ MXFP8) or GEMM2 + routing weight, weights streamed by
// bulk copies (TMA, 1-D) through a deep shared-memory ring, split-K across a thread-block cluster.
//
// Why a separate kernel: at decode sizes the GEMMs only read weights (17.5 MB per EP16 expert at
// T=1, a few us at the copy rate), and the tiled kernel keeps ~5 KB per CTA in flight on 96 / 56
// CTAs: latency-bound. Here the bytes in flight per SM are NS x KS x 2.2 KB per CTA x several
// CTAs, and a tile's K is split over a cluster of S CTAs when tiles are few.
// Measured (H200, bench/NOTES.md D): EP16 T=1 GEMM1+GEMM2 ~31 us (tiled kernel 60), T=64 366 us
// (1.8 TB/s, 2.15x the copy floor): bound by the consumers' issue rate (FP4 expansion + mma.sync
// per 64-K step with ~3 warps per scheduler), not by the bytes in flight.
//
// Algorithm (swap-AB as in grouped_gemm_kernel.cuh): C^T[64 weight rows, 16 tokens] per tile.
//  - CTA = 4 consumer warps (warp w owns weight rows 16 w .. 16 w + 15 of the tile) + 1 producer
//    warp. Per KS 64-K steps the producer issues cp.async.bulk copies into ring stage it % NS:
//    the tile's KS x 2048 contiguous bytes of prepacked FP4 fragments + KS x 128 bytes of scales
//    (mxfp4_fragment.h: fragment order mt, kb, thread: consecutive steps are contiguous), and one
//    KS x 128-byte copy per valid token row of the activations (row-major, pitch KS x 128 + 16 B:
//    ldmatrix rows then hit 8 distinct bank groups).
//    full[stage] completes on the bytes (mbarrier complete_tx); empty[stage] on one arrive per
//    consumer warp.
//  - Consumers: 16 B + 4 B of their fragment with ld.shared, expand_fragment (the same exact
//    E2M1 x 2^(s-127) -> BF16 conversion as the tiled kernel), B fragments by ldmatrix.x4, and
//    mma.sync m16n8k16 (the prepacked fragment of warp w is exactly mma.sync's A fragment for its
//    16 rows, and the accumulator layout equals wgmma m64n16's: d[4 j + {0,1}] row g, tokens
//    8 j + 2 t + {0,1}; d[4 j + {2,3}] row g + 8). mma.sync instead of wgmma: no warpgroup-wide
//    coupling, and B needs no swizzled layout, so plain row bulk copies can fill it.
//  - Token rows past the expert's end are not copied: their smem holds stale data, which only
//    reaches accumulator columns that are never stored (a column of C depends only on its own
//    token row of B), so no zero fill is needed.
//  - Split-K: the S CTAs of a cluster (cluster rank = K slice, steps [r KT / S, (r+1) KT / S))
//    walk the same tiles. Ranks 1..S-1 write their fp32 partials into rank 0's shared memory
//    (st.shared::cluster) and arrive on rank 0's red_full mbarrier (release.cluster); rank 0 sums
//    d = ((d_0 + d_1) + d_2) + ... in rank order (deterministic, bit-identical run to run), frees
//    the buffers (remote arrive on each rank's red_free) and runs the epilogue. No global
//    workspace and no counters: nothing to zero, graph replays need no reset.
//  - Persistent grid: cluster c walks tiles c, c + clusters, ...; the producer runs ahead into
//    the next tile while the consumers finish the current one (the ring never drains).
//  - Epilogues: the tiled kernel's, for BN = 16 (same situ_glu, same MX block = the tile's 32
//    intermediates of a token, same staging and 16-byte stores), so the numerics are identical.
// Limitations: BN = 16 only; num_experts <= kDecodeMaxExperts (the tile prefix is in smem);
//   S in {1, 2, 4, 8} (portable cluster sizes); KS in {1, 2, 4}; one consumer warp per 16 rows,
//   so a lone CTA's math is latency-bound (the next step: a second consumer group taking every
//   other stage, reduced in smem).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "mxmoe/formats.h"
#include "sm90/grouped_gemm_kernel.cuh"  // KernelArgs, expand_fragment, tile_prefix.cuh
#include "sm90/mxfp4_fragment.h"
#include "smxx/pdl.cuh"
#include "smxx/mxfp8_device.cuh"

namespace mxmoe::sm90::decode {

constexpr int kBN = 16;                  // tokens per tile
constexpr int kConsumers = 128;          // 4 consumer warps
constexpr int kThreads = kConsumers + 32;  // + 1 producer warp
constexpr int kMaxExperts = 1024;        // tile prefix capacity (Kimi: at most 896 per GPU)
constexpr int kWBytes = kWarpgroup * kFragBytes;        // 2048 per 64-K step
constexpr int kSBytes = kRowPairs * kFragScaleBytes;    // 128 per 64-K step
constexpr int kPartBytes = kConsumers * 8 * 4;          // one CTA's fp32 partial tile: 4 KB
constexpr int kStageOutBytes = kBN * 68 * 4;            // epilogue staging (GEMM2's is larger)

// Ring geometry for KS 64-K steps per stage: one bulk copy moves KS steps of a tile's weights
// (consecutive steps are contiguous in the prepacked order), one more their scales, one per token
// row KS x 128 bytes of activations. Fewer, larger copies per byte (the TMA unit's per-copy
// cost), and the consumers load KS steps of fragments before computing any (ILP).
template <int KS>
struct Ring {
  static constexpr int kStages = KS == 1 ? 8 : KS == 2 ? 6 : 4;  // NS
  static constexpr int kActPitch = KS * 128 + 16;  // bytes per token row: ldmatrix conflict-free
  static constexpr int kA = KS * (kWBytes + kSBytes);  // activation rows' offset in a stage
  static constexpr int kStageBytes = kA + kBN * kActPitch;  // a multiple of 128
  static_assert(kStageBytes % 128 == 0, "stage alignment");
};

// Shared-memory carve-up (offsets from a 128-byte aligned base).
template <int S, int KS>
struct Smem {
  static constexpr int kStages = Ring<KS>::kStages;
  static constexpr int kRing = 0;
  static constexpr int kRed = kRing + kStages * Ring<KS>::kStageBytes;  // (S - 1) partials, rank 0
  static constexpr int kOut = kRed + (S - 1) * kPartBytes;
  static constexpr int kAmax = kOut + kStageOutBytes;         // [4 warps][16]
  static constexpr int kPrefix = kAmax + 4 * kBN * 4;         // [kMaxExperts + 1]
  static constexpr int kWarpSum = kPrefix + (kMaxExperts + 1) * 4 + 4;  // [8]
  static constexpr int kBar = (kWarpSum + 8 * 4 + 7) & ~7;    // full[NS], empty[NS], red x2
  static constexpr int kEnd = kBar + (2 * kStages + 2) * 8;
  static constexpr size_t kDynamic = kEnd + 128;              // + alignment slack
};

// ---- PTX wrappers (sm_90) ----
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Arrive on the mbarrier at the same offset in CTA `rank` of the cluster, ordering this thread's
// earlier (remote) shared-memory writes before it at cluster scope.
__device__ __forceinline__ void mbar_arrive_remote(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}
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
// Acquire at cluster scope: remote writes released by other CTAs' arrives become visible.
__device__ __forceinline__ void mbar_wait_cluster(uint32_t bar, uint32_t parity) {
  uint32_t ok = 0;
  while (!ok) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(ok)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
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
__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
// d[4] += A(16x16, a[4]) x B(16x8, b0 b1), fp32 accumulate.
__device__ __forceinline__ void mma_bf16_16816(float* d, const uint32_t* a, uint32_t b0,
                                               uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ void st_cluster_v4(uint32_t local_addr, uint32_t rank, float4 v) {
  asm volatile(
      "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
      "st.shared::cluster.v4.f32 [ra], {%2, %3, %4, %5};\n}\n" ::"r"(local_addr),
      "r"(rank), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
      : "memory");
}
// Named barrier of the 128 consumer threads (the producer warp never joins it).
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory");
}


struct TileInfo {
  int e, mt, p0, nrows;
};
__device__ __forceinline__ TileInfo tile_info(const KernelArgs& p, const int* sPrefix, int tile) {
  int lo = 0, hi = p.num_experts - 1;  // the last expert whose prefix <= tile
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (sPrefix[mid] <= tile) lo = mid; else hi = mid - 1;
  }
  int begin, rows;
  expert_rows(p, lo, &begin, &rows);
  const int n_tok = (rows + kBN - 1) / kBN;
  const int u = tile - sPrefix[lo];
  const int rt = u % n_tok;
  return {lo, u / n_tok, begin + rt * kBN, min(kBN, rows - rt * kBN)};
}

template <int S, int KS, bool kGemm1>
__global__ void __cluster_dims__(S, 1, 1) __launch_bounds__(kThreads)
    decode_gemm_kernel(const KernelArgs p) {
  using L = Smem<S, KS>;
  using R = Ring<KS>;
  constexpr int kStages = R::kStages, kStageBytes = R::kStageBytes, kActPitch = R::kActPitch;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 127) & ~static_cast<uintptr_t>(127));
  const uint32_t sbase = ptx::smem_addr(smem);
  int* sPrefix = reinterpret_cast<int*>(smem + L::kPrefix);
  int* sWarp = reinterpret_cast<int*>(smem + L::kWarpSum);
  const uint32_t bar_full = sbase + L::kBar;               // + 8 s
  const uint32_t bar_empty = bar_full + 8 * kStages;       // + 8 s
  const uint32_t bar_red_full = bar_empty + 8 * kStages;   // rank 0: partials landed
  const uint32_t bar_red_free = bar_red_full + 8;          // ranks > 0: rank 0 read them

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const uint32_t rank = S > 1 ? cluster_rank() : 0;
  const int cid = S > 1 ? static_cast<int>(cluster_id_x()) : blockIdx.x;
  const int nclu = S > 1 ? static_cast<int>(num_clusters_x()) : gridDim.x;
  const int KT = p.K / kStepK, m_tiles = p.M / kTileM;
  const int k_begin = static_cast<int>(rank) * KT / S, k_end = (static_cast<int>(rank) + 1) * KT / S;
  const int nk = k_end - k_begin;

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(bar_full + 8 * s, 1);
      mbar_init(bar_empty + 8 * s, 4);
    }
    mbar_init(bar_red_full, (S - 1) * kConsumers);
    mbar_init(bar_red_free, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // Everything below reads what earlier kernels of the chain wrote (offsets, rows, activations).
  pdl::wait();
  build_tile_prefix<kBN, kThreads>(p, m_tiles, sPrefix, sWarp);  // its __syncthreads also
                                                                // publishes the mbarriers
  if constexpr (S > 1) cluster_sync_all();   // peers' barriers exist before any remote arrive
  const int total = sPrefix[p.num_experts];
  const int64_t mk = static_cast<int64_t>(p.M) * p.K;

  if (warp == 4) {
    // ================= producer warp =================
    const uint64_t policy = evict_first_policy();
    uint32_t it = 0;
    for (int tile = cid; tile < total; tile += nclu) {
      const TileInfo ti = tile_info(p, sPrefix, tile);
      const uint8_t* wq = p.w_packed + ti.e * (mk / 2) +
                          static_cast<int64_t>(ti.mt) * KT * kWBytes;
      const uint8_t* ws = p.w_scales + ti.e * (mk / 32) +
                          static_cast<int64_t>(ti.mt) * KT * kSBytes;
      const __nv_bfloat16* arow = p.act;
      if (lane < ti.nrows) {
        const int64_t row = p.act_row ? p.act_row[ti.p0 + lane] : ti.p0 + lane;
        arow = p.act + row * p.act_stride;
      }
      for (int kb = k_begin; kb < k_end; kb += KS, ++it) {
        const uint32_t n = min(KS, k_end - kb);  // steps in this stage
        const int s = it % kStages;
        if (it >= kStages) mbar_wait(bar_empty + 8 * s, ((it / kStages) - 1) & 1);
        const uint32_t stage = sbase + L::kRing + s * kStageBytes;
        if (lane == 0) {
          mbar_arrive_expect_tx(bar_full + 8 * s, n * (kWBytes + kSBytes + 128u * ti.nrows));
        }
        __syncwarp();
        if (lane < ti.nrows) {
          bulk_g2s(stage + R::kA + lane * kActPitch, arow + kb * kStepK, 128 * n,
                   bar_full + 8 * s);
        } else if (lane == 30) {
          bulk_g2s_hint(stage, wq + static_cast<int64_t>(kb) * kWBytes, n * kWBytes,
                        bar_full + 8 * s, policy);
        } else if (lane == 31) {
          bulk_g2s_hint(stage + KS * kWBytes, ws + static_cast<int64_t>(kb) * kSBytes,
                        n * kSBytes, bar_full + 8 * s, policy);
        }
      }
    }
    return;  // the consumers' waits cover every copy this warp issued
  }

  // ================= consumer warps =================
  const int g = lane >> 2, t = lane & 3;
  // ldmatrix.x4 row addresses: matrix m = lane / 8 covers tokens 8 (m / 2) + (lane % 8), k half m % 2.
  const uint32_t lm_off = ((lane >> 4) * 8 + (lane & 7)) * kActPitch + ((lane >> 3) & 1) * 16;
  uint32_t it = 0;
  int n_red = 0;  // split tiles done (parity of the red barriers)
  for (int tile = cid; tile < total; tile += nclu) {
    const TileInfo ti = tile_info(p, sPrefix, tile);
    float d[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) d[i] = 0.0f;
    for (int kb = 0; kb < nk; kb += KS, ++it) {
      const int n = min(KS, nk - kb);  // steps in this stage
      const int s = it % kStages;
      mbar_wait(bar_full + 8 * s, (it / kStages) & 1);
      const uint8_t* stage = smem + L::kRing + s * kStageBytes;
      const uint32_t act = sbase + L::kRing + s * kStageBytes + R::kA + lm_off;
      // All of the stage's loads first (independent, in flight together), then the math.
      uint4 q[KS];
      uint32_t sc[KS], b[KS][4][4];
#pragma unroll
      for (int j = 0; j < KS; ++j) {
        if (j < n) {
          q[j] = *reinterpret_cast<const uint4*>(stage + j * kWBytes + tid * kFragBytes);
          sc[j] = *reinterpret_cast<const uint32_t*>(stage + KS * kWBytes + j * kSBytes +
                                                     (8 * warp + g) * kFragScaleBytes);
#pragma unroll
          for (int i = 0; i < 4; ++i) ldmatrix_x4(act + 128 * j + 32 * i, b[j][i]);
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(bar_empty + 8 * s);  // the stage is in registers: refill it
#pragma unroll
      for (int j = 0; j < KS; ++j) {
        if (j < n) {
          uint32_t a[16];
          expand_fragment(q[j], sc[j], a);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            mma_bf16_16816(d, &a[4 * i], b[j][i][0], b[j][i][1]);
            mma_bf16_16816(d + 4, &a[4 * i], b[j][i][2], b[j][i][3]);
          }
        }
      }
    }

    if constexpr (S > 1) {
      const uint32_t part = sbase + L::kRed + tid * 32;  // this thread's slot in a partial
      if (rank != 0) {
        if (n_red > 0) mbar_wait_cluster(bar_red_free, (n_red - 1) & 1);  // rank 0 read the last
        const uint32_t slot = part + (rank - 1) * kPartBytes;
        st_cluster_v4(slot, 0, make_float4(d[0], d[1], d[2], d[3]));
        st_cluster_v4(slot + 16, 0, make_float4(d[4], d[5], d[6], d[7]));
        mbar_arrive_remote(bar_red_full, 0);
        ++n_red;
        continue;  // rank 0 stores the tile
      }
      mbar_wait_cluster(bar_red_full, n_red & 1);
#pragma unroll 1
      for (int r = 1; r < S; ++r) {  // fixed order: bit-identical from run to run
        const float4* src =
            reinterpret_cast<const float4*>(smem + L::kRed + (r - 1) * kPartBytes + tid * 32);
        const float4 x0 = src[0], x1 = src[1];
        d[0] += x0.x; d[1] += x0.y; d[2] += x0.z; d[3] += x0.w;
        d[4] += x1.x; d[5] += x1.y; d[6] += x1.z; d[7] += x1.w;
      }
      consumers_sync();  // every thread has read every partial
      if (tid < S - 1) mbar_arrive_remote(bar_red_free, tid + 1);
      ++n_red;
    }

    if constexpr (kGemm1) {
      // ---- SiTU-GLU (+ MXFP8): grouped_gemm_kernel.cuh's BN = 16 epilogue ----
      const float beta = p.beta[ti.e], lbeta = p.linear_beta[ti.e];
      float v[4];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        v[2 * j] = situ_glu(d[4 * j], d[4 * j + 2], beta, lbeta);
        v[2 * j + 1] = situ_glu(d[4 * j + 1], d[4 * j + 3], beta, lbeta);
      }
      if (p.mxfp8_out) {
        float* sAmax = reinterpret_cast<float*>(smem + L::kAmax);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float m = fabsf(v[i]);
          m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 4));
          m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 8));
          m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 16));
          if (g == 0) sAmax[warp * kBN + 8 * (i >> 1) + 2 * t + (i & 1)] = m;
        }
        consumers_sync();
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int c = 8 * (i >> 1) + 2 * t + (i & 1);
          const float amax = fmaxf(fmaxf(sAmax[c], sAmax[kBN + c]),
                                   fmaxf(sAmax[2 * kBN + c], sAmax[3 * kBN + c]));
          v[i] = smxx::mxfp8_fake_quantize(v[i], smxx::mxfp8_exponent(amax));
        }
      }
      __nv_bfloat16* sH = reinterpret_cast<__nv_bfloat16*>(smem + L::kOut);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = 8 * (i >> 1) + 2 * t + (i & 1);
        sH[c * kH1Pitch + 8 * warp + g] = __float2bfloat16_rn(v[i]);
      }
      consumers_sync();
      const int I = p.M / 2;
      if (tid < kBN * 4) {
        const int c = tid >> 2, part = tid & 3;
        if (c < ti.nrows) {
          const uint4 val = *reinterpret_cast<const uint4*>(sH + c * kH1Pitch + 8 * part);
          *reinterpret_cast<uint4*>(p.h + static_cast<int64_t>(ti.p0 + c) * I + 32 * ti.mt +
                                    8 * part) = val;
        }
      }
    } else {
      // ---- GEMM2: y = row_weight * acc ----
      float* sY = reinterpret_cast<float*>(smem + L::kOut);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int c = 8 * (i >> 2) + 2 * t + (i & 1);
        sY[c * kY2Pitch + 16 * warp + g + 8 * ((i >> 1) & 1)] = d[i];
      }
      consumers_sync();
#pragma unroll
      for (int idx = tid; idx < kBN * 16; idx += kConsumers) {
        const int c = idx >> 4, part = idx & 15;
        if (c < ti.nrows) {
          const float w = p.row_weight[ti.p0 + c];
          float4 val = *reinterpret_cast<const float4*>(sY + c * kY2Pitch + 4 * part);
          val.x *= w;
          val.y *= w;
          val.z *= w;
          val.w *= w;
          *reinterpret_cast<float4*>(p.y + static_cast<int64_t>(ti.p0 + c) * p.M + 64 * ti.mt +
                                     4 * part) = val;
        }
      }
    }
    consumers_sync();  // staging read out before the next tile's epilogue writes it
  }
  if constexpr (S > 1) {
    // Rank 0 arrives on our red_free after its last read of our partial: stay alive until then.
    if (rank != 0 && n_red > 0) mbar_wait_cluster(bar_red_free, (n_red - 1) & 1);
  }
}

}  // namespace mxmoe::sm90::decode
