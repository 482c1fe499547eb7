// src/cuda/sm90/grouped_gemm_kernel.cuh: the SM90 grouped MoE GEMM kernel (GEMM1 + SiTU-GLU
// (+ MXFP8 requantization), or GEMM2 + routing weight), one template for both.
//
// Algorithm (swap-AB): C^T[64 weight rows, BN tokens] = W[64, K] . X[BN, K]^T per tile.
//  - A = weights, from registers: each thread streams its prepacked MXFP4 fragment (16 B of FP4
//    + 4 B of scales per 64 K, mxfp4_fragment.h) two K steps ahead, expands it to BF16 in
//    registers (E2M1 x 2^(s-127) is exact in BF16) and feeds wgmma.mma_async m64nBNk16 (RS form).
//  - B = the tile's BN token rows x 64 K of BF16 in shared memory, 128-byte swizzled K-major,
//    gathered with cp.async (16 B per thread, rows through act_row), kStages deep; rows past the
//    tile's end are not copied (stale or uninitialized smem: those columns are never stored).
//  - fp32 accumulators in registers: thread (warp w, lane = 4 g + t) holds weight rows 16 w + g
//    and 16 w + g + 8, token columns 8 j + 2 t + {0, 1}. With the w13 interleave of 8
//    (weight_layout.h) those rows are a gate row and its up row, so SiTU-GLU needs no exchange.
//  - persistent grid: every CTA scans expert_offsets into a shared prefix of tile counts and
//    walks tiles t = blockIdx.x, += gridDim.x; tile t -> (expert, 64-row weight tile, token tile)
//    with token tiles fastest, so concurrent CTAs share one weight tile through L2.
//  - epilogue through shared memory, so each token's output run (64 B of h, 256 B of y) is
//    written by 16-byte stores; every output element is written by exactly one thread, no atomics:
//    the result is bit-identical from run to run.
// Pipeline, per 64-K step kb (one warpgroup, 128 threads):
//   wait cp.async group kb, barrier; issue cp.async for step kb + kPrefetch; expand weights of
//   kb; issue 4 wgmmas (k16 each) and commit; wait until only this group is in flight, which
//   frees the smem slot and the registers of step kb - 1.
//   kStages = kPrefetch + 2 slots: kb - 1 (wgmma in flight), kb, and kPrefetch loading.
// Limitations: one consumer warpgroup and no producer warp (correctness first; the layout is the
//   one a warp-specialized 2-consumer version keeps); no TMA; the activation tile is re-gathered
//   for every 64-row weight tile (L2 serves it).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "mxmoe/formats.h"
#include "sm90/mxfp4_fragment.h"
#include "sm90/ptx.cuh"
#include "sm90/tile_prefix.cuh"
#include "smxx/gemm2_store.cuh"
#include "smxx/mxfp8_device.cuh"
#include "smxx/pdl.cuh"
#include "smxx/situ_device.cuh"

