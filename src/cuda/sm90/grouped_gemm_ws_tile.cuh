// src/cuda/sm90/grouped_gemm_ws_tile.cuh: one consumer warpgroup's tile in the warp-specialized
// kernel (WsTileRunner): the K-step mainloop (its MXFP4 fragments streamed into registers, or
// read from the slot with kSlotW, expanded to BF16, 4 wgmma per step on the producer's slot) and
// the epilogue from the accumulators: GEMM1's SiTU-GLU with BF16 h or MXFP8 requantization,
// GEMM2's routing weight into y or out. The kernel: grouped_gemm_ws_kernel.cuh.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "mxmoe/formats.h"
#include "sm90/grouped_gemm_kernel.cuh"
#include "sm90/grouped_gemm_ws_schedule.cuh"
#include "sm90/grouped_gemm_ws_shape.cuh"
#include "sm90/mxfp4_fragment.h"
#include "sm90/ptx.cuh"
#include "smxx/mxfp8_device.cuh"
#include "smxx/situ_device.cuh"

namespace mxmoe::sm90 {

// K steps ahead of use at which a consumer prefetches its weight lines into L2 (its register
// loads are 2 steps ahead; the first H200 profile after the producer fix showed GEMM2's
// consumers waiting on those loads: bench/NOTES.md P round 5). Known limit: ptxas gives every
// weight load of the step loop the same scoreboard, so a step's first use of its fragment also
// waits for the loads issued a step later, and the loop head drains them (~9% of the
// consumers' samples, P round 12; the shared-memory alternatives measured there lost more, and
// so did a per-thread cp.async ring counted by wait_group: EP16 GEMM1 +1.5-8%, P round 22).
constexpr int kWsL2Ahead = 6;
// The BF16-h GEMM1 epilogue stores h as BF16 pairs (one shuffle per two values) from this wgmma
// width up, one value at a time below it. H100, end to end against single stores (bench/NOTES.md
// P round 26): ep16 T=8192-16384 (160-wide tiles) -0.3..-0.5%, but T=2048 (64-wide) +1.5% and
// T=4096 w4a8 (96-wide) +1%.
constexpr int kHPairsMinWidth = 128;

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
        float m[K];                      // |v|, then the running maxima
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
          ptx::sts_v4_b32(sAmax + 16 * col,
                          make_uint4(__float_as_uint(sc8.inv), __float_as_uint(sc8.s),
                                     __float_as_uint(sc8.s2), 0u));
        }
        ptx::named_barrier(1 + c.cw, kWarpgroup);
        auto scale_of = [&](int col) {
          const uint4 w = ptx::lds_v4_b32(sAmax + 16 * col);
          return smxx::Mxfp8Scale{__uint_as_float(w.x), __uint_as_float(w.y), __uint_as_float(w.z)};
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
          const __nv_bfloat162 pair = __floats2bfloat162_rn(v[i], v[i + 1]);  // v[i] low
          const uint32_t mine = *reinterpret_cast<const uint32_t*>(&pair);
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

}  // namespace mxmoe::sm90
