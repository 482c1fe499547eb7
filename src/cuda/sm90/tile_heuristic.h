// src/cuda/sm90/tile_heuristic.h: the token-tile width (wgmma N) of the grouped GEMMs.
//
// The weights are the 64-row M operand and an expert's tokens the N operand, so a tile computes
// 64 weight rows x BN tokens. Rows past an expert's end are zero-filled and wasted MMA work;
// a wider tile reuses each weight fragment (converted in registers) for more tokens. The choice
// uses only host-known bounds (max_rows, num_experts), never device data, so it is fixed for a
// captured graph: the mean rows per expert picks the smallest tile that holds it.
// Limitations: a skewed routing (one hot expert) still runs with the mean's tile; the persistent
// scheduler keeps that correct, only less efficient.
#pragma once

namespace mxmoe::sm90 {

constexpr int kTileNs[] = {16, 32, 64, 128};

inline bool valid_tile_n(int bn) { return bn == 16 || bn == 32 || bn == 64 || bn == 128; }

inline int choose_tile_n(int max_rows, int num_experts) {
  const int mean = num_experts > 0 ? (max_rows + num_experts - 1) / num_experts : max_rows;
  if (mean <= 16) return 16;
  if (mean <= 32) return 32;
  if (mean <= 64) return 64;
  return 128;
}

}  // namespace mxmoe::sm90