namespace mxmoe::sm90 {

constexpr int kStages = 4;
constexpr int kPrefetch = kStages - 2;
constexpr int kH1Pitch = 40;  // bf16 per token in GEMM1's staging (32 + 8: spreads the banks)
constexpr int kY2Pitch = 68;  // floats per token in GEMM2's staging (64 + 4)

struct KernelArgs {
  const uint8_t* w_packed;
  const uint8_t* w_scales;
  int M, K;                  // weight rows (2I or H) and the reduction length
  const __nv_bfloat16* act;  // B operand rows
  int64_t act_stride;        // elements
  const int32_t* act_row;    // GEMM1: x_row; GEMM2: null (row p is h row p)
  // GEMM1: beta, linear_beta, mxfp8_out, h. GEMM2's out_token and out share slots with them and
  // out_stride takes the tail padding, so the struct keeps the size and layout it had before
  // GEMM2 got them: three fields appended moved the warp-specialized kernel's trailing
  // parameters, and ptxas then scheduled its (unchanged) GEMM1 differently, 4.5% slower
  // (bench/NOTES.md G round 5).
  union {
    const float* beta;
    const int32_t* out_token;  // GEMM2: null, or [max_rows]: row p goes to out's row
  };                           // out_token[p] when that is >= 0 (smxx/gemm2_store.cuh)
  union {
    const float* linear_beta;
    const int32_t* expert_has_out;  // GEMM2 with out_token: [num_experts] any row to out?
  };                                // (null: assume yes)
  int mxfp8_out;
  union {
    __nv_bfloat16* h;  // [max_rows, M / 2]
    float* out;        // GEMM2
  };
  // GEMM2
  const float* row_weight;
  float* y;  // [max_rows, M]
  // problem
  const int32_t* offsets;
  int num_experts;
  int max_rows;
  int small_scales;  // every weight scale <= 2^1 (Gemm1Params::small_scales)
  int out_stride;    // GEMM2 with out_token: out's row stride in elements
};

inline size_t kernel_smem_bytes(int bn, int num_experts) {
  // 1024 for aligning the swizzled tiles, the stages, the prefix of tile counts, the MX amax
  // (GEMM1) or the GEMM2 column table (16-byte aligned: + 16).
  return 1024 + static_cast<size_t>(kStages) * bn * 128 + (num_experts + 1 + 32) * 4 + 4 * bn * 4 +
         16;
}

// Expands one thread's prepacked fragment of a 64-K step into 16 BF16x2 A registers
// (register 4 j + q feeds k16 step j). place_word (mxfp4_fragment.h) puts each element's 3
// magnitude bits at BF16 bits 6..8 and its sign at bit 15, which read as e2m1 * 2^-126 (code 1
// lands on the subnormal 2^-127, the rest on normal numbers), so one exact BF16 multiply by
// 2^(s-1) gives e2m1 * 2^(s-127); bf16 fma keeps subnormals (it has no flush-to-zero form).
// Scales above 2^1 need 2^(s-1) > 2^127: those take a second multiply.
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
}
// bf16x2_mul by the low (kHigh false) or high BF16 of b in both halves: ptxas folds the
// broadcast into the multiply's operand (HMUL2 ... R.H0_H0 / .H1_H1), so one register carries
// two multipliers.
template <bool kHigh>
__device__ __forceinline__ uint32_t bf16x2_mul_half(uint32_t a, uint32_t b) {
  uint32_t d;
  if constexpr (kHigh) {
    asm("{\n.reg .b16 l, h;\n.reg .b32 m;\nmov.b32 {l, h}, %2;\nmov.b32 m, {h, h};\n"
        "fma.rn.bf16x2 %0, %1, m, %3;\n}\n"
        : "=r"(d)
        : "r"(a), "r"(b), "r"(0x80008000u));
  } else {
    asm("{\n.reg .b16 l, h;\n.reg .b32 m;\nmov.b32 {l, h}, %2;\nmov.b32 m, {l, l};\n"
        "fma.rn.bf16x2 %0, %1, m, %3;\n}\n"
        : "=r"(d)
        : "r"(a), "r"(b), "r"(0x80008000u));
  }
  return d;
}
// Any scale byte of s above 128 (2^1)? A byte is > 128 when its bit 7 is set and its low 7 bits
// are not all zero; adding 0x7F to each low part sets bit 7 exactly when it is nonzero (no carry
// crosses a byte).
__device__ __forceinline__ bool has_big_scale(uint32_t s) {
  return (((s & 0x7F7F7F7Fu) + 0x7F7F7F7Fu) & s & 0x80808080u) != 0u;
}
// The exact conversion for any scale (the rare path: weight scales above 2^1 need 2^(s-1) >
// 2^127, so they take a second multiply). Register q of word j uses scale byte 2 (j / 2) +
// (q & 1) of the row pair's word.
__device__ __forceinline__ void expand_fragment_any_scale(const uint4& q, uint32_t s,
                                                          uint32_t (&a)[16]) {
  uint32_t m1[4], m2[4];
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const uint32_t e = (s >> (8 * b)) & 0xFFu;
    const uint32_t c = (e > 128u ? 128u : e) + 126u;  // 2^(min(e,128) - 1) as BF16 exponent
    m1[b] = (c << 7) | (c << 23);
    const uint32_t c2 = e > 128u ? e - 1u : 127u;  // 2^(e - 128), or 1
    m2[b] = (c2 << 7) | (c2 << 23);
  }
  const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    uint32_t v[4];
    place_word(words[j], v);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int b = 2 * (j >> 1) + (r & 1);
      a[4 * j + r] = bf16x2_mul(bf16x2_mul(v[r], m1[b]), m2[b]);
    }
  }
}
// The fast path: place_word (8 integer ops per word) and one multiply per register; the
// multiplier 2^(s-1) is one IMAD from the scale byte, (s + 126) * 0x00800080. Bit for bit the
// same values as expand_fragment_any_scale. small_scales (a kernel argument: no scale of the
// weights above 2^1) drops the per-fragment test and its branch.
// kSmallOnly (a kernel compiled for launches with small_scales only, decode_gemm.h): no test
// at all, so the expansion and the MMAs around it are one basic block, and the four multipliers
// in two registers (bytes 0, 2 and 1, 3 in the low and high halves), each multiply taking its
// half broadcast (HMUL2 ... .H0_H0 / .H1_H1): 2 integer ops for the multipliers instead of 4.
template <bool kSmallOnly = false>
__device__ __forceinline__ void expand_fragment(const uint4& q, uint32_t s, uint32_t (&a)[16],
                                                int small_scales) {
  const uint32_t words[4] = {q.x, q.y, q.z, q.w};
  if constexpr (kSmallOnly) {
    const uint32_t m02 = (s & 0x00FF00FFu) * 0x80u + 0x3F003F00u;
    const uint32_t m13 = __byte_perm(s, 0u, 0x4341u) * 0x80u + 0x3F003F00u;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t v[4];
      place_word(words[j], v);
      // k16 steps 0, 1 take the 32-block of scale bytes 0, 1; steps 2, 3 that of bytes 2, 3.
      if (j < 2) {
        a[4 * j + 0] = bf16x2_mul_half<false>(v[0], m02);
        a[4 * j + 1] = bf16x2_mul_half<false>(v[1], m13);
        a[4 * j + 2] = bf16x2_mul_half<false>(v[2], m02);
        a[4 * j + 3] = bf16x2_mul_half<false>(v[3], m13);
      } else {
        a[4 * j + 0] = bf16x2_mul_half<true>(v[0], m02);
        a[4 * j + 1] = bf16x2_mul_half<true>(v[1], m13);
        a[4 * j + 2] = bf16x2_mul_half<true>(v[2], m02);
        a[4 * j + 3] = bf16x2_mul_half<true>(v[3], m13);
      }
    }
    return;
  }
  if (!small_scales && has_big_scale(s)) {
    expand_fragment_any_scale(q, s, a);
    return;
  }
  uint32_t m[4];
