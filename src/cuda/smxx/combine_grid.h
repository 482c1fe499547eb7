// src/cuda/smxx/combine_grid.h: the combine's launch shape (combine.cu), host-only so the CPU
// tests can check its coverage.
//
// A warp sums one token at a time over `chunks` consecutive 128-column chunks of its row (lane l
// takes 4 columns of each chunk); a CTA is kCombineWarps warps; the grid is (token groups,
// column slices of `chunks` chunks), at most kCombineMaxCtas CTAs, with a token loop beyond.
// Few tokens (decode): one chunk per slice, so a step's reads spread over H / 128 CTAs. Many
// tokens (prefill): whole-row slices, so a token's slot positions are read and tested once per
// row instead of once per 128 columns (EP16 T=16384 with every token skipped: 28 column slices
// each re-testing every token took 27 us; bench/NOTES.md G round 6).
#pragma once

#include <algorithm>
#include <cstdint>

namespace mxmoe::smxx {

constexpr int kCombineWarps = 8;                  // tokens in flight per CTA
constexpr int kCombineCols = 4;                   // columns per lane and chunk
constexpr int kCombineChunk = 32 * kCombineCols;  // columns per warp and chunk
constexpr int kCombineMaxCtas = 2048;             // a few waves; tokens beyond loop

struct CombineGrid {
  int groups = 0, slices = 0, chunks = 0;  // grid (groups, slices); chunks per slice
};

// T > 0, H > 0. Slices of one chunk while every token can have its own warp in every slice
// within kCombineMaxCtas; otherwise as many slices as the cap leaves for T / kCombineWarps
// token groups, each of ceil(chunks of a row / slices) chunks.
inline CombineGrid combine_grid(int T, int H) {
  const int row_chunks = (H + kCombineChunk - 1) / kCombineChunk;
  const int want = (T + kCombineWarps - 1) / kCombineWarps;
  CombineGrid g;
  g.chunks = 1;
  if (static_cast<int64_t>(want) * row_chunks > kCombineMaxCtas) {
    const int slices_cap = std::max(1, kCombineMaxCtas / want);  // slices the cap leaves
    g.chunks = (row_chunks + slices_cap - 1) / slices_cap;
  }
  g.slices = (row_chunks + g.chunks - 1) / g.chunks;
  g.groups = std::min(want, std::max(1, kCombineMaxCtas / g.slices));
  return g;
}

}  // namespace mxmoe::smxx
