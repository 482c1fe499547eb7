// weight_layout.cpp: w1/w3 <-> fused w13 (weight_layout.h has the layout and why).
//
// Only whole rows move: a packed row (k/2 bytes) and its scale row (k/32 bytes) go to the same
// destination row, so the conversion is exact by construction and its inverse is too.
#include "mxmoe/weight_layout.h"

#include <cstring>

namespace mxmoe {
namespace {

void check_half(const Mxfp4View& w, const char* name) {
  if (!w.packed || !w.scales) throw Error(std::string("fuse_w13: ") + name + " has null data");
  if (w.rows <= 0 || w.rows % kGateUpInterleave != 0)
    throw Error(std::string("fuse_w13: ") + name + " has " + std::to_string(w.rows) +
                " rows, need a positive multiple of " + std::to_string(kGateUpInterleave));
  if (w.k <= 0 || w.k % 32 != 0)
    throw Error(std::string("fuse_w13: ") + name + " has K = " + std::to_string(w.k) +
                ", need a positive multiple of 32");
}

}  // namespace

void fuse_w13(const Mxfp4View& w1, const Mxfp4View& w3, uint8_t* packed_out, uint8_t* scales_out) {
  check_half(w1, "w1");
  check_half(w3, "w3");
  if (w1.rows != w3.rows || w1.k != w3.k)
    throw Error("fuse_w13: w1 [" + std::to_string(w1.rows) + ", " + std::to_string(w1.k) +
                "] and w3 [" + std::to_string(w3.rows) + ", " + std::to_string(w3.k) +
                "] differ in shape");
  const size_t pb = w1.k / 2, sb = w1.k / 32;
  for (int i = 0; i < w1.rows; ++i) {
    for (int up = 0; up < 2; ++up) {
      const Mxfp4View& src = up ? w3 : w1;
      const size_t dst = static_cast<size_t>(w13_row(i, up != 0));
      std::memcpy(packed_out + dst * pb, src.packed + i * pb, pb);
      std::memcpy(scales_out + dst * sb, src.scales + i * sb, sb);
    }
  }
}

void unfuse_w13(const Mxfp4View& w13, uint8_t* w1_packed, uint8_t* w1_scales, uint8_t* w3_packed,
                uint8_t* w3_scales) {
  if (!w13.packed || !w13.scales) throw Error("unfuse_w13: w13 has null data");
  if (w13.rows <= 0 || w13.rows % (2 * kGateUpInterleave) != 0 || w13.k <= 0 || w13.k % 32 != 0)
    throw Error("unfuse_w13: w13 is [" + std::to_string(w13.rows) + ", " + std::to_string(w13.k) +
                "], need rows a positive multiple of " + std::to_string(2 * kGateUpInterleave) +
                " and K a positive multiple of 32");
  const size_t pb = w13.k / 2, sb = w13.k / 32;
  for (int i = 0; i < w13.rows / 2; ++i) {
    for (int up = 0; up < 2; ++up) {
      const size_t src = static_cast<size_t>(w13_row(i, up != 0));
      std::memcpy((up ? w3_packed : w1_packed) + i * pb, w13.packed + src * pb, pb);
      std::memcpy((up ? w3_scales : w1_scales) + i * sb, w13.scales + src * sb, sb);
    }
  }
}

}  // namespace mxmoe