#pragma unroll
  for (int b = 0; b < 4; ++b) m[b] = __byte_perm(s, 0u, 0x4440u + b) * 0x00800080u + 0x3F003F00u;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    uint32_t v[4];
    place_word(words[j], v);
    const uint32_t mlo = m[2 * (j >> 1)], mhi = m[2 * (j >> 1) + 1];
    a[4 * j + 0] = bf16x2_mul(v[0], mlo);
    a[4 * j + 1] = bf16x2_mul(v[1], mhi);
    a[4 * j + 2] = bf16x2_mul(v[2], mlo);
    a[4 * j + 3] = bf16x2_mul(v[3], mhi);
  }
}

template <int BN, bool kGemm1>
__global__ void __launch_bounds__(kWarpgroup) grouped_gemm_kernel(const KernelArgs p) {
  static_assert(BN % 16 == 0 && BN >= 16 && BN <= 128, "tile_n");
  constexpr int kRowsPerThread = BN / 16;  // cp.async: 8 threads x 16 B per 128-byte row
  constexpr int kStageBytes = BN * 128;

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = ptx::align_smem<1024>(smem_raw);
  int* sPrefix = reinterpret_cast<int*>(smem + kStages * kStageBytes);
  int* sWarp = sPrefix + p.num_experts + 1;
  float* sAmax = reinterpret_cast<float*>(sWarp + 32);  // [4 warps][BN]
  const uint32_t smem_base = ptx::smem_addr(smem);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int KT = p.K / kStepK, m_tiles = p.M / kTileM;

  pdl::wait();  // expert_offsets, act_row and the activations come from earlier kernels
  build_tile_prefix<BN, kWarpgroup>(p, m_tiles, sPrefix, sWarp);
  const int total = sPrefix[p.num_experts];

  for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
    // ---- tile -> (expert, weight tile, token tile) ----
    const int e = tile_owner(sPrefix, p.num_experts, tile);
    int begin, rows;
    expert_rows(p, e, &begin, &rows);
    const int n_tok_tiles = (rows + BN - 1) / BN;
    const int u = tile - sPrefix[e];
    const int mt = u / n_tok_tiles, rt = u % n_tok_tiles;
    const int p0 = begin + rt * BN;
    const int nrows = min(BN, rows - rt * BN);

    // ---- activation rows this thread copies: rows tid/8 + 16 i, 16-byte chunk tid % 8 ----
    // Rows past the tile's end are not copied: a token row only feeds its own output column,
    // which the epilogue never stores. The swizzled column is the same for every i, so the
    // destinations are one base plus immediates (no select, no branch per copy).
    const int chunk = tid & 7, r0 = tid >> 3;
    const int nv = nrows > r0 ? (nrows - r0 + 15) / 16 : 0;     // valid rows r0 + 16 i: i < nv
    const uint32_t col = r0 * 128 + ((chunk ^ (r0 & 7)) << 4);  // 128-byte swizzle
    const __nv_bfloat16* src[kRowsPerThread];
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      int64_t row = 0;
      if (i < nv) row = p.act_row ? p.act_row[p0 + r0 + 16 * i] : p0 + r0 + 16 * i;
      src[i] = p.act + row * p.act_stride + chunk * 8;
    }
    auto load_stage = [&](int kb) {
      const uint32_t dst = smem_base + (kb % kStages) * kStageBytes + col;
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) {
        if (i < nv) ptx::cp_async_16(dst + 2048 * i, src[i] + kb * kStepK, true);
      }
    };

    // ---- weights: this thread's fragments of tile (e, mt) ----
    const int64_t mk = static_cast<int64_t>(p.M) * p.K;
    const uint8_t* wq =
        p.w_packed + e * (mk / 2) + (static_cast<int64_t>(mt) * KT * kWarpgroup + tid) * kFragBytes;
    const uint8_t* ws =
        p.w_scales + e * (mk / 32) +
        (static_cast<int64_t>(mt) * KT * kRowPairs + 8 * warp + g) * kFragScaleBytes;
    constexpr int kQStep = kWarpgroup * kFragBytes, kSStep = kRowPairs * kFragScaleBytes;

    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;
    uint4 rq[2];
    uint32_t rs[2];
    uint32_t a[2][16];
    rq[0] = ptx::ld_stream_v4(wq);
    rs[0] = ptx::ld_stream_u32(ws);
    if (KT > 1) {
      rq[1] = ptx::ld_stream_v4(wq + kQStep);
      rs[1] = ptx::ld_stream_u32(ws + kSStep);
    }
