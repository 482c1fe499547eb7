// src/cuda/sm90/fp8_fold.cpp: the exact MXFP4 -> E4M3 weight fold (fp8_fold.h). Host only.
//
// Per row: every nonzero element of block b (scale exponent s_b, magnitude code m) allows
// R in [s_b - hi(m), s_b - lo(m)] (e2m1_fold_window), so block b allows the intersection of
// those intervals (an all-zero block allows any R). The fewest R values that hit every block's
// interval come from greedy interval stabbing (sort by right end, take the right end of the first
// interval not yet hit); each block goes to the first chosen R inside its interval. One R (the
// common case, spread <= kFp8FoldWindow) is fold 0 alone.
#include "sm90/fp8_fold.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "mxmoe/common.h"
#include "mxmoe/formats.h"

namespace mxmoe::sm90 {
namespace {

constexpr int kDMin = -16, kDMax = 16;  // beyond every magnitude's window

struct Windows {
  int lo[8], hi[8];
  uint8_t code[16][kDMax - kDMin + 1];  // E4M3 code of e2m1 code c times 2^d (inside the window)
  int mask_lo[256], mask_hi[256];       // over the magnitudes in a bit mask: max lo, min hi
  Windows() {
    for (int m = 1; m < 8; ++m) {
      lo[m] = INT_MAX;
      hi[m] = INT_MIN;
      const double v = e2m1_to_float(static_cast<uint8_t>(m));
      for (int d = -40; d <= 40; ++d) {
        const double x = std::ldexp(v, d);
        const uint8_t c = float_to_e4m3(static_cast<float>(x));
        if (static_cast<double>(e4m3_to_float(c)) == x && x <= 448.0) {
          lo[m] = std::min(lo[m], d);
          hi[m] = std::max(hi[m], d);
        }
      }
    }
    for (int mask = 0; mask < 256; ++mask) {
      mask_lo[mask] = INT_MIN;
      mask_hi[mask] = INT_MAX;
      for (int m = 1; m < 8; ++m) {
        if (!(mask & (1 << m))) continue;
        mask_lo[mask] = std::max(mask_lo[mask], lo[m]);
        mask_hi[mask] = std::min(mask_hi[mask], hi[m]);
      }
    }
    for (int c = 0; c < 16; ++c) {
      for (int d = kDMin; d <= kDMax; ++d) {
        const float x = std::ldexp(e2m1_to_float(static_cast<uint8_t>(c & 7)), d);
        code[c][d - kDMin] =
            (c & 7) == 0 ? 0 : static_cast<uint8_t>(float_to_e4m3(x) | ((c & 8) ? 0x80 : 0));
      }
    }
  }
};
const Windows& windows() {
  static const Windows w;
  return w;
}

// The E4M3 code of e2m1 code c times 2^d (exact: d lies in the window of c's magnitude).
uint8_t fold_code(const Windows& win, uint8_t c, int d) {
  if ((c & 7) == 0) return 0;
  return win.code[c & 15][d - kDMin];
}

}  // namespace

void e2m1_fold_window(int m, int* lo, int* hi) {
  if (m < 1 || m > 7) throw Error("e2m1_fold_window: magnitude code " + std::to_string(m));
  *lo = windows().lo[m];
  *hi = windows().hi[m];
}

void fold_mxfp4_to_e4m3(const uint8_t* packed, const uint8_t* scales, int rows, int k,
                        Fp8FoldedMatrix* out) {
  if (rows <= 0 || k <= 0 || rows % kFoldTileRows != 0 || k % kFoldTileK != 0)
    throw Error("fold_mxfp4_to_e4m3: matrix [" + std::to_string(rows) + ", " + std::to_string(k) +
                "] needs rows % 64 == 0 and k % 128 == 0");
  const Windows& win = windows();
  const int nb = k / kMxBlock, mtiles = rows / kFoldTileRows;
  out->rows = rows;
  out->k = k;
  out->w.assign(static_cast<size_t>(rows) * k, 0);
  out->row_exp.assign(rows, 0);
  out->tile_extra.assign(mtiles, 0);
  out->extra_w.clear();
  out->extra_exp.clear();
  out->rows_split = 0;
  out->max_folds = 1;

  std::vector<int> blo(nb), bhi(nb), order(nb), fold_of(nb);
  std::vector<std::vector<int>> tile_R(kFoldTileRows);     // per row of the tile: R per fold
  std::vector<std::vector<int>> tile_fold(kFoldTileRows);  // per row: fold of each block
  for (int mt = 0; mt < mtiles; ++mt) {
    int tile_folds = 1;
    for (int rl = 0; rl < kFoldTileRows; ++rl) {
      const int r = mt * kFoldTileRows + rl;
      const uint8_t* pr = packed + static_cast<size_t>(r) * (k / 2);
      const uint8_t* sr = scales + static_cast<size_t>(r) * nb;
      for (int b = 0; b < nb; ++b) {
        if (sr[b] == kUe8m0Nan)
          throw Error("fold_mxfp4_to_e4m3: NaN scale byte 255 at row " + std::to_string(r) +
                      ", block " + std::to_string(b));
        const int s = static_cast<int>(sr[b]) - kUe8m0Bias;
        unsigned mask = 0;  // magnitudes present in the block (bit m)
        for (int j = 0; j < 16; ++j) {
          const uint8_t byte = pr[16 * b + j];
          mask |= (1u << (byte & 7)) | (1u << ((byte >> 4) & 7));
        }
        mask &= 0xFEu;  // zeros constrain nothing
        // allowed R: [s - min over present m of hi(m), s - max of lo(m)]
        blo[b] = mask ? s - win.mask_hi[mask] : INT_MIN;
        bhi[b] = mask ? s - win.mask_lo[mask] : INT_MAX;
        order[b] = b;
      }
      // Greedy stabbing: fewest R values with every block's [lo, hi] holding one.
      std::sort(order.begin(), order.end(),
                [&](int a, int b) { return bhi[a] != bhi[b] ? bhi[a] < bhi[b] : a < b; });
      std::vector<int> pts;
      for (int b : order) {
        if (blo[b] == INT_MIN && bhi[b] == INT_MAX) continue;  // all-zero block
        if (!pts.empty() && blo[b] <= pts.back()) continue;    // hit (pts.back() <= bhi[b])
        pts.push_back(bhi[b]);
      }
      if (pts.empty()) pts.push_back(0);  // an all-zero row: any R
      for (int b = 0; b < nb; ++b) {
        fold_of[b] = 0;
        for (size_t f = 0; f < pts.size(); ++f) {
          if (blo[b] <= pts[f] && pts[f] <= bhi[b]) {
            fold_of[b] = static_cast<int>(f);
            break;
          }
        }
      }
      tile_R[rl] = pts;
      tile_fold[rl].assign(fold_of.begin(), fold_of.end());
      if (pts.size() > 1) ++out->rows_split;
      tile_folds = std::max(tile_folds, static_cast<int>(pts.size()));
    }
    out->max_folds = std::max(out->max_folds, tile_folds);
    out->tile_extra[mt] = tile_folds - 1;
    const size_t extra0 = out->extra_w.size();
    out->extra_w.resize(extra0 + static_cast<size_t>(tile_folds - 1) * kFoldTileRows * k, 0);
    const size_t exp0 = out->extra_exp.size();
    out->extra_exp.resize(exp0 + static_cast<size_t>(tile_folds - 1) * kFoldTileRows, 0);
    for (int rl = 0; rl < kFoldTileRows; ++rl) {
      const int r = mt * kFoldTileRows + rl;
      const std::vector<int>& R = tile_R[rl];
      out->row_exp[r] = R[0];
      for (int f = 1; f < tile_folds; ++f) {
        // Rows with fewer folds keep their last R: the kernel's rescale by 2^(R_f-1 - R_f) is 1.
        out->extra_exp[exp0 + static_cast<size_t>(f - 1) * kFoldTileRows + rl] =
            R[std::min<size_t>(f, R.size() - 1)];
      }
      const uint8_t* pr = packed + static_cast<size_t>(r) * (k / 2);
      const uint8_t* sr = scales + static_cast<size_t>(r) * nb;
      for (int b = 0; b < nb; ++b) {
        const int f = tile_fold[rl][b];
        const int d = static_cast<int>(sr[b]) - kUe8m0Bias - R[f];
        uint8_t lut[16];  // codes of this block's nibbles (only present magnitudes are in range)
        for (int c = 0; c < 16; ++c) {
          lut[c] = ((c & 7) == 0 || d < kDMin || d > kDMax)
                       ? 0
                       : fold_code(win, static_cast<uint8_t>(c), d);
        }
        uint8_t* dst_base =
            f == 0 ? out->w.data()
                   : out->extra_w.data() + extra0 + static_cast<size_t>(f - 1) * kFoldTileRows * k;
        const int row_in = f == 0 ? r : rl;     // extra folds are [64, k] matrices of their own
        for (int half = 0; half < 2; ++half) {  // two 16-element chunks (contiguous in a tile)
          const int c0 = 32 * b + 16 * half;
          uint8_t* dst = dst_base + fold_offset(row_in, c0, k);
          const uint8_t* src = pr + c0 / 2;
          for (int j = 0; j < 8; ++j) {
            dst[2 * j] = lut[src[j] & 15];
            dst[2 * j + 1] = lut[src[j] >> 4];
          }
        }
      }
    }
  }
}

double fp8_folded_value(const Fp8FoldedMatrix& m, int row, int k) {
  const int mt = row / kFoldTileRows, rl = row % kFoldTileRows;
  double v =
      std::ldexp(static_cast<double>(e4m3_to_float(m.w[fold_offset(row, k, m.k)])), m.row_exp[row]);
  size_t pool = 0;
  for (int t = 0; t < mt; ++t) pool += m.tile_extra[t];
  for (int f = 0; f < m.tile_extra[mt]; ++f) {
    const size_t base = (pool + f) * kFoldTileRows * static_cast<size_t>(m.k);
    const double x = e4m3_to_float(m.extra_w[base + fold_offset(rl, k, m.k)]);
    v += std::ldexp(x, m.extra_exp[(pool + f) * kFoldTileRows + rl]);
  }
  return v;
}

void append_folded_meta(const Fp8FoldedMatrix& m, Fp8FoldedSet* set) {
  if (set->experts == 0) {
    set->rows = m.rows;
    set->k = m.k;
  } else if (set->rows != m.rows || set->k != m.k) {
    throw Error("append_folded: expert shape [" + std::to_string(m.rows) + ", " +
                std::to_string(m.k) + "] differs from the set's [" + std::to_string(set->rows) +
                ", " + std::to_string(set->k) + "]");
  }
  ++set->experts;
  set->row_exp.insert(set->row_exp.end(), m.row_exp.begin(), m.row_exp.end());
  for (int t : m.tile_extra) set->extra_begin.push_back(set->extra_begin.back() + t);
  set->extra_w.insert(set->extra_w.end(), m.extra_w.begin(), m.extra_w.end());
  set->extra_exp.insert(set->extra_exp.end(), m.extra_exp.begin(), m.extra_exp.end());
  set->rows_split += m.rows_split;
}

void append_folded(const Fp8FoldedMatrix& m, Fp8FoldedSet* set) {
  append_folded_meta(m, set);
  set->w.insert(set->w.end(), m.w.begin(), m.w.end());
}

}  // namespace mxmoe::sm90
