// src/cuda/sm90/fp8_gemm_kernel.cuh: the SM90 FP8 grouped MoE GEMM kernel (W4A8 prefill):
// GEMM1 + SiTU-GLU + MXFP8 requantization to codes, or GEMM2 x routing weight; one template.
//
// Algorithm (swap-AB, as grouped_gemm_kernel.cuh): C^T[64 WGS weight rows, BN tokens] per tile,
// WGS = 1 or 2 consumer warpgroups, each owning 64 weight rows of the tile; all share the token
// tile (WGS = 2 halves the activation traffic per FLOP and lets one warpgroup's promotion overlap
// the other's wgmma inside the CTA).
//  - A = folded E4M3 weights (fp8_fold.h), B = the tile's BN tokens' E4M3 codes; both in shared
//    memory, 128-byte rows (128 K), 128-byte swizzle, read by wgmma.mma_async m64nBNk32 e4m3 x
//    e4m3 in the SS form. A 64-row weight tile (8 KB per 128 K) is stored pre-swizzled, so it is
//    one linear cp.async copy; token rows are gathered with cp.async (rows through act_row),
//    zero-filled past the expert's end.
//  - MX activation scales, exactly: each k32 wgmma is one MX block of every token, so it writes a
//    temporary accumulator (scale-d = 0, no zeroing), and the fp32 result is promoted with one
//    FFMA per element: acc += tmp * 2^s[token, block]. NOTES: the promotion waits for its wgmma
//    (wait_group 0): ptxas serializes every wgmma of a kernel that reads one accumulator while
//    another wgmma is in flight (C7514), so two alternating temporaries gain nothing; the MMA of
//    one warpgroup overlaps the promotion of another (same CTA or another CTA on the SM). The 4
//    scale bytes of a token per 128 K travel with the stage (4-byte cp.async) and are turned into
//    floats by the thread that copied them, before the stage's barrier (no extra barrier).
//  - weight row exponents: acc * 2^R at the end (ldexpf: exact). A 64-row tile with extra folds
//    (rows outside the window, fp8_fold.h) runs the K loop once per fold with acc rescaled by
//    2^(R_f - R_f+1) in between; the CTA runs the larger fold count of its warpgroups' tiles and
//    a warpgroup whose tile has fewer folds skips its MMAs there.
//  - persistent grid over (expert, weight tile, token tile), token tiles fastest, from a shared
//    prefix of per-expert tile counts; epilogue through shared memory, 16-byte stores, every
//    output written by one thread (bit-identical reruns).
// Pipeline per 128-K step kb, kStages = kPrefetch + 2 slots:
//   wait cp.async group kb; convert own scale word; barrier; issue cp.async for kb + kPrefetch;
//   4 x { wgmma block b into tmp; commit; wait; promote }.
// Limitations: no TMA / producer warp (every thread copies); the token tile is re-gathered per
//   weight tile (L2 serves it); K % 128 == 0; M % (64 WGS) == 0.
#pragma once

#include <cstdint>
#include <type_traits>

#include "mxmoe/formats.h"
#include "sm90/ptx.cuh"
#include "sm90/tile_prefix.cuh"
#include "sm90/wgmma_fp8.cuh"
#include "smxx/gemm2_store.cuh"
#include "smxx/mxfp8_device.cuh"
#include "smxx/pdl.cuh"
#include "smxx/situ_device.cuh"