#pragma unroll
    for (int s = 0; s < kPrefetch; ++s) {
      if (s < KT) load_stage(s);
      ptx::cp_async_commit();
    }

    auto step = [&](int kb, auto buf) {
      constexpr int B = decltype(buf)::value;
      ptx::cp_async_wait<kPrefetch - 1>();  // this thread's copies of step kb have landed
      ptx::fence_proxy_async();
      __syncthreads();  // everyone's copies of kb visible; everyone's wgmma of kb - 2 done
      if (kb + kPrefetch < KT) load_stage(kb + kPrefetch);
      ptx::cp_async_commit();
      expand_fragment(rq[B], rs[B], a[B], p.small_scales);
      if (kb + 2 < KT) {
        rq[B] = ptx::ld_stream_v4(wq + (kb + 2) * kQStep);
        rs[B] = ptx::ld_stream_u32(ws + (kb + 2) * kSStep);
      }
#pragma unroll
      for (int i = 0; i < 16; ++i) ptx::fence_operand(a[B][i]);
      ptx::wgmma_fence();
      const uint32_t tile_addr = smem_base + (kb % kStages) * kStageBytes;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        ptx::WgmmaRS<BN>::mma(d, &a[B][4 * j], ptx::desc_sw128(tile_addr + 32 * j), 1);
      }
      ptx::wgmma_commit();
      ptx::wgmma_wait<1>();
    };
    for (int kb = 0; kb < KT; kb += 2) {
      step(kb, std::integral_constant<int, 0>());
      if (kb + 1 < KT) step(kb + 1, std::integral_constant<int, 1>());
    }
    ptx::wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) ptx::fence_operand(d[i]);
    __syncthreads();  // all wgmmas done reading the stages: they become the staging buffer

    if constexpr (kGemm1) {
      // ---- SiTU-GLU (+ MXFP8) epilogue: d[4j + {0,1}] gate, d[4j + {2,3}] up ----
      const smxx::SituCoeffs sc = smxx::situ_coeffs(p.beta[e], p.linear_beta[e]);
      float v[BN / 4];
      smxx::situ_glu_fragment<BN / 8>(v, d, sc);
      if (p.mxfp8_out) {
        // The tile's 32 intermediates of a token are one MX block: max over g (lanes with equal
        // t) by shuffles, then over the 4 warps through shared memory.
#pragma unroll
        for (int i = 0; i < BN / 4; ++i) {
          float m = fabsf(v[i]);
          m = smxx::max_over_row_lanes(m);
          if (g == 0) sAmax[warp * BN + 8 * (i >> 1) + 2 * t + (i & 1)] = m;
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < BN / 4; ++i) {
          const int c = 8 * (i >> 1) + 2 * t + (i & 1);
          const float amax =
              fmaxf(fmaxf(sAmax[c], sAmax[BN + c]), fmaxf(sAmax[2 * BN + c], sAmax[3 * BN + c]));
          // formats.h's scale rule, code and value, bit for bit (smxx/mxfp8_device.cuh).
          v[i] = smxx::mxfp8_fake_quantize(v[i], smxx::mxfp8_exponent(amax));  // exact in BF16
        }
      }
      __nv_bfloat16* sH = reinterpret_cast<__nv_bfloat16*>(smem);
#pragma unroll
      for (int i = 0; i < BN / 4; ++i) {
        const int c = 8 * (i >> 1) + 2 * t + (i & 1);
        sH[c * kH1Pitch + 8 * warp + g] = __float2bfloat16_rn(v[i]);
      }
      __syncthreads();
      const int I = p.M / 2;
      for (int idx = tid; idx < BN * 4; idx += kWarpgroup) {
        const int c = idx >> 2, part = idx & 3;
        if (c < nrows) {
          const uint4 val = *reinterpret_cast<const uint4*>(sH + c * kH1Pitch + 8 * part);
          *reinterpret_cast<uint4*>(p.h + static_cast<int64_t>(p0 + c) * I + 32 * mt + 8 * part) =
              val;
        }
      }
    } else {
      // ---- GEMM2 epilogue: y (or out) = row_weight * acc ----
      // Each token column's weight, bias and destination row (smxx/gemm2_store.cuh) once per
      // CTA into a table in the MX amax space (unused by GEMM2), so the 16 threads that store
      // a column read them from shared memory instead of two global loads per 16-byte store
      // (which the compiler cannot hoist above the previous store: y may alias them).
      const uint32_t sCol = (ptx::smem_addr(sAmax) + 15u) & ~15u;  // [BN] x 16 B
      for (int c = tid; c < BN && c < nrows; c += kWarpgroup) {
        const int ot = smxx::gemm2_out_token(p.out_token, p0 + c);
        float* row = smxx::gemm2_row(p.y, p.M, p.out, p.out_stride, ot, p0 + c) + 64 * mt;
        ptx::sts_v4_b32(sCol + 16 * c, smxx::gemm2_column_entry(p.row_weight[p0 + c], ot, row));
      }
      float* sY = reinterpret_cast<float*>(smem);
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) {
        const int c = 8 * (i >> 2) + 2 * t + (i & 1);
        sY[c * kY2Pitch + 16 * warp + g + 8 * ((i >> 1) & 1)] = d[i];
      }
      __syncthreads();
      for (int idx = tid; idx < BN * 16; idx += kWarpgroup) {
        const int c = idx >> 4, part = idx & 15;
        if (c < nrows) {
          const smxx::Gemm2Column col = smxx::gemm2_column(ptx::lds_v4_b32(sCol + 16 * c));
          ptx::stg_v4_f32(col.row + 4 * part,
                          smxx::weighted4(sY + c * kY2Pitch + 4 * part, col.w, col.bias));
        }
      }
    }
    __syncthreads();  // staging read out before the next tile's copies overwrite it
  }
}

}  // namespace mxmoe::sm90
