// tests/gpu/test_mxfp8_device.cpp: smxx/mxfp8_device.cuh against formats.h, code for code.
// (Compiled as CUDA: tests/gpu/CMakeLists.txt.)
//
//  - mxfp8_exponent: every one of the 2^32 float bit patterns as amax, against
//    mx_scale_exponent(amax, 448) evaluated on the device (same formats.h source), and a
//    structured + random set against the host's formats.h.
//  - mxfp8_quantize2 / mxfp8_fake_quantize(2): every one of the 2^32 float bit patterns as the
//    value at scale exponents from the clamp (-127) through the subnormal 2^-E cases (127, 128)
//    to the NaN scale (128), against float_to_e4m3(ldexpf(v, -E)) and its dequantized value;
//    NaN values are counted apart (formats.h gives 0x7F for every NaN).
//  - e4m3x2_to_float2 / mxfp8_dequantize2: every code pair, every E in [-127, 128].
//  - MX blocks of random floats (random bits, and Gaussians at random binades including
//    ties, values that round to 448, subnormal codes, zeros of both signs): codes and scale bytes
//    against the host's formats.h, millions of elements.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "gpu_test_util.h"
#include "mxmoe/formats.h"
#include "smxx/mxfp8_device.cuh"

namespace mxmoe::test {
namespace {

using smxx::mxfp8_exponent;

struct Mismatch {
  unsigned long long count;      // mismatches
  unsigned long long nan_count;  // mismatches where the input was NaN
  uint32_t first_in[8], first_got[8], first_want[8];
  int first_e[8];
};

__device__ void record(Mismatch* m, bool input_nan, uint32_t in, uint32_t got, uint32_t want,
                       int E) {
  if (input_nan) {
    atomicAdd(&m->nan_count, 1ull);
    return;
  }
  const unsigned long long i = atomicAdd(&m->count, 1ull);
  if (i < 8) {
    m->first_in[i] = in;
    m->first_got[i] = got;
    m->first_want[i] = want;
    m->first_e[i] = E;
  }
}

__device__ bool same_float(float a, float b) {
  return (a != a && b != b) || __float_as_uint(a) == __float_as_uint(b);
}

// Every 32-bit pattern as amax.
__global__ void exponent_sweep_kernel(Mismatch* m) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t u = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < (1ull << 32);
       u += stride) {
    const float a = __uint_as_float(static_cast<uint32_t>(u));
    const int got = mxfp8_exponent(a), want = mx_scale_exponent(a, kE4M3Max);
    if (got != want) record(m, false, static_cast<uint32_t>(u), got, want, 0);
  }
}

// Every 32-bit pattern as the value, pairs (u, u ^ 1) through the x2 path and u alone through
// the single-value path, at scale exponent E; and the two-block path (mxfp8_scale +
// mxfp8_fake_quantize_scaled) with v0 at E and v1 at another exponent E2, both orders.
__global__ void quantize_sweep_kernel(int E, Mismatch* codes, Mismatch* values) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t p = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < (1ull << 31);
       p += stride) {
    const uint32_t u0 = static_cast<uint32_t>(p) * 2u, u1 = u0 + 1u;
    const float v0 = __uint_as_float(u0), v1 = __uint_as_float(u1);
    const uint32_t c = smxx::mxfp8_quantize2(v0, v1, E);
    const float2 f = smxx::mxfp8_fake_quantize2(v0, v1, E);
    const float s1 = smxx::mxfp8_fake_quantize(v1, E);
    const uint8_t w0 = float_to_e4m3(ldexpf(v0, -E)), w1 = float_to_e4m3(ldexpf(v1, -E));
    const float d0 = ldexpf(e4m3_to_float(w0), E), d1 = ldexpf(e4m3_to_float(w1), E);
    if ((c & 0xFF) != w0) record(codes, v0 != v0, u0, c & 0xFF, w0, E);
    if ((c >> 8) != w1) record(codes, v1 != v1, u1, c >> 8, w1, E);
    if (!same_float(f.x, d0))
      record(values, v0 != v0, u0, __float_as_uint(f.x), __float_as_uint(d0), E);
    if (!same_float(f.y, d1))
      record(values, v1 != v1, u1, __float_as_uint(f.y), __float_as_uint(d1), E);
    if (!same_float(s1, d1))
      record(values, v1 != v1, u1, __float_as_uint(s1), __float_as_uint(d1), E);
    const int E2 = E >= 1 ? E - 128 : E + 127;  // in [-127, 128], never E
    const float e0 = ldexpf(e4m3_to_float(float_to_e4m3(ldexpf(v0, -E2))), E2);
    const float e1 = ldexpf(e4m3_to_float(float_to_e4m3(ldexpf(v1, -E2))), E2);
    const smxx::Mxfp8Scale sE = smxx::mxfp8_scale(E), sE2 = smxx::mxfp8_scale(E2);
    const float2 pa = smxx::mxfp8_fake_quantize_scaled(v0, sE, v1, sE2);
    const float2 pb = smxx::mxfp8_fake_quantize_scaled(v0, sE2, v1, sE);
    if (!same_float(pa.x, d0))
      record(values, v0 != v0, u0, __float_as_uint(pa.x), __float_as_uint(d0), E);
    if (!same_float(pa.y, e1))
      record(values, v1 != v1, u1, __float_as_uint(pa.y), __float_as_uint(e1), E2);
    if (!same_float(pb.x, e0))
      record(values, v0 != v0, u0, __float_as_uint(pb.x), __float_as_uint(e0), E2);
    if (!same_float(pb.y, d1))
      record(values, v1 != v1, u1, __float_as_uint(pb.y), __float_as_uint(d1), E);
  }
}

