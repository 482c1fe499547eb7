// mxmoe/weight_layout.h: the exact conversion of the checkpoint's separate w1 (gate) and w3 (up)
// into the fused w13 the kernels consume, and back.
//
// Layout: w13 has 2I rows, in groups of kGateUpInterleave = 8 rows of gate followed by the same 8
// rows of up:  w13 rows [16g, 16g+8) = w1 rows [8g, 8g+8),  w13 rows [16g+8, 16g+16) = w3 rows
// [8g, 8g+8).
// NOTES: with the weights as the 64-row M operand of a Hopper wgmma, a thread's accumulator
// holds rows r and r+8 of each 16-row slab, so this order puts a gate value and its matching up
// value in the same thread: SiTU-GLU runs in GEMM1's epilogue with no data exchange, and a 64-row
// tile yields 32 consecutive intermediate outputs, exactly one MX block for the W4A8
// requantization. Only bytes move (packed rows and their scale rows), so the conversion is exact.
#pragma once

#include <cstdint>

#include "mxmoe/moe_layer.h"

namespace mxmoe {

constexpr int kGateUpInterleave = 8;

// The w13 row that holds gate row i (is_up = false) or up row i (is_up = true).
inline int w13_row(int i, bool is_up) {
  return (i / kGateUpInterleave) * (2 * kGateUpInterleave) + (is_up ? kGateUpInterleave : 0) +
         i % kGateUpInterleave;
}

// w1, w3: [I, K] each (same shape, I % 8 == 0). Writes packed [2I, K/2] and scales [2I, K/32].
// Throws mxmoe::Error on mismatched shapes or I % 8 != 0.
void fuse_w13(const Mxfp4View& w1, const Mxfp4View& w3, uint8_t* packed_out, uint8_t* scales_out);
// The inverse: w13 [2I, K] back to w1 and w3 (buffers of [I, K/2] and [I, K/32] each).
void unfuse_w13(const Mxfp4View& w13, uint8_t* w1_packed, uint8_t* w1_scales, uint8_t* w3_packed,
                uint8_t* w3_scales);

}  // namespace mxmoe