namespace mxmoe::sm90::fp8 {

constexpr int kWarpgroup = 128;
constexpr int kStages = 4;
constexpr int kPrefetch = kStages - 2;
constexpr int kStepK = 128;                      // E4M3 per smem row and per pipeline step
constexpr int kTileRows = 64;                    // weight rows per warpgroup (one wgmma M)
constexpr int kWTileBytes = kTileRows * kStepK;  // 8192

struct Args {
  const uint8_t* w;
  const int32_t* row_exp;
  const int32_t* extra_begin;
  const uint8_t* extra_w;
  const int32_t* extra_exp;
  int M, K;
  const uint8_t* act;         // codes [*, K]
  const uint8_t* act_scales;  // [*, K/32]
  const int32_t* act_row;     // GEMM1: x_row; GEMM2: null
  // GEMM1: beta, linear_beta, h. GEMM2's out_token, out_stride and out share their slots, so
  // the struct keeps its GEMM1 layout (as sm90::KernelArgs does, grouped_gemm_kernel.cuh).
  union {
    const float* beta;
    const int32_t* out_token;  // GEMM2: null, or [max_rows]: row p goes to out's row
  };                           // out_token[p] when that is >= 0 (smxx/gemm2_store.cuh)
  union {
    const float* linear_beta;
    int64_t out_stride;  // GEMM2, elements
  };
  union {
    uint8_t* h;  // [max_rows, M/2]
    float* out;  // GEMM2
  };
  uint8_t* h_scales;  // [max_rows, M/64]
  const float* row_weight;
  float* y;  // [max_rows, M]
  const int32_t* offsets;
  int num_experts;
  int max_rows;
};

__host__ __device__ constexpr int stage_bytes(int bn, int wgs) {
  return wgs * kWTileBytes + bn * kStepK;
}
inline size_t smem_bytes(int bn, int wgs, int num_experts) {
  // alignment pad, stages, raw scale words, scale floats, tile prefix (+32 warp sums)
  return 1024 + static_cast<size_t>(kStages) * stage_bytes(bn, wgs) +
         static_cast<size_t>(kStages) * bn * 4 + static_cast<size_t>(kStages) * 4 * bn * 4 +
         (num_experts + 1 + 32) * 4;
}
// CTAs per SM the kernel is built for: 2 where registers allow (BN = 64 with 2 warpgroups).
__host__ __device__ constexpr int min_blocks(int bn, int wgs) {
  return (wgs == 2 && bn <= 64) ? 2 : 1;
}

__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 4 : 0)
               : "memory");
}

// 2^(e - 127) for a UE8M0 byte: e << 23 is the fp32 pattern for e >= 1; byte 0 is the subnormal
// 2^-127; 255 is NaN.
__device__ __forceinline__ float ue8m0_float(uint32_t e) {
  return __uint_as_float(e == 0 ? 0x00400000u : (e == 255 ? 0x7FC00000u : e << 23));
}