// Every code pair, every E in [-127, 128].
__global__ void dequantize_sweep_kernel(Mismatch* m) {
  const int n = 65536 * 256;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const uint32_t codes = static_cast<uint32_t>(i & 0xFFFF);
    const int E = (i >> 16) - 127;
    const float2 f = smxx::mxfp8_dequantize2(codes, E);
    const float2 raw = smxx::e4m3x2_to_float2(codes);
    const uint8_t c0 = codes & 0xFF, c1 = codes >> 8;
    if (!same_float(f.x, ldexpf(e4m3_to_float(c0), E)))
      record(m, false, codes, __float_as_uint(f.x), __float_as_uint(ldexpf(e4m3_to_float(c0), E)),
             E);
    if (!same_float(f.y, ldexpf(e4m3_to_float(c1), E)))
      record(m, false, codes, __float_as_uint(f.y), __float_as_uint(ldexpf(e4m3_to_float(c1), E)),
             E);
    if (!same_float(raw.x, e4m3_to_float(c0)) || !same_float(raw.y, e4m3_to_float(c1)))
      record(m, false, codes, __float_as_uint(raw.x), __float_as_uint(e4m3_to_float(c0)), 999);
  }
}

__global__ void exponent_array_kernel(const float* a, int n, int* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = mxfp8_exponent(a[i]);
}

// MX blocks: one warp per block of 32 (lane = element); the block amax by shuffles as the
// kernels do; the codes through the x2 path (lane pairs exchange their values).
__global__ void block_quantize_kernel(const float* x, int blocks, uint8_t* codes, int* exps,
                                      float* deq) {
  const int lane = threadIdx.x % 32;
  const int warps = gridDim.x * blockDim.x / 32;
  for (int b = (blockIdx.x * blockDim.x + threadIdx.x) / 32; b < blocks; b += warps) {
    const float v = x[static_cast<size_t>(b) * 32 + lane];
    float amax = fabsf(v);
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, off));
    const int E = mxfp8_exponent(amax);
    const float other = __shfl_xor_sync(~0u, v, 1);
    const bool even = (lane & 1) == 0;
    const uint32_t c2 =
        even ? smxx::mxfp8_quantize2(v, other, E) : smxx::mxfp8_quantize2(other, v, E);
    const uint8_t c = even ? (c2 & 0xFF) : (c2 >> 8);
    codes[static_cast<size_t>(b) * 32 + lane] = c;
    deq[static_cast<size_t>(b) * 32 + lane] = smxx::mxfp8_dequantize2(c, E).x;
    if (lane == 0) exps[b] = E;
  }
}

// A zeroed device Mismatch record. status(): the allocation's and the zeroing's; read(): the copy
// back's (both checked by the tests: a record that failed to come back must not read as "no
// mismatches").
class Mx {
 public:
  Mx() {
    status_ = cudaMalloc(&d_, sizeof(Mismatch));
    if (status_ == cudaSuccess) status_ = cudaMemset(d_, 0, sizeof(Mismatch));
  }
  ~Mx() { cudaFree(d_); }
  Mx(const Mx&) = delete;
  Mx& operator=(const Mx&) = delete;
  cudaError_t status() const { return status_; }
  Mismatch* get() { return d_; }
  cudaError_t read(Mismatch* h) const {
    return cudaMemcpy(h, d_, sizeof(*h), cudaMemcpyDeviceToHost);
  }

