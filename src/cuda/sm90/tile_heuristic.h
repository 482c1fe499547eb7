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

constexpr int kTileNs[] = {16, 32, 64, 128, 160};

inline bool valid_tile_n(int bn) {
  for (int v : kTileNs) {
    if (bn == v) return true;
  }
  return false;
}

// How the warp-specialized kernel cuts an expert of r > 0 rows at token-tile cap `cap`: n =
// ceil(r / cap) pieces of sz = ceil(r / n) rows (ws_unit_rows); counting ceil(r / sz) units
// (ws_unit_count) keeps the last one, r - (units - 1) sz rows, non-empty.
constexpr int ws_unit_rows(int r, int cap) {
  const int n = (r + cap - 1) / cap;
  return (r + n - 1) / n;
}
constexpr int ws_unit_count(int r, int sz) { return (r + sz - 1) / sz; }
// The warp-specialized kernel's wgmma widths: a token tile of nrows rows runs at the next
// multiple of kWsWidthStep (class c: width (c + 1) kWsWidthStep). The device code and the
// bench's padding count both use these. Steps of 16 (three consumers) measured no better: the
// consumers' step is bound by its own chain more than by the tensor core, so 144-wide tiles
// ran about as long as 160-wide ones (bench/NOTES.md P round 13). Nor did kernels with one
// 152- or 144-wide class in place of 32, taken per launch from 129 mean rows per expert on: EP16
// T=8192 +1.4% / +0.8% end to end on an H100 (P round 28, branches wip/fine-152, wip/fine-144).
constexpr int kWsWidthStep = 32;
constexpr int ws_class_of(int nrows) { return (nrows + kWsWidthStep - 1) / kWsWidthStep - 1; }
constexpr int ws_width_of_class(int cls) { return (cls + 1) * kWsWidthStep; }
constexpr int ws_width(int nrows) { return ws_width_of_class(ws_class_of(nrows)); }
static_assert(ws_unit_rows(293, 160) == 147 && ws_unit_count(293, 147) == 2 &&
                  ws_unit_rows(700, 160) == 140 && ws_unit_count(700, 140) == 5 &&
                  ws_unit_rows(161, 160) == 81 && ws_width(147) == 160 && ws_width(33) == 64 &&
                  ws_width(32) == 32,
              "unit cuts and widths (grouped_gemm_ws_kernel.cuh's header: 293 rows)");

// The warp-specialized kernel's GEMM2 with at most this many 64-K steps per tile takes its weights
// through the producer's slots (kSlotW), where the register path pays for every tile's first
// fetches: H200, GEMM-only, TP8xEP4 GEMM2 (K = 384, 6 steps) T=4096 / 8192 / 16384 230 / 316 /
// 598 -> 200 / 281 / 522 us. At long K it lost (EP16 GEMM2, 48 steps, T=4096 251 -> 262; GEMM1,
// 112 steps, T=4096 481 -> 510), so the register path stays there (bench/NOTES.md P round 17).
// Host-visible: the launcher (and the tests) also decide from it whether GEMM1 counts for a
// GEMM2 started under it (grouped_gemm.cu).
constexpr int kWsSlotWeightsMaxSteps = 8;

// 16..128: the one-warpgroup kernel, tiles of that width. 160: the warp-specialized kernel
// (three consumer warpgroups), which cuts each expert into nearly equal token tiles of <= 160
// rows and picks the wgmma width per tile (ws_width above) on the device. Measured on the H200
// (src/cuda/sm90/NOTES.md, P; bench/NOTES.md P round 10):
// - both GEMMs run faster with three consumers than with two (tile_n 192, since removed;
//   GEMM-only, us, 192 -> 160, same run: GEMM1 EP16 T=16384 1470 -> 1313, T=8192 774 -> 722,
//   TP8xEP4 T=16384 784 -> 663, T=8192 427 -> 376; GEMM2 702 -> 656, 377 -> 361, 642 -> 596,
//   331 -> 311);
// - from 33 rows per expert up, three consumers beat the one-warpgroup kernel (GEMM1 + GEMM2,
//   us, same runs): 73 rows (T=4096) 128-wide tiles -> 160: EP16 989 -> 797, TP8xEP4 609 ->
//   508; 37 rows (EP16 T=2048) 64-wide -> 160: 732 -> 692, 55 rows (T=3072) 827 -> 741, TP8xEP4
//   T=2048 426 -> 414 (two consumers had lost at 73 rows, 1005 vs 923 us at GEMM1, before the
//   producer and epilogue work of P rounds 4-9); at 18 rows (EP16 T=1024) they lose to the
//   32-wide tiles (528 -> 625 us).
inline int choose_tile_n(int max_rows, int num_experts) {
  const int mean = num_experts > 0 ? (max_rows + num_experts - 1) / num_experts : max_rows;
  if (mean <= 16) return 16;
  if (mean <= 32) return 32;
  return 160;
}

}  // namespace mxmoe::sm90