template <int BN, bool kGemm1, int WGS>
__global__ void __launch_bounds__(WGS* kWarpgroup, min_blocks(BN, WGS))
    fp8_grouped_gemm_kernel(const Args p) {
  static_assert(BN % 16 == 0 && BN >= 16 && BN <= 128, "tile_n");
  static_assert(WGS == 1 || WGS == 2, "warpgroups");
  constexpr int NT = WGS * kWarpgroup;
  constexpr int kActChunks = BN * 8;                   // 16-byte chunks of the token tile
  constexpr int kActPer = (kActChunks + NT - 1) / NT;  // per thread
  constexpr int kStage = stage_bytes(BN, WGS);
  constexpr int NA = BN / 2;                 // accumulator registers per thread
  constexpr int kCodePitch = 32 * WGS + 16;  // bytes per token, GEMM1 code staging
  constexpr int kYPitch = 64 * WGS + 4;      // floats per token, GEMM2 staging

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = ptx::align_smem<1024>(smem_raw);
  uint32_t* sRaw = reinterpret_cast<uint32_t*>(smem + kStages * kStage);  // [kStages][BN]
  float* sScale = reinterpret_cast<float*>(sRaw + kStages * BN);          // [kStages][4][BN]
  int* sPrefix = reinterpret_cast<int*>(sScale + kStages * 4 * BN);
  int* sWarp = sPrefix + p.num_experts + 1;
  const uint32_t smem_base = ptx::smem_addr(smem);
  const uint32_t raw_base = ptx::smem_addr(sRaw);

  const int tid = threadIdx.x, wg = tid / kWarpgroup;
  const int warp = (tid >> 5) & 3, lane = tid & 31;  // warp within the warpgroup
  const int g = lane >> 2, t = lane & 3;
  const int KT = p.K / kStepK, m_tiles = p.M / (kTileRows * WGS);
  const int kblocks = p.K / kMxBlock;

  pdl::wait();  // offsets, activations: written by earlier kernels of the chain
  build_tile_prefix<BN, NT>(p, m_tiles, sPrefix, sWarp);
  const int total = sPrefix[p.num_experts];

  float acc[NA], tmp[NA];
#pragma unroll
  for (int i = 0; i < NA; ++i) tmp[i] = 0.0f;

  for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
    const int e = tile_owner(sPrefix, p.num_experts, tile);
    int begin, rows;
    expert_rows(p, e, &begin, &rows);
    const int n_tok_tiles = (rows + BN - 1) / BN;
    const int u = tile - sPrefix[e];
    const int mt = u / n_tok_tiles, rt = u % n_tok_tiles;
    const int p0 = begin + rt * BN;
    const int nrows = min(BN, rows - rt * BN);

    // ---- token-tile chunks this thread copies: chunk q = tid + NT i -> row q / 8, part q % 8 ----
    const uint8_t* src[kActPer];
    uint32_t valid = 0;
#pragma unroll
    for (int i = 0; i < kActPer; ++i) {
      const int q = tid + NT * i, r = q >> 3;
      src[i] = p.act;
      if (q < kActChunks && r < nrows) {
        const int64_t row = p.act_row ? p.act_row[p0 + r] : p0 + r;
        src[i] = p.act + row * p.K + (q & 7) * 16;
        valid |= 1u << i;
      }
    }
    // ---- the scale word of token tid (4 blocks per step) ----
    const bool s_ok = tid < nrows;
    const uint8_t* ssrc = p.act_scales;
    if (s_ok) {
      const int64_t row = p.act_row ? p.act_row[p0 + tid] : p0 + tid;
      ssrc = p.act_scales + row * kblocks;
    }

    // ---- folds of the WGS 64-row weight tiles (subtile s = 64-row tile mt * WGS + s) ----
    const int mt64_base = mt * WGS;
    const int tiles64 = p.M / kTileRows;
    int ex0[WGS], nfold[WGS];
    int folds = 1;
#pragma unroll
    for (int s = 0; s < WGS; ++s) {
      const int idx = e * tiles64 + mt64_base + s;
      ex0[s] = p.extra_begin[idx];
      nfold[s] = 1 + p.extra_begin[idx + 1] - ex0[s];
      folds = max(folds, nfold[s]);
    }
    // this warpgroup's subtile, without indexing the arrays by wg (they would go to local memory)
    const int my_ex0 = (WGS == 1 || wg == 0) ? ex0[0] : ex0[WGS - 1];
    const int my_nfold = (WGS == 1 || wg == 0) ? nfold[0] : nfold[WGS - 1];
    const int r0 = 16 * warp + g;  // this thread's rows r0, r0 + 8 of its warpgroup's subtile
    const int my_rows = (mt64_base + wg) * kTileRows;  // first matrix row of the subtile

#pragma unroll
    for (int i = 0; i < NA; ++i) acc[i] = 0.0f;
    int R0 = 0, R1 = 0;
    for (int f = 0; f < folds; ++f) {
      const uint8_t* wt[WGS];
#pragma unroll
      for (int s = 0; s < WGS; ++s) {
        const int64_t sub_row = static_cast<int64_t>(mt64_base + s) * kTileRows;
        wt[s] = f == 0 ? p.w + (static_cast<int64_t>(e) * p.M + sub_row) * p.K
                       : (f < nfold[s]
                              ? p.extra_w + (ex0[s] + f - 1) * static_cast<int64_t>(kTileRows) * p.K
                              : nullptr);
      }
      const bool active = f < my_nfold;
      if (active) {
        int n0, n1;
        if (f == 0) {
          n0 = p.row_exp[e * p.M + my_rows + r0];
          n1 = p.row_exp[e * p.M + my_rows + r0 + 8];
        } else {
          const int64_t j = my_ex0 + f - 1;
          n0 = p.extra_exp[j * kTileRows + r0];
          n1 = p.extra_exp[j * kTileRows + r0 + 8];
#pragma unroll
          for (int i = 0; i < NA; ++i) acc[i] = ldexpf(acc[i], ((i >> 1) & 1) ? R1 - n1 : R0 - n0);
        }
        R0 = n0;
        R1 = n1;
      }

      auto load_stage = [&](int kb) {
        const int slot = kb % kStages;
        const uint32_t base = smem_base + slot * kStage;
#pragma unroll
        for (int i = 0; i < (WGS * kWTileBytes / 16) / NT; ++i) {
          constexpr int kPerSub = (kWTileBytes / 16) / NT;  // iterations per 64-row subtile
          const int s = i / kPerSub, cw = tid + NT * (i % kPerSub);
          if (wt[s] != nullptr)
            ptx::cp_async_16(base + s * kWTileBytes + cw * 16,
                             wt[s] + static_cast<int64_t>(kb) * kWTileBytes + cw * 16, true);
        }
#pragma unroll
        for (int i = 0; i < kActPer; ++i) {
          const int q = tid + NT * i, r = q >> 3;
          if (q < kActChunks) {
            const uint32_t dst = base + WGS * kWTileBytes + r * 128 + (((q & 7) ^ (r & 7)) << 4);
            const bool ok = (valid >> i) & 1u;
            ptx::cp_async_16(dst, ok ? static_cast<const void*>(src[i] + kb * kStepK) : p.act, ok);
          }
        }
        if (tid < BN) {
          cp_async_4(raw_base + (slot * BN + tid) * 4,
                     s_ok ? static_cast<const void*>(ssrc + kb * 4) : p.act_scales, s_ok);
        }
      };
      // acc += tmp * 2^s of block `blk` (0..3) of stage slot `slot`.
      auto promote = [&](int slot, int blk) {
        const float* sc = sScale + (slot * 4 + blk) * BN + 2 * t;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          const float2 s = *reinterpret_cast<const float2*>(sc + 8 * j);
          acc[4 * j + 0] = fmaf(tmp[4 * j + 0], s.x, acc[4 * j + 0]);
          acc[4 * j + 1] = fmaf(tmp[4 * j + 1], s.y, acc[4 * j + 1]);
          acc[4 * j + 2] = fmaf(tmp[4 * j + 2], s.x, acc[4 * j + 2]);
          acc[4 * j + 3] = fmaf(tmp[4 * j + 3], s.y, acc[4 * j + 3]);
        }
      };

      __syncthreads();  // the stage area is free (previous tile's epilogue / previous fold)
#pragma unroll
      for (int s = 0; s < kPrefetch; ++s) {
        if (s < KT) load_stage(s);
        ptx::cp_async_commit();
      }
      for (int kb = 0; kb < KT; ++kb) {
        const int slot = kb % kStages;
        ptx::cp_async_wait<kPrefetch - 1>();  // this thread's copies of step kb have landed
        if (tid < BN) {
          const uint32_t wsc = sRaw[slot * BN + tid];
#pragma unroll
          for (int b = 0; b < 4; ++b)
            sScale[(slot * 4 + b) * BN + tid] = ue8m0_float((wsc >> (8 * b)) & 0xFFu);
        }
        ptx::fence_proxy_async();
        __syncthreads();  // everyone's copies and scale floats of kb visible
        if (kb + kPrefetch < KT) load_stage(kb + kPrefetch);
        ptx::cp_async_commit();
        if (active) {
          const uint32_t a_addr = smem_base + slot * kStage + wg * kWTileBytes;
          const uint32_t b_addr = smem_base + slot * kStage + WGS * kWTileBytes;
#pragma unroll
          for (int b = 0; b < 4; ++b) {
            ptx::wgmma_fence();
            ptx::WgmmaFp8SS<BN>::mma(tmp, ptx::desc_sw128(a_addr + 32 * b),
                                     ptx::desc_sw128(b_addr + 32 * b), 0);
            ptx::wgmma_commit();
            ptx::wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < NA; ++i) ptx::fence_operand(tmp[i]);
            promote(slot, b);
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < NA; ++i) acc[i] = ldexpf(acc[i], ((i >> 1) & 1) ? R1 : R0);
    __syncthreads();  // all wgmmas and promotions done with the stages: they become staging

    if constexpr (kGemm1) {
      // ---- SiTU-GLU + MXFP8: acc[4j + {0,1}] gate, acc[4j + {2,3}] up; each warpgroup's 32
      // intermediates of a token are one MX block ----
      const smxx::SituCoeffs sc = smxx::situ_coeffs(p.beta[e], p.linear_beta[e]);
      float v[BN / 4];
      smxx::situ_glu_fragment<BN / 8>(v, acc, sc);
      uint8_t* sCodes = smem;
      float* sAmax = reinterpret_cast<float*>(smem + BN * kCodePitch) + wg * 4 * BN;  // [4][BN]
#pragma unroll
      for (int i = 0; i < BN / 4; ++i) {
        float m = fabsf(v[i]);
        if (m != m) m = INFINITY;
        m = smxx::max_over_row_lanes(m);
        if (g == 0) sAmax[warp * BN + 8 * (i >> 1) + 2 * t + (i & 1)] = m;
      }
      __syncthreads();
      const int I = p.M / 2, hblocks = I / kMxBlock;
#pragma unroll
      for (int i = 0; i < BN / 4; ++i) {
        const int c = 8 * (i >> 1) + 2 * t + (i & 1);
        const float amax =
            fmaxf(fmaxf(sAmax[c], sAmax[BN + c]), fmaxf(sAmax[2 * BN + c], sAmax[3 * BN + c]));
        // mxfp8_device.cuh: bit-identical to formats.h's mx_scale_exponent / float_to_e4m3
        const int E8 = smxx::mxfp8_exponent(amax);
        sCodes[c * kCodePitch + 32 * wg + 8 * warp + g] =
            static_cast<uint8_t>(smxx::mxfp8_quantize2(v[i], 0.0f, E8) & 0xFFu);
        if (warp == 0 && g == 0 && c < nrows)
          p.h_scales[static_cast<int64_t>(p0 + c) * hblocks + mt64_base + wg] =
              static_cast<uint8_t>(E8 + kUe8m0Bias);
      }
      __syncthreads();
      for (int idx = tid; idx < BN * 2 * WGS; idx += NT) {
        const int c = idx / (2 * WGS), part = idx % (2 * WGS);
        if (c < nrows) {
          const uint4 val = *reinterpret_cast<const uint4*>(sCodes + c * kCodePitch + 16 * part);
          *reinterpret_cast<uint4*>(p.h + static_cast<int64_t>(p0 + c) * I + 32 * mt64_base +
                                    16 * part) = val;
        }
      }
    } else {
      // ---- GEMM2 epilogue: y (or out) = row_weight * acc ----
      float* sY = reinterpret_cast<float*>(smem);
#pragma unroll
      for (int i = 0; i < NA; ++i) {
        const int c = 8 * (i >> 2) + 2 * t + (i & 1);
        sY[c * kYPitch + 64 * wg + 16 * warp + g + 8 * ((i >> 1) & 1)] = acc[i];
      }
      __syncthreads();
      for (int idx = tid; idx < BN * 16 * WGS; idx += NT) {
        const int c = idx / (16 * WGS), part = idx % (16 * WGS);
        if (c < nrows) {
          const float w = p.row_weight[p0 + c];
          const int ot = smxx::gemm2_out_token(p.out_token, p0 + c);
          float* row = smxx::gemm2_row(p.y, p.M, p.out, p.out_stride, ot, p0 + c);
          *reinterpret_cast<float4*>(row + 64 * mt64_base + 4 * part) =
              smxx::weighted4(sY + c * kYPitch + 4 * part, w, smxx::gemm2_bias(ot));
        }
      }
    }
    // the next tile's first __syncthreads (in the fold loop) orders staging reads before reuse
  }
}

}  // namespace mxmoe::sm90::fp8