 private:
  Mismatch* d_ = nullptr;
  cudaError_t status_ = cudaSuccess;
};

void report_mismatches(const char* what, const Mismatch& m) {
  for (unsigned long long i = 0; i < m.count && i < 8; ++i)
    ADD_FAILURE() << what << ": input 0x" << std::hex << m.first_in[i] << " got 0x"
                  << m.first_got[i] << " want 0x" << m.first_want[i] << std::dec
                  << " (E = " << m.first_e[i] << ")";
}

TEST(GpuMxfp8Device, ExponentOfEveryFloatMatchesMxScaleExponent) {
  MXMOE_REQUIRE_SM90();
  Mx m;
  CUDA_OK(m.status());
  exponent_sweep_kernel<<<132 * 8, 256>>>(m.get());
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  Mismatch h{};
  CUDA_OK(m.read(&h));
  report_mismatches("exponent", h);
  EXPECT_EQ(h.count, 0ull);
  // And against the host's formats.h on the amax domain (|x| maxima: +0, subnormals, normals,
  // +Inf, NaN): every binade, mantissas around 1.75. (Negative inputs: the sweep above.)
  std::vector<float> a;
  for (uint32_t b = 0; b < 256; ++b)
    for (uint32_t mant : {0u, 1u, 0x3FFFFFu, 0x5FFFFFu, 0x600000u, 0x600001u, 0x7FFFFEu, 0x7FFFFFu})
      for (uint32_t s : {0u}) {
        const uint32_t u = (s << 31) | (b << 23) | mant;
        float f;
        std::memcpy(&f, &u, 4);
        a.push_back(f);
      }
  a.push_back(FLT_MAX);
  a.push_back(448.0f);
  a.push_back(std::nextafter(448.0f, 1e9f));
  const int n = static_cast<int>(a.size());
  DevBuf<float> dx;
  DevBuf<int> de(n);
  CUDA_OK(dx.upload(a));
  exponent_array_kernel<<<(n + 255) / 256, 256>>>(dx.get(), n, de.get());
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<int> e;
  CUDA_OK(de.download(&e));
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    const int want = mx_scale_exponent(a[i], kE4M3Max);
    if (e[i] != want && ++bad <= 5)
      ADD_FAILURE() << "amax " << a[i] << ": E " << e[i] << " want " << want;
  }
  EXPECT_EQ(bad, 0);
  std::printf(
      "[mxfp8] exponent: 2^32 amax patterns (device formats.h) + %d (host): %llu + %d "
      "mismatches\n",
      n, h.count, bad);
}

TEST(GpuMxfp8Device, CodesOfEveryFloatMatchFormatsAtEveryScaleRegime) {
  MXMOE_REQUIRE_SM90();
  // -127: the clamp (v * 2^127); -9 / 0 / 8: ordinary; 119 / 120: the largest E a finite amax
  // gives; 126: the last normal 2^-E; 127 / 128: 2^-E subnormal (128: the NaN-scale block).
  for (int E : {-127, -126, -60, -9, -1, 0, 1, 8, 60, 119, 120, 126, 127, 128}) {
    Mx codes, values;
    CUDA_OK(codes.status());
    CUDA_OK(values.status());
    quantize_sweep_kernel<<<132 * 8, 256>>>(E, codes.get(), values.get());
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    Mismatch c{}, v{};
    CUDA_OK(codes.read(&c));
    CUDA_OK(values.read(&v));
    report_mismatches("code", c);
    report_mismatches("value", v);
    EXPECT_EQ(c.count, 0ull) << "E = " << E;
    EXPECT_EQ(v.count, 0ull) << "E = " << E;
    EXPECT_EQ(c.nan_count, 0ull) << "E = " << E << ": NaN inputs gave another NaN code than 0x7F";
    std::printf(
        "[mxfp8] E = %4d: 2^32 values: %llu code, %llu value mismatches (NaN inputs: "
        "%llu code)\n",
        E, c.count, v.count, c.nan_count);
  }
}

TEST(GpuMxfp8Device, DequantizeEveryCodePairAtEveryExponent) {
  MXMOE_REQUIRE_SM90();
  Mx m;
  CUDA_OK(m.status());
  dequantize_sweep_kernel<<<132 * 4, 256>>>(m.get());
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  Mismatch h{};
  CUDA_OK(m.read(&h));
  report_mismatches("dequantize", h);
  EXPECT_EQ(h.count, 0ull);
}

