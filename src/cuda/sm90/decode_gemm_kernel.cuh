// src/cuda/sm90/decode_gemm_kernel.cuh: the SM90 decode grouped MoE GEMM (tile_n 16: up to ~12
// rows per expert on average), GEMM1 + SiTU-GLU (+ MXFP8) or GEMM2 + routing weight. Each warp
// streams its own weight fragments straight into registers; split-K across a thread-block cluster.
//
// Why a separate kernel: at decode sizes the GEMMs only read weights (17.5 MB per EP16 expert),
// so the kernel must keep many bytes in flight and spend few instructions per byte. Measured on
// the H200 (bench/NOTES.md D): with 1-2 tokens per expert the limit is the consumers' issue rate,
// mostly the MXFP4 -> BF16 expansion (without it the same kernel streams at ~3.8 TB/s), not the
// bytes in flight or the copy engine: a producer warp with bulk copies into an mbarrier ring
// (decode_bulk_kernel.cuh) is no faster per kernel; it stays only for the sparsest problems,
// where its launch chain measured faster end to end (decode_gemm.h, kDecodeBulkMaxRows).
//
// Algorithm (swap-AB as in grouped_gemm_kernel.cuh): C^T[64 weight rows, 16 tokens] per tile.
//  - CTA = 4 warps; warp w owns weight rows 16 w .. 16 w + 15 of the tile. Its prepacked
//    fragment of a 64-K step (mxfp4_fragment.h: 16 B + 4 B of scales per thread) is exactly its
//    mma.sync m16n8k16 A operand for those rows, so no other warp needs it: each thread loads it
//    with coherent ld.global (L1 bypassed, L2 evict_first) kDepth steps ahead of the math into a
//    register ring, expands it (expand_fragment, the same exact conversion as the other
//    kernels) and issues 8 mma.sync (16 tokens = 2 x n8, 4 x k16).
//  - The tile's token rows (the B operand, shared by the 4 warps) go through shared memory in
//    chunks of kDepth steps, double-buffered, cp.async by all 128 threads: only the valid rows
//    (stale rows reach only accumulator columns that are never stored; a column of C depends
//    only on its own token row), ldmatrix.x4 from a conflict-free pitch.
//  - The next tile's first kDepth steps of weights and its first two chunks are requested before
//    the current tile's epilogue, so the loads stay in flight across tile boundaries.
//  - Split-K: the S CTAs of a cluster (cluster rank = K slice, steps [r KT / S, (r+1) KT / S))
//    walk the same tiles. Ranks 1..S-1 write their fp32 partials into rank 0's shared memory
//    with st.async, each store completing its bytes on rank 0's red_full mbarrier (rank 0 arrives
//    once with the expected (S - 1) x 4 KB and waits at CTA scope); rank 0 sums
//    d = ((d_0 + d_1) + d_2) + ... in rank order (deterministic, bit-identical run to run), frees
//    the slots (a relaxed remote arrive on each rank's red_free, except after the cluster's last
//    tile, so no rank waits before it exits) and runs the epilogue. No global workspace and no
//    counters: nothing to zero, graph replays need no reset.
//  - Persistent grid: cluster c walks tiles c, c + clusters, ...
//  - kSpec (decode_gemm.h, DecodeSpec; both mainloops): the tile list comes from the caller's
//    top-k ids, so (spec.preload) the first tile's weights may be requested before pdl::wait()
//    and only its token rows wait for the previous kernel. Same tiles in the same order: the
//    same bits.
//  - Epilogues: GEMM1 the tiled kernel's for BN = 16 (same situ_glu, same MX block = the tile's
//    32 intermediates of a token, same staging and 16-byte stores); GEMM2 the same values
//    (gemm2_store.cuh) stored from the accumulators. So the numerics are identical.
//  - GEMM2 triggers its dependent (the combine) right after its own wait, so the combine's CTAs
//    are launched and resident, waiting in pdl::wait for GEMM2's completion, instead of being
//    launched when GEMM2's last CTA exits: at T = 1 the chain's launch latencies are most of its
//    time (bench/NOTES.md D round 18). GEMM1 does not: GEMM2's resident CTAs slowed GEMM1's
//    last wave at EP16 T=16 (D round 8).
// Files: this one holds the register-streamed mainloop (chunks, Smem, the weight loads, the
//   kernel); decode_tile.cuh what both mainloops share (geometry, helpers, the tile walk,
//   finish_tile: split-K reduction and epilogues); decode_bulk_kernel.cuh the bulk-copy ring.
// Limitations: BN = 16 only (more rows per expert take more token tiles, each re-reading the
//   weights: the launcher sends those to the tiled kernels); num_experts <= kDecodeMaxExperts
//   (the tile prefix is in smem); S in {1, 2, 4, 8} (portable cluster sizes).
#pragma once

