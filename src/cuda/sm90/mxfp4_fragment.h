// src/cuda/sm90/mxfp4_fragment.h: the prepacked MXFP4 order (host and device) and its in-register
// conversion to BF16 wgmma A fragments (device).
//
// Layout (one matrix [rows, k], rows % 64 == 0, k % 64 == 0): the matrix is cut into 64-row
// tiles (mt) and 64-wide K steps (kb). Tile (mt, kb) is 128 "fragments", one per thread of the
// consuming warpgroup, stored back to back in order mt-major, then kb, then thread:
//   packed: 16 bytes per thread, offset ((mt * (k/64) + kb) * 128 + tid) * 16
//   scales:  4 bytes per row pair, offset ((mt * (k/64) + kb) * 32 + 8 w + g) * 4
// so every thread issues one 16-byte and one 4-byte load per 64 K, coalesced across the warp (the
// four lanes t = 0..3 of a row pair read the same scale word: a broadcast, and the prepacked
// totals equal the row-major ones).
// Thread tid = 32 w + lane (g = lane / 4, t = lane % 4) owns rows r0 = 64 mt + 16 w + g and
// r0 + 8, the rows of wgmma's register A fragment (PTX ISA, m64nNk16 "A in registers": register q
// of a k16 step holds row g + 8 (q & 1), k 8 (q >> 1) + 2 t + {0, 1}).
//   packed word j (bytes 4j..4j+3, little endian) = k16 step j; its nibble q (bits 4q..4q+3) is
//   the even element of register q, nibble q + 4 (bits 16 + 4q ..) the odd one, so one shift and
//   two masks put both into the two BF16 halves of the register.
//   scale byte 2 b + h = UE8M0 scale of row r0 + 8 h, 32-block 2 kb + b (k16 steps 2b, 2b+1).
// Limitations: none beyond rows % 64 == 0 and k % 64 == 0 (checked by the host callers).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MXMOE_SM90_HD __host__ __device__ __forceinline__
#else
#define MXMOE_SM90_HD inline
#endif

namespace mxmoe::sm90 {

constexpr int kTileM = 64;          // weight rows per tile (one wgmma M)
constexpr int kStepK = 64;          // K per pipeline step (4 x k16, one 128-byte smem row)
constexpr int kWarpgroup = 128;     // threads that consume one tile
constexpr int kFragBytes = 16;      // packed FP4 bytes per thread per step
constexpr int kFragScaleBytes = 4;  // scale bytes per row pair (8 w + g) per step
constexpr int kRowPairs = 32;       // row pairs (r, r + 8) per 64-row tile

// Where element (row, k) of a matrix with K columns lives in the prepacked order.
struct FragPos {
  int64_t byte;   // offset into the packed array
  int shift;      // 0 or 4: nibble within the byte
};
MXMOE_SM90_HD FragPos frag_pos(int row, int k, int K) {
  const int mt = row / kTileM, rl = row % kTileM;
  const int w = rl / 16, g = rl % 8, h = (rl / 8) & 1;
  const int kb = k / kStepK, kl = k % kStepK;
  const int j = kl / 16, kq = kl % 16;
  const int q = 2 * (kq / 8) + h;  // register: bit 0 row half, bit 1 k half
  const int t = (kq % 8) / 2, odd = kq & 1;
  const int tid = 32 * w + 4 * g + t;
  const int nib = q + 4 * odd;
  const int64_t frag = (static_cast<int64_t>(mt) * (K / kStepK) + kb) * kWarpgroup + tid;
  return {frag * kFragBytes + 4 * j + nib / 2, (nib & 1) * 4};
}
// Where the scale of (row, 32-block kblk) lives in the prepacked scales.
MXMOE_SM90_HD int64_t frag_scale_pos(int row, int kblk, int K) {
  const int mt = row / kTileM, rl = row % kTileM;
  const int w = rl / 16, g = rl % 8, h = (rl / 8) & 1;
  const int kb = kblk / 2, b = kblk % 2;
  const int64_t frag = (static_cast<int64_t>(mt) * (K / kStepK) + kb) * kRowPairs + 8 * w + g;
  return frag * kFragScaleBytes + 2 * b + h;
}

}  // namespace mxmoe::sm90
