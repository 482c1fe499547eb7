// src/cuda/smxx/quantize_row.cuh: one token row of the expert input -> GEMM1's BF16 operand, the
// device routine shared by the quantize kernel (quantize.cu) and the fused decode prologue
// (prologue.cu), so both write the very same bits.
//
// Work split: thread q of the row's threads owns 8 consecutive elements (a quarter of an MX
// block): one 16-byte (BF16) or two 16-byte (fp32) loads when the row is 16-byte aligned, one
// 16-byte store. The block amax is a max over the thread's 8 values and 2 shuffles between the
// block's 4 consecutive lanes. Numerics (docs/NUMERICS.md):
//   w4a16: BF16 input copied bit for bit, fp32 input rounded RNE (formats.h float_to_bf16);
//   w4a8 : E = mx_scale_exponent(amax, 448), code = float_to_e4m3(x * 2^-E), stored value
//          BF16(e4m3(code) * 2^E) (exact), all through smxx/mxfp8_device.cuh, bit-identical to
//          formats.h / mx_quant.h. A NaN or Inf in a block (scale byte 255) gives the canonical
//          BF16 NaN 0x7FFF for all 32 elements (what the scalar kernel produced: NaN scale).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mxmoe/formats.h"
#include "smxx/mxfp8_device.cuh"

namespace mxmoe::smxx {

constexpr uint16_t kBf16CanonicalNan = 0x7FFF;

// Loads 8 consecutive values of x starting at element i as fp32.
template <bool kF32, bool kVec>
__device__ __forceinline__ void load8(const void* x, size_t i, float v[8], uint16_t raw[8]) {
  if constexpr (kF32) {
    const float* p = static_cast<const float*>(x) + i;
    if constexpr (kVec) {
      const float4 a = *reinterpret_cast<const float4*>(p);
      const float4 b = *reinterpret_cast<const float4*>(p + 4);
      v[0] = a.x;
      v[1] = a.y;
      v[2] = a.z;
      v[3] = a.w;
      v[4] = b.x;
      v[5] = b.y;
      v[6] = b.z;
      v[7] = b.w;
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = p[j];
    }
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(x) + i;
    if constexpr (kVec) {
      const uint4 a = *reinterpret_cast<const uint4*>(p);
      const uint32_t w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        raw[2 * j] = static_cast<uint16_t>(w[j] & 0xFFFFu);
        raw[2 * j + 1] = static_cast<uint16_t>(w[j] >> 16);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) raw[j] = p[j];
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = bf16_to_float(raw[j]);
  }
}

// Quantizes row elements [0, H) of x (row start at element offset `in_base`) into out[0, H).
// Called by `nthreads` threads (a multiple of 32, every one of them: the shuffles are warp-wide)
// with thread index `tid`. H % 32 == 0.
template <bool kF32, bool kVec>
__device__ __forceinline__ void quantize_row(const void* x, size_t in_base, int H, bool mxfp8,
                                             uint16_t* out, int tid, int nthreads) {
  const int quads = H / 8;
  for (int base = 0; base < quads; base += nthreads) {
    const int q = base + tid;
    const bool active = q < quads;  // a whole 4-lane block group is active or not (H % 32 == 0)
    float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    uint16_t raw[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (active) load8<kF32, kVec>(x, in_base + static_cast<size_t>(q) * 8, v, raw);
    uint32_t o[4];
    if (!mxfp8) {
      if (!active) continue;  // no shuffles on this path
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint16_t lo = kF32 ? float_to_bf16(v[2 * j]) : raw[2 * j];
        const uint16_t hi = kF32 ? float_to_bf16(v[2 * j + 1]) : raw[2 * j + 1];
        o[j] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
      }
    } else {
      // NaN must poison the block (fmaxf would drop it): it counts as Inf, scale byte 255.
      float amax = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float a = fabsf(v[j]);
        amax = fmaxf(amax, a != a ? INFINITY : a);
      }
      amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, 1));
      amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, 2));
      if (!active) continue;
      const int E = mxfp8_exponent(amax);
      if (E > kScaleExpMax) {
#pragma unroll
        for (int j = 0; j < 4; ++j) o[j] = kBf16CanonicalNan | (uint32_t{kBf16CanonicalNan} << 16);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 d = mxfp8_fake_quantize2(v[2 * j], v[2 * j + 1], E);
          o[j] = static_cast<uint32_t>(float_to_bf16(d.x)) |
                 (static_cast<uint32_t>(float_to_bf16(d.y)) << 16);
        }
      }
    }
    *reinterpret_cast<uint4*>(out + static_cast<size_t>(q) * 8) =
        make_uint4(o[0], o[1], o[2], o[3]);
  }
}

// The host-side choice of load width: 16-byte loads need the row starts 16-byte aligned.
inline bool quantize_rows_vectorizable(const void* x, bool x_is_f32, int64_t x_stride) {
  const int64_t elem = x_is_f32 ? 4 : 2;
  return reinterpret_cast<uintptr_t>(x) % 16 == 0 && (x_stride * elem) % 16 == 0;
}

}  // namespace mxmoe::smxx
