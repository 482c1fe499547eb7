// src/cuda/sm90/prepack.cpp: the exact byte permutation between row-major MXFP4 and the SM90
// kernels' prepacked order (mxfp4_fragment.h describes the order). Host only, no CUDA calls.
//
// Only nibbles and scale bytes move, so unprepack(prepack(w)) == w bit for bit; bad shapes throw
// mxmoe::Error naming the function and the shape.
#include <string>

#include "mxmoe/common.h"
#include "mxmoe/formats.h"
#include "sm90/grouped_gemm.h"
#include "sm90/mxfp4_fragment.h"

namespace mxmoe::sm90 {
namespace {

void check_shape(const char* fn, int rows, int k) {
  if (rows <= 0 || k <= 0 || rows % kTileM != 0 || k % kStepK != 0) {
    throw Error(std::string(fn) + ": matrix [" + std::to_string(rows) + ", " +
                std::to_string(k) + "] needs rows % 64 == 0 and k % 64 == 0");
  }
}

}  // namespace

size_t prepacked_packed_bytes(int rows, int k) { return static_cast<size_t>(rows) * k / 2; }
size_t prepacked_scale_bytes(int rows, int k) { return static_cast<size_t>(rows) * k / 32; }

void prepack_mxfp4(const uint8_t* packed, const uint8_t* scales, int rows, int k,
                   uint8_t* out_packed, uint8_t* out_scales) {
  check_shape("prepack_mxfp4", rows, k);
  const size_t row_bytes = static_cast<size_t>(k) / 2;
  // Every output byte receives exactly two nibbles, so the output needs no clearing.
  for (int r = 0; r < rows; ++r) {
    const uint8_t* src = packed + r * row_bytes;
    for (int c = 0; c < k; ++c) {
      const FragPos p = frag_pos(r, c, k);
      const uint8_t nib = e2m1_get(src, c);
      uint8_t& dst = out_packed[p.byte];
      dst = static_cast<uint8_t>((dst & (0xF0 >> p.shift)) | (nib << p.shift));
    }
    for (int b = 0; b < k / kMxBlock; ++b) {
      out_scales[frag_scale_pos(r, b, k)] = scales[static_cast<size_t>(r) * (k / kMxBlock) + b];
    }
  }
}

void unprepack_mxfp4(const uint8_t* prepacked, const uint8_t* prescales, int rows, int k,
                     uint8_t* packed, uint8_t* scales) {
  check_shape("unprepack_mxfp4", rows, k);
  const size_t row_bytes = static_cast<size_t>(k) / 2;
  for (int r = 0; r < rows; ++r) {
    uint8_t* dst = packed + r * row_bytes;
    for (int c = 0; c < k; c += 2) {
      const FragPos lo = frag_pos(r, c, k), hi = frag_pos(r, c + 1, k);
      dst[c / 2] = e2m1_pack(static_cast<uint8_t>(prepacked[lo.byte] >> lo.shift),
                             static_cast<uint8_t>(prepacked[hi.byte] >> hi.shift));
    }
    for (int b = 0; b < k / kMxBlock; ++b) {
      scales[static_cast<size_t>(r) * (k / kMxBlock) + b] = prescales[frag_scale_pos(r, b, k)];
    }
  }
}

}  // namespace mxmoe::sm90