// Random MX blocks, compared with the host's formats.h code by code.
TEST(GpuMxfp8Device, RandomBlocksMatchHostFormatsCodeForCode) {
  MXMOE_REQUIRE_SM90();
  const int blocks = 1 << 18;  // 8.4M elements
  std::vector<float> x(static_cast<size_t>(blocks) * 32);
  Rng r(2026);
  for (int b = 0; b < blocks; ++b) {
    float* blk = x.data() + static_cast<size_t>(b) * 32;
    const int kind = r.below(8);
    const int binade = r.below(300) - 150;
    for (int i = 0; i < 32; ++i) {
      float v;
      if (kind == 0) {  // random bit patterns, no NaN / Inf (they make the whole block NaN)
        uint32_t u = static_cast<uint32_t>(r.next());
        if (((u >> 23) & 0xFF) == 0xFF) u &= ~(1u << 23);
        std::memcpy(&v, &u, 4);
      } else if (kind == 1) {  // exact E4M3 grid points and midpoints (ties) at one scale
        const uint8_t c = static_cast<uint8_t>(r.below(0x7F));
        const uint8_t c2 = c == 0x7E ? c : static_cast<uint8_t>(c + 1);
        const float lo = e4m3_to_float(c), hi = e4m3_to_float(c2);
        v = std::ldexp(r.below(2) ? lo : 0.5f * (lo + hi), binade / 2);
        if (r.below(2)) v = -v;
      } else if (kind == 2) {  // amax right at 448 * 2^E and just around it
        const int s = r.below(3);
        v = std::ldexp(s == 0   ? 448.0f
                       : s == 1 ? 464.0f
                                : 447.9f,
                       binade / 3) *
            (r.below(2) ? 1.f : -1.f);
        if (i > 0) v *= static_cast<float>(r.uniform());
      } else if (kind == 3) {  // zeros of both signs and a few values
        v = r.below(4) == 0 ? std::ldexp(static_cast<float>(r.normal()), binade / 4)
                            : (r.below(2) ? 0.0f : -0.0f);
      } else {  // Gaussian at a random binade, a few far below amax (subnormal codes / 0)
        v = std::ldexp(static_cast<float>(r.normal()), binade / 2);
        if (r.below(6) == 0) v = std::ldexp(v, -(6 + r.below(8)));
      }
      blk[i] = v;
    }
  }
  DevBuf<float> dx, deq(x.size());
  DevBuf<uint8_t> dc(x.size());
  DevBuf<int> de(blocks);
  CUDA_OK(dx.upload(x));
  block_quantize_kernel<<<132 * 8, 256>>>(dx.get(), blocks, dc.get(), de.get(), deq.get());
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint8_t> codes;
  std::vector<int> exps;
  std::vector<float> vals;
  CUDA_OK(dc.download(&codes));
  CUDA_OK(de.download(&exps));
  CUDA_OK(deq.download(&vals));
  long long bad = 0, subnormal_codes = 0, sat = 0, zeros = 0;
  for (int b = 0; b < blocks; ++b) {
    const float* blk = x.data() + static_cast<size_t>(b) * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(blk[i]));
    const int E = mx_scale_exponent(amax, kE4M3Max);
    if (exps[b] != E && ++bad <= 5)
      ADD_FAILURE() << "block " << b << ": E " << exps[b] << " want " << E;
    for (int i = 0; i < 32; ++i) {
      const size_t j = static_cast<size_t>(b) * 32 + i;
      const uint8_t want = float_to_e4m3(std::ldexp(blk[i], -E));
      const float wv = std::ldexp(e4m3_to_float(want), E);
      subnormal_codes += (want & 0x78) == 0 && (want & 7) != 0;
      sat += (want & 0x7F) == 0x7E;
      zeros += (want & 0x7F) == 0;
      if ((codes[j] != want || std::memcmp(&vals[j], &wv, 4) != 0) && ++bad <= 5)
        ADD_FAILURE() << "block " << b << " elem " << i << " x = " << blk[i] << ": code 0x"
                      << std::hex << int(codes[j]) << " want 0x" << int(want) << std::dec
                      << ", value " << vals[j] << " want " << wv;
    }
  }
  EXPECT_EQ(bad, 0);
  std::printf(
      "[mxfp8] %zu random elements in %d blocks vs host formats.h: %lld mismatches "
      "(%lld subnormal codes, %lld codes of 448, %lld zeros)\n",
      x.size(), blocks, bad, subnormal_codes, sat, zeros);
}

}  // namespace
}  // namespace mxmoe::test
