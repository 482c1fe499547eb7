// src/cuda/sm90/mxfp4_fragment.h: the prepacked MXFP4 order (host and device) and where each
// element's four bits sit inside a packed word, chosen so the device turns a word into its four
// BF16x2 A registers with as few integer ops as possible (place_word).
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
// of a k16 step holds row g + 8 (q & 1), k 8 (q >> 1) + 2 t + {0, 1}); mma.sync m16n8k16's A
// fragment has the same mapping per warp.
//   packed word j (bytes 4j..4j+3, little endian) = k16 step j; it holds the 8 elements of
//   registers q = 0..3, halves h = 0 (even k, low BF16) and 1 (odd k, high BF16). Their bits are
//   NOT stored as nibbles: E2M1 bit b of element (q, h) (b = 0 mantissa, 1-2 exponent, 3 sign)
//   sits at word bit frag_bit(q, h, b). The expansion needs each element's magnitude at BF16
//   bits 6..8 and its sign at bit 15 of its half (kPlacedMask), and the bits are arranged so that
//   register 0 is one AND of the word, registers 1 and 2 a rotation and an AND, and register 3
//   an AND, a multiply (three shifted copies at once) and an AND: 8 integer ops per word instead
//   of 13 for plain nibbles (a tiling of the word by rotations alone does not exist).
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

// BF16x2 bits an E2M1 pair occupies once placed: magnitude at 6..8, sign at 15 (and + 16).
constexpr uint32_t kPlacedMask = 0x81C081C0u;
// Register 3: the word bits it reads, and the multiplier that copies them 2, 7 and 12 bits up
// (the copies never overlap, so the product is their OR).
constexpr uint32_t kReg3Bits = 0x001B001Bu, kReg3Copies = (1u << 2) | (1u << 7) | (1u << 12);

// Word bit of E2M1 bit b (0 mantissa, 1-2 exponent, 3 sign) of element (register q, half h).
MXMOE_SM90_HD int frag_bit(int q, int h, int b) {
  const int placed = (b < 3 ? 6 + b : 15) + 16 * h;  // its bit in the placed register
  switch (q) {
    case 0:
      return placed;
    case 1:
      return (placed + 3) & 31;  // register 1 = rotr(word, 3)
    case 2:
      return (placed + 6) & 31;  // register 2 = rotr(word, 6)
    default: {                   // register 3: bits 4, 0, 1 (+2, +7, +7) and 3 (+12)
      constexpr int kSrc[4] = {4, 0, 1, 3};
      return kSrc[b] + 16 * h;
    }
  }
}

MXMOE_SM90_HD uint32_t rotr32(uint32_t x, int r) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(x, x, r);  // one SHF.R.W
#else
  return (x >> r) | (x << ((32 - r) & 31));
#endif
}

// The four placed registers of packed word x: register q = element (q, 0) in the low BF16 and
// (q, 1) in the high one, each as its magnitude at bits 6..8 and sign at bit 15, zero elsewhere.
MXMOE_SM90_HD void place_word(uint32_t x, uint32_t (&v)[4]) {
  v[0] = x & kPlacedMask;
  v[1] = rotr32(x, 3) & kPlacedMask;
  v[2] = rotr32(x, 6) & kPlacedMask;
  v[3] = ((x & kReg3Bits) * kReg3Copies) & kPlacedMask;
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
