// src/cuda/sm90/fp8_fold.h: MXFP4 weights folded exactly into E4M3 with one power-of-two exponent
// per row, the weight operand of the FP8 W4A8 GEMMs (fp8_gemm.h). Host only, no CUDA calls.
//
// Why: Hopper's FP8 wgmma multiplies E4M3 x E4M3 but knows nothing of per-32 scales. A weight
// element is e2m1 * 2^s (s = the UE8M0 exponent of its 32-block). For a per-row exponent R,
// e2m1 * 2^(s - R) is an E4M3 value exactly when d = s - R lies in the element's window (for the
// magnitudes 0.5..6 together: -8 <= d <= 6, KIMI_K3.md; each magnitude has its own, wider window,
// and an all-zero block has none). So each row gets the R that puts every block of the row in its
// window, the E4M3 codes go to the MMA and 2^R is applied to the fp32 accumulator afterwards:
// w = e4m3(code) * 2^R exactly, for every element.
//
// Fallback (never silently wrong): a row whose blocks admit no common R (scale exponents spread
// beyond the window, moe_layer.h's kFp8FoldWindow) is split into several folds: each K-block goes
// to one fold (the minimum number of folds, greedy interval stabbing), a fold holds the row's
// blocks that share one R and zeros elsewhere. A 64-row tile with any split row gets extra fold
// tiles (as many as its most-split row needs): the kernel runs its K loop once per fold, rescaling
// the accumulator by 2^(R_f - R_f+1) in between. Rows that need fewer folds get zero weights and
// an unchanged R in the extra folds. Real QAT weights are expected to need none (`mxmoe info`
// counts rows outside the window); the cost of one is a second K pass for its tile only.
//
// Layout of one folded matrix [rows, k] (rows % 64 == 0, k % 128 == 0): 64-row x 128-K tiles of
// 8192 bytes, tile (mt, kb) at ((mt * k/128) + kb) * 8192, each in the shared-memory order the
// kernel's wgmma descriptors read (K-major, 128-byte rows, 128-byte swizzle): element (r, kk) of
// the tile at r * 128 + ((kk / 16) ^ (r % 8)) * 16 + kk % 16. So a tile is one linear copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mxmoe::sm90 {

constexpr int kFoldTileRows = 64;
constexpr int kFoldTileK = 128;
constexpr int kFoldTileBytes = kFoldTileRows * kFoldTileK;  // 8192

// Byte offset of element (row, k) in a folded matrix with K columns (tile order above).
inline size_t fold_offset(int row, int k, int K) {
  const int mt = row / kFoldTileRows, r = row % kFoldTileRows;
  const int kb = k / kFoldTileK, kk = k % kFoldTileK;
  const size_t tile = static_cast<size_t>(mt) * (K / kFoldTileK) + kb;
  return tile * kFoldTileBytes + r * 128 + (((kk / 16) ^ (r % 8)) * 16) + kk % 16;
}

// One expert's matrix, folded.
struct Fp8FoldedMatrix {
  int rows = 0, k = 0;
  std::vector<uint8_t> w;           // rows * k E4M3 codes, fold 0, tile order
  std::vector<int32_t> row_exp;     // rows: R of fold 0
  std::vector<int32_t> tile_extra;  // rows / 64: extra folds of each 64-row tile (usually 0)
  std::vector<uint8_t> extra_w;     // sum(tile_extra) * 64 * k: the extra folds, tile by tile
  std::vector<int32_t> extra_exp;   // sum(tile_extra) * 64: their R per row
  int64_t rows_split = 0;           // rows that needed more than one fold
  int max_folds = 1;                // the most folds any row needed
};

// Folds row-major MXFP4 (packed [rows, k/2] low nibble first, scales [rows, k/32]). Throws
// mxmoe::Error for bad shapes (rows % 64, k % 128) or a NaN scale byte (255).
void fold_mxfp4_to_e4m3(const uint8_t* packed, const uint8_t* scales, int rows, int k,
                        Fp8FoldedMatrix* out);

// The exact value a folded matrix holds at (row, k): sum over its folds of e4m3 * 2^R (one fold
// at most is nonzero). For tests: must equal e2m1 * 2^s of the source.
double fp8_folded_value(const Fp8FoldedMatrix& m, int row, int k);

// The window of d for which e2m1 magnitude code m (1..7) times 2^d is an E4M3 value:
// [*lo, *hi]. From the codecs of formats.h, not a table.
void e2m1_fold_window(int m, int* lo, int* hi);

// Several experts' folded matrices in the device layout the FP8 kernels read:
//   w [experts * rows * k] (expert e's fold 0 at e * rows * k), row_exp [experts * rows],
//   extra_begin [experts * rows/64 + 1] (prefix: tile (e, mt)'s extra folds are pool entries
//   extra_begin[e * rows/64 + mt] .. next), extra_w [pool * 64 * k], extra_exp [pool * 64].
struct Fp8FoldedSet {
  int experts = 0, rows = 0, k = 0;
  std::vector<uint8_t> w;
  std::vector<int32_t> row_exp;
  std::vector<int32_t> extra_begin{0};
  std::vector<uint8_t> extra_w;
  std::vector<int32_t> extra_exp;
  int64_t rows_split = 0;
};
// Appends one expert (must match rows and k of the set, or set the shape when it is empty).
void append_folded(const Fp8FoldedMatrix& m, Fp8FoldedSet* set);
// Appends only the extra folds and the exponents / prefix of one expert, not its fold-0 codes
// (for callers that upload those directly).
void append_folded_meta(const Fp8FoldedMatrix& m, Fp8FoldedSet* set);

}  // namespace mxmoe::sm90