#include <cstdint>

#include "sm90/decode_gemm.h"  // DecodeSpec
#include "sm90/decode_tile.cuh"
#include "sm90/grouped_gemm_kernel.cuh"  // KernelArgs, expand_fragment, tile_prefix.cuh
#include "sm90/mxfp4_fragment.h"
#include "smxx/pdl.cuh"

namespace mxmoe::sm90::decode {

constexpr int kDepth = 4;                  // 64-K steps of weights in flight per thread
constexpr int kPitch = kDepth * 128 + 16;  // bytes per token row of a chunk: ldmatrix conflict-free
constexpr int kChunkBytes = kBN * kPitch;  // one chunk buffer (two of them)
static_assert(kChunkBytes % 128 == 0, "chunk alignment");

// Shared-memory carve-up (offsets from a 128-byte aligned base): the two chunk buffers, the
// split reduction's partials, the epilogue staging, the MX amax, the tile prefix, the experts'
// {begin, rows} (16 bits each: the launcher takes max_rows <= kDecodeMaxRows), the reduction's
// two mbarriers (red_full, red_free).
template <int S>
struct Smem {
  static constexpr int kChunks = 0;
  static constexpr int kRed = kChunks + 2 * kChunkBytes;  // (S - 1) partials, rank 0
  static constexpr int kOut = kRed + (S - 1) * kPartBytes;
  static constexpr int kAmax = kOut + kStageOutBytes;            // [4 warps][16]
  static constexpr int kPrefix = kAmax + 4 * kBN * 4;            // [kMaxExperts + 1]
  static constexpr int kSpan = kPrefix + (kMaxExperts + 1) * 4;  // [kMaxExperts] begin | rows << 16
  static constexpr int kWarpSum = kSpan + kMaxExperts * 4;       // [8]
  static constexpr int kRedBar = (kWarpSum + 8 * 4 + 7) & ~7;    // red_full, red_free
  static constexpr int kRows = kRedBar + 2 * 8;  // [kBN] the tile's token rows at k_begin (kSmall)
  static constexpr int kEnd = kRows + kBN * 8;
  static constexpr size_t kDynamic = kEnd + 128;  // + alignment slack
};

// Weight fragments: read once, so L1 is bypassed and L2 told to evict them first (the activations
// and outputs stay). Coherent loads (no .nc): ptxas moved the .nc refills of a chunk below its
// closing bar.sync, so each chunk began by waiting for all of its weights' round trip; these it
// issues mid-chunk (bench/NOTES.md D round 29; H100: ep16 T=256 -2.4..-2.9%, T <= 64 unchanged).
__device__ __forceinline__ uint4 ld_weights_v4(const void* ptr, uint64_t policy) {
  uint4 v;
  asm volatile("ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr), "l"(policy));
  return v;
}
__device__ __forceinline__ uint32_t ld_weights_u32(const void* ptr, uint64_t policy) {
  uint32_t v;
  asm volatile("ld.global.L1::no_allocate.L2::cache_hint.u32 %0, [%1], %2;\n"
               : "=r"(v)
               : "l"(ptr), "l"(policy));
  return v;
}

// kSpec (decode_gemm.h, DecodeSpec): the tile list from spec.ids and (spec.preload) the first
// tile's first kDepth steps of weights loaded before pdl::wait(); its token rows after it.
// kSmall: launched only with p.small_scales (expand_fragment's kSmallOnly; load_chunk_small).
// Bounded to 5 CTAs per SM at split 1, as the other split-1 kernels compile: left free, ptxas
// gave D round 25's version 127 registers (4 CTAs per SM); since load_chunk_small it takes 80.
template <int S, bool kGemm1, bool kSpec, bool kSmall = false>
__global__ void __cluster_dims__(S, 1, 1) __launch_bounds__(kThreads, (kSmall && S == 1) ? 5 : 0)
    decode_gemm_kernel(const KernelArgs p, const DecodeSpec spec) {
  using L = Smem<S>;
  constexpr int D = kDepth;
  constexpr int kPieces = D * 8;  // 16-byte pieces per token row per chunk
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = ptx::align_smem<128>(smem_raw);
  const uint32_t sbase = ptx::smem_addr(smem);
  int* sPrefix = reinterpret_cast<int*>(smem + L::kPrefix);
  uint32_t* sSpan = reinterpret_cast<uint32_t*>(smem + L::kSpan);
  int* sWarp = reinterpret_cast<int*>(smem + L::kWarpSum);
  const __nv_bfloat16** sRows = reinterpret_cast<const __nv_bfloat16**>(smem + L::kRows);
  const uint32_t bar_red_full = sbase + L::kRedBar, bar_red_free = bar_red_full + 8;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int KT = p.K / kStepK, m_tiles = p.M / kTileM;
  const SplitSlice sl = split_slice<S>(KT);
  const uint32_t rank = sl.rank;
  const int cid = sl.cid, nclu = sl.nclu, k_begin = sl.k_begin, k_end = sl.k_end;
  const int nk = k_end - k_begin, nchunks = (nk + D - 1) / D;

  if constexpr (S > 1) {
    if (tid == 0) {
      ptx::mbar_init(bar_red_full, 1);  // rank 0's expect_tx + the partials' bytes
      ptx::mbar_init(bar_red_free, 1);
      ptx::mbar_init_fence();
    }
  }
  if constexpr (kSpec) {  // the wait comes after the first tile's weight loads, below
    wait_ids_ready(spec.ids_ready);
    build_tile_prefix_from_ids<kBN, kThreads, kMaxExperts>(
        p, spec.ids, spec.pairs, spec.expert_start, m_tiles, sPrefix, sWarp, sSpan);
  } else {
    pdl::wait();  // offsets, rows and activations come from earlier kernels of the chain
    if constexpr (!kGemm1) pdl::launch_dependents();  // the combine (header, Algorithm)
    build_tile_prefix<kBN, kThreads>(p, m_tiles, sPrefix, sWarp, sSpan);  // + __syncthreads
  }
  if constexpr (S > 1) cluster_sync_all();  // peers' barriers exist before any remote arrive
  TileWalker walk;
  const int total = sPrefix[p.num_experts];
  const int64_t mk = static_cast<int64_t>(p.M) * p.K;
  const uint64_t policy = evict_first_policy();
  // This thread's fragment and scale word of step 0 of its rank's K slice, for tile ti.
  auto frag_ptr = [&](const TileInfo& ti) {
    return p.w_packed + ti.e * (mk / 2) + (static_cast<int64_t>(ti.mt) * KT + k_begin) * kWBytes +
           tid * kFragBytes;
  };
  auto scale_ptr = [&](const TileInfo& ti) {
    return p.w_scales + ti.e * (mk / 32) + (static_cast<int64_t>(ti.mt) * KT + k_begin) * kSBytes +
           (8 * warp + g) * kFragScaleBytes;
  };
  // Chunk c (steps c D .. c D + D - 1 of the slice) of the tile's token rows into buffer `buf`.
  auto load_chunk = [&](const TileInfo& ti, int c, int buf) {
    const int valid = min(D, nk - c * D) * 8;  // pieces per row
    for (int idx = tid; idx < ti.nrows * kPieces; idx += kThreads) {
      const int r = idx / kPieces, q = idx % kPieces;
      if (q < valid) {
        const int64_t row = p.act_row ? p.act_row[ti.p0 + r] : ti.p0 + r;
        ptx::cp_async_16(sbase + L::kChunks + buf * kChunkBytes + r * kPitch + 16 * q,
                         p.act + row * p.act_stride + (k_begin + c * D) * kStepK + 8 * q, true);
      }
    }
  };
  // kSmall's loader of the same pieces: piece (row r, 16 bytes q) is copied by lane q of warp
  // r % 4 (kPieces = 32 per row), so a warp's rows are warp + 4 i, i < 2 in a narrow tile (at
  // most 8 rows) and < 4 in a wide one, each from the row's address at k_begin (sRows, written
  // by start_chunks) plus constants: no dependent global load per piece (the row index) and no
  // 64-bit row multiply, a fixed unrolled loop instead of a strided one.
  static_assert(kPieces == 32 && kThreads == 128, "row r of a chunk is loaded by warp r % 4");
  auto load_chunk_small = [&](int nrows, int c, int buf, auto narrow_tag) {
    constexpr int kWarpRows = decltype(narrow_tag)::value ? 2 : 4;
    const bool lane_in = lane < min(D, nk - c * D) * 8;  // the slice's end in the last chunk
    const uint32_t dst = sbase + L::kChunks + buf * kChunkBytes + warp * kPitch + 16 * lane;
    const uint32_t off = static_cast<uint32_t>(c) * (D * kStepK) + 8 * lane;  // elements
#pragma unroll
    for (int i = 0; i < kWarpRows; ++i) {
      const int r = warp + 4 * i;
      if (r < nrows && lane_in) ptx::cp_async_16(dst + 4 * i * kPitch, sRows[r] + off, true);
    }
  };
  uint4 qa[D];  // step s's fragment lives in qa[s % D]
  uint32_t sa[D];
  // The first D steps of tile ti's weights, then its first two chunks (two cp.async groups).
  auto start_weights = [&](const TileInfo& ti) {
    const uint8_t* wq = frag_ptr(ti);
    const uint8_t* ws = scale_ptr(ti);
#pragma unroll
    for (int j = 0; j < D; ++j) {
      if (j < nk) {
        qa[j] = ld_weights_v4(wq + j * kWBytes, policy);
        sa[j] = ld_weights_u32(ws + j * kSBytes, policy);
      }
    }
  };
  auto start_chunks = [&](const TileInfo& ti) {
    if constexpr (kSmall) {
      __syncwarp();  // this warp's reads of its rows of the last tile are done
      const int r = warp + 4 * lane;
      if (lane < 4 && r < ti.nrows) {
        const int64_t row = p.act_row ? p.act_row[ti.p0 + r] : ti.p0 + r;
        sRows[r] = p.act + row * p.act_stride + static_cast<int64_t>(k_begin) * kStepK;
      }
      __syncwarp();
      auto first_two = [&](auto narrow_tag) {
        if (nchunks > 0) load_chunk_small(ti.nrows, 0, 0, narrow_tag);
        ptx::cp_async_commit();
        if (nchunks > 1) load_chunk_small(ti.nrows, 1, 1, narrow_tag);
        ptx::cp_async_commit();
      };
      if (ti.nrows <= kBN / 2)
        first_two(std::true_type());
      else
        first_two(std::false_type());
      return;
    }
    if (nchunks > 0) load_chunk(ti, 0, 0);
    ptx::cp_async_commit();
    if (nchunks > 1) load_chunk(ti, 1, 1);
    ptx::cp_async_commit();
  };
  auto start_tile = [&](const TileInfo& ti) {
    start_weights(ti);
    start_chunks(ti);
  };

  // ldmatrix.x4 row addresses of the wide and narrow steps (step_lm_offset).
  const uint32_t lm_wide = step_lm_offset<false>(lane, kPitch);
  const uint32_t lm_narrow = step_lm_offset<true>(lane, kPitch);
  int n_red = 0;
  int tile = cid;
  TileInfo ti{};
  if (tile < total) {
    ti = walk.next(sbase + L::kPrefix, sbase + L::kSpan, p.num_experts, tile, lane);
    if constexpr (kSpec) {
      if (spec.preload) start_weights(ti);
    } else {
      start_tile(ti);
    }
  }
  if constexpr (kSpec) {
    pdl::wait();  // the token rows (and offsets, rows, h) come from earlier kernels
    // (GEMM1 here keeps its late trigger: DecodeSpec::trigger is for the bulk ring only.)
    if constexpr (!kGemm1) pdl::launch_dependents();
    if (tile < total) {
      if (!spec.preload) start_weights(ti);
      start_chunks(ti);
    }
  }
  for (; tile < total; tile += nclu) {
    const uint8_t* wq = frag_ptr(ti);
    const uint8_t* ws = scale_ptr(ti);
    float d[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) d[i] = 0.0f;
    // One chunk of D steps; kTail: the last chunks, where steps may run past the slice or
    // have no step D ahead to fetch (the others skip those checks); kNarrow: <= 8 token rows.
    auto chunk = [&](int c, auto tail_tag, auto narrow_tag) {
      constexpr bool kTail = decltype(tail_tag)::value;
      constexpr bool kNarrow = decltype(narrow_tag)::value;
      ptx::cp_async_wait<1>();  // this thread's pieces of chunk c have landed
      cta_sync();               // everyone's
      const uint32_t bsm =
          sbase + L::kChunks + (c & 1) * kChunkBytes + (kNarrow ? lm_narrow : lm_wide);
      // kSmall: the refills of the chunk at constant offsets from one pointer (LDG [R + imm]),
      // not each from a sign-extended 32-bit step offset (3 integer ops per load).
      [[maybe_unused]] const uint32_t next = static_cast<uint32_t>(c + 1) * D;
      [[maybe_unused]] const uint8_t* wq_next = wq + next * kWBytes;
      [[maybe_unused]] const uint8_t* ws_next = ws + next * kSBytes;
#pragma unroll
      for (int j = 0; j < D; ++j) {
        const int step = c * D + j;
        if (!kTail || step < nk) {
          uint32_t b[4][4];
          step_load_b<kNarrow>(bsm + 128 * j, b);
          uint32_t a[16];
          expand_fragment<kSmall>(qa[j], sa[j], a, p.small_scales);
          if (!kTail || step + D < nk) {  // refill the registers just expanded
            if constexpr (kSmall) {
              qa[j] = ld_weights_v4(wq_next + j * kWBytes, policy);
              sa[j] = ld_weights_u32(ws_next + j * kSBytes, policy);
            } else {
              qa[j] = ld_weights_v4(wq + (step + D) * kWBytes, policy);
              sa[j] = ld_weights_u32(ws + (step + D) * kSBytes, policy);
            }
          }
          step_mma<kNarrow>(d, a, b);
        }
      }
      cta_sync();  // every warp is done with buffer c & 1
      if (c + 2 < nchunks) {
        if constexpr (kSmall)
          load_chunk_small(ti.nrows, c + 2, c & 1, narrow_tag);
        else
          load_chunk(ti, c + 2, c & 1);
      }
      ptx::cp_async_commit();
    };
    auto chunks = [&](auto narrow_tag) {
      int c = 0;
      for (; (c + 2) * D <= nk; ++c) chunk(c, std::false_type(), narrow_tag);  // all fetch D ahead
      for (; c < nchunks; ++c) chunk(c, std::true_type(), narrow_tag);
    };
    if (ti.nrows <= kBN / 2)
      chunks(std::true_type());
    else
      chunks(std::false_type());
    const TileInfo cur = ti;
    Gemm2Cols cols{};
    if (!kGemm1 && rank == 0) cols = gemm2_cols(p, cur, t);  // in flight during start_tile
    if (tile + nclu < total) {  // the next tile's loads fly during this tile's epilogue
      ti = walk.next(sbase + L::kPrefix, sbase + L::kSpan, p.num_experts, tile + nclu, lane);
      start_tile(ti);
    }
    finish_tile<S, kGemm1, L>(p, cur, cols, d, smem, sbase, rank, tile + nclu >= total, n_red);
  }
}

}  // namespace mxmoe::sm90::decode
