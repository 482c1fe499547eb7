// src/cuda/sm90/tile_heuristic.h: the token-tile width (wgmma N) of the grouped GEMMs.
//
// The weights are the 64-row M operand and an expert's tokens the N operand, so a tile computes
// 64 weight rows x BN tokens. Rows past an expert's end are zero-filled and wasted MMA work;
// a wider tile reuses each weight fragment (converted in registers) for more tokens. The choice
// uses only host-known bounds (max_rows, num_experts), never device data, so it is fixed for a
// captured graph: the mean rows per expert picks the kernel and the token-tile cap.
// Limitations: at tile_n 16 a skewed routing (one hot expert) still runs with the mean's tile;
// the persistent scheduler keeps that correct, only less efficient.
#pragma once

namespace mxmoe::sm90 {

constexpr int kTileNs[] = {16, 32, 64, 128, 160, 192};

inline bool valid_tile_n(int bn) {
  return bn == 16 || bn == 32 || bn == 64 || bn == 128 || bn == 160 || bn == 192;
}

// 16..128: the one-warpgroup kernel, tiles of that width. 160 / 192: the warp-specialized
// kernel with three / two consumer warpgroups, which cuts each expert into nearly equal token
// tiles of <= 160 / 192 rows and picks the wgmma width per tile (multiples of 32) on the
// device. Measured on the H200 (src/cuda/sm90/NOTES.md, P): the warp-specialized kernel wins from ~146 rows per expert (EP16 T=8192: 1279 vs 1804 us),
// loses at 73 (T=4096: 1005 vs 923 us) and at 18 (T=1024: 742 vs 431 us); 96 splits the gap.
inline int choose_tile_n(int max_rows, int num_experts) {
  const int mean = num_experts > 0 ? (max_rows + num_experts - 1) / num_experts : max_rows;
  if (mean <= 16) return 16;
  if (mean <= 32) return 32;
  if (mean <= 64) return 64;
  if (mean <= 96) return 128;
  return 192;
}

}  // namespace mxmoe::sm90
