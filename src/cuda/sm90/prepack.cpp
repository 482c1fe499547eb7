// src/cuda/sm90/prepack.cpp: the exact bit permutation between row-major MXFP4 and the SM90
// kernels' prepacked order (mxfp4_fragment.h describes the order). Host only, no CUDA calls.
//
// Only E2M1 bits and scale bytes move, so unprepack(prepack(w)) == w bit for bit; bad shapes
// throw mxmoe::Error naming the function and the shape. Both directions walk the prepacked words
// in order (one 32-bit word = 8 elements), so a multi-GB checkpoint converts in one pass.
#include <array>
#include <string>

#include "mxmoe/common.h"
#include "mxmoe/formats.h"
#include "sm90/grouped_gemm.h"
#include "sm90/mxfp4_fragment.h"

namespace mxmoe::sm90 {
namespace {

void check_shape(const char* fn, int rows, int k) {
  if (rows <= 0 || k <= 0 || rows % kTileM != 0 || k % kStepK != 0) {
    throw Error(std::string(fn) + ": matrix [" + std::to_string(rows) + ", " + std::to_string(k) +
                "] needs rows % 64 == 0 and k % 64 == 0");
  }
}

// deposit[q][h][nibble]: the word bits of element (q, h) holding that E2M1 code.
using DepositTable = std::array<std::array<std::array<uint32_t, 16>, 2>, 4>;
const DepositTable& deposit_table() {
  static const DepositTable table = [] {
    DepositTable t{};
    for (int q = 0; q < 4; ++q)
      for (int h = 0; h < 2; ++h)
        for (int nib = 0; nib < 16; ++nib)
          for (int b = 0; b < 4; ++b)
            if ((nib >> b) & 1) t[q][h][nib] |= 1u << frag_bit(q, h, b);
    return t;
  }();
  return table;
}

uint8_t extract(uint32_t word, int q, int h) {
  uint8_t nib = 0;
  for (int b = 0; b < 4; ++b) nib |= static_cast<uint8_t>(((word >> frag_bit(q, h, b)) & 1u) << b);
  return nib;
}

// Calls fn(word_offset, row, k) for every packed word, in prepacked order: register q of the
// word holds row + 8 (q & 1), elements k + 8 (q >> 1) (half 0) and the next one (half 1), which
// share one byte of the row-major matrix.
template <typename Fn>
void for_each_word(int rows, int k, Fn&& fn) {
  const int kt = k / kStepK;
  for (int mt = 0; mt < rows / kTileM; ++mt) {
    for (int kb = 0; kb < kt; ++kb) {
      for (int tid = 0; tid < kWarpgroup; ++tid) {
        const int w = tid / 32, g = (tid % 32) / 4, t = tid % 4;
        const int64_t frag = (static_cast<int64_t>(mt) * kt + kb) * kWarpgroup + tid;
        for (int j = 0; j < 4; ++j) {
          fn(frag * kFragBytes + 4 * j, kTileM * mt + 16 * w + g, kStepK * kb + 16 * j + 2 * t);
        }
      }
    }
  }
}

}  // namespace

bool mxfp4_scales_small(const uint8_t* scales, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) {
    if (scales[i] > 128) return false;
  }
  return true;
}

size_t prepacked_packed_bytes(int rows, int k) { return static_cast<size_t>(rows) * k / 2; }
size_t prepacked_scale_bytes(int rows, int k) { return static_cast<size_t>(rows) * k / 32; }

void prepack_mxfp4(const uint8_t* packed, const uint8_t* scales, int rows, int k,
                   uint8_t* out_packed, uint8_t* out_scales) {
  check_shape("prepack_mxfp4", rows, k);
  const size_t row_bytes = static_cast<size_t>(k) / 2;
  const DepositTable& dep = deposit_table();
  for_each_word(rows, k, [&](int64_t word, int row, int kk) {
    uint32_t x = 0;
    for (int q = 0; q < 4; ++q) {
      const uint8_t pair = packed[(row + 8 * (q & 1)) * row_bytes + (kk + 8 * (q >> 1)) / 2];
      x |= dep[q][0][pair & 0xF] | dep[q][1][pair >> 4];  // low nibble = even element
    }
    for (int i = 0; i < 4; ++i) out_packed[word + i] = static_cast<uint8_t>(x >> (8 * i));
  });
  for (int r = 0; r < rows; ++r) {
    for (int b = 0; b < k / kMxBlock; ++b) {
      out_scales[frag_scale_pos(r, b, k)] = scales[static_cast<size_t>(r) * (k / kMxBlock) + b];
    }
  }
}

void unprepack_mxfp4(const uint8_t* prepacked, const uint8_t* prescales, int rows, int k,
                     uint8_t* packed, uint8_t* scales) {
  check_shape("unprepack_mxfp4", rows, k);
  const size_t row_bytes = static_cast<size_t>(k) / 2;
  for_each_word(rows, k, [&](int64_t word, int row, int kk) {
    const uint32_t x = static_cast<uint32_t>(prepacked[word]) |
                       static_cast<uint32_t>(prepacked[word + 1]) << 8 |
                       static_cast<uint32_t>(prepacked[word + 2]) << 16 |
                       static_cast<uint32_t>(prepacked[word + 3]) << 24;
    for (int q = 0; q < 4; ++q) {
      packed[(row + 8 * (q & 1)) * row_bytes + (kk + 8 * (q >> 1)) / 2] =
          e2m1_pack(extract(x, q, 0), extract(x, q, 1));
    }
  });
  for (int r = 0; r < rows; ++r) {
    for (int b = 0; b < k / kMxBlock; ++b) {
      scales[static_cast<size_t>(r) * (k / kMxBlock) + b] = prescales[frag_scale_pos(r, b, k)];
    }
  }
}

}  // namespace mxmoe::sm90
