// tests/gpu/bench_decode_streams.cu: what DRAM rate does the decode kernel's weight stream get
// with no math at all? (bench/NOTES.md D round 9.) The decode kernel (sm90/decode_gemm_kernel.cuh)
// runs ~3.4 TB/s in its full waves and ~3.0 TB/s on average at EP16 T=64, against 3.9 TB/s for
// a plain copy; rounds 7-8 showed its time follows the DRAM streams it keeps open. This program
// replays only its loads: 5 CTAs of 128 threads per SM, persistent, tile t = c, c + grid, ...;
// per 64-K step each thread loads its 16-byte fragment (the CTA's 2 KB, contiguous) and its
// 4-byte scale word (the CTA's 128 B), D steps ahead in registers, and consumes them at once.
// Layouts:
//   split        the shipped prepacked layout: scales in their own array ([tile][step][128 B]);
//   weights-only the fragments alone (the bytes without the scales' second stream);
//   interleaved  the scales right after each step's fragments ([tile][step][2048 + 128 B]).
// Prints GB/s over the bytes read. A standalone program, timing only (no assertions, not a
// ctest): `ninja bench_decode_streams` (EXCLUDE_FROM_ALL).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "bench_cuda_check.h"
#include "sm90/decode_gemm_kernel.cuh"  // the kernel's own loads and sizes

namespace {

// The decode kernel's CTA and step sizes, and its weight loads (decode_gemm_kernel.cuh), so the
// replay issues the very instructions the kernel does.
using mxmoe::sm90::decode::evict_first_policy;
using mxmoe::sm90::decode::kSBytes;   // scale words per CTA and step (128 B)
using mxmoe::sm90::decode::kThreads;  // 128
using mxmoe::sm90::decode::kWBytes;   // fragments per CTA and step (2 KB)
using mxmoe::sm90::decode::ld_weights_u32;
using mxmoe::sm90::decode::ld_weights_v4;
constexpr int kKT = 56;  // 64-K steps per tile (GEMM1 at K = 3584)
enum Layout { kSplit = 0, kWeightsOnly = 1, kInterleaved = 2 };
const char* const kLayoutName[] = {"split", "weights-only", "interleaved"};

template <int kLayout, int D>
__global__ void __launch_bounds__(kThreads)
    streams(const uint8_t* w, const uint8_t* s, int tiles, unsigned* sink) {
  constexpr int64_t kStep = kLayout == kInterleaved ? kWBytes + kSBytes : kWBytes;
  const int tid = threadIdx.x;
  const int sword = (8 * (tid >> 5) + ((tid & 31) >> 2)) * 4;  // the decode kernel's scale word
  const uint64_t pol = evict_first_policy();
  unsigned acc = 0;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    const uint8_t* wt = w + static_cast<int64_t>(t) * kKT * kStep + tid * 16;
    const uint8_t* st = kLayout == kInterleaved
                            ? w + static_cast<int64_t>(t) * kKT * kStep + kWBytes + sword
                            : s + static_cast<int64_t>(t) * kKT * kSBytes + sword;
    constexpr int64_t kSStep = kLayout == kInterleaved ? kStep : kSBytes;
    uint4 q[D];
    uint32_t sc[D];
#pragma unroll
    for (int j = 0; j < D; ++j) {
      q[j] = ld_weights_v4(wt + j * kStep, pol);
      sc[j] = kLayout == kWeightsOnly ? 0u : ld_weights_u32(st + j * kSStep, pol);
    }
    for (int k0 = 0; k0 < kKT; k0 += D) {
#pragma unroll
      for (int j = 0; j < D; ++j) {
        const int k = k0 + j;
        if (k < kKT) {
          acc ^= q[j].x ^ q[j].y ^ q[j].z ^ q[j].w ^ sc[j];
          if (k + D < kKT) {
            q[j] = ld_weights_v4(wt + (k + D) * kStep, pol);
            if (kLayout != kWeightsOnly) sc[j] = ld_weights_u32(st + (k + D) * kSStep, pol);
          }
        }
      }
    }
  }
  if (acc == 0x9E3779B9u) sink[0] = acc;  // keeps every load alive
}

template <int kLayout, int D>
double run(const uint8_t* w, const uint8_t* s, int tiles, int grid, unsigned* sink, void* flush,
           size_t flush_bytes) {
  const double us = median_flushed_us(
      [&](cudaStream_t st) { streams<kLayout, D><<<grid, kThreads, 0, st>>>(w, s, tiles, sink); },
      flush, flush_bytes, /*st=*/0, 9, 2);
  const double bytes =
      static_cast<double>(tiles) * kKT * (kWBytes + (kLayout == kWeightsOnly ? 0 : kSBytes));
  std::printf("STREAMS %-12s D=%d tiles=%5d grid=%4d | %8.1f us %7.0f GB/s\n", kLayoutName[kLayout],
              D, tiles, grid, us, bytes / us * 1e-3);
  return us;
}

}  // namespace

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int grid = 5 * sms;    // the decode kernel's occupancy
  const int max_tiles = 3648;  // EP16 T=64 GEMM1: ~38 experts x 96 weight tiles
  uint8_t *w = nullptr, *s = nullptr;
  unsigned* sink = nullptr;
  void* flush = nullptr;
  const size_t flush_bytes = 256u << 20;
  const size_t wbytes = static_cast<size_t>(max_tiles) * kKT * (kWBytes + kSBytes);
  CK(cudaMalloc(&w, wbytes));
  CK(cudaMalloc(&s, static_cast<size_t>(max_tiles) * kKT * kSBytes));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMalloc(&flush, flush_bytes));
  CK(cudaMemset(w, 0x5A, wbytes));
  CK(cudaMemset(s, 0x7E, static_cast<size_t>(max_tiles) * kKT * kSBytes));
  for (int tiles : {5 * grid, max_tiles}) {  // full waves only, and EP16 T=64's count
    run<kSplit, 4>(w, s, tiles, grid, sink, flush, flush_bytes);
    run<kWeightsOnly, 4>(w, s, tiles, grid, sink, flush, flush_bytes);
    run<kInterleaved, 4>(w, s, tiles, grid, sink, flush, flush_bytes);
    run<kSplit, 8>(w, s, tiles, grid, sink, flush, flush_bytes);
    run<kInterleaved, 8>(w, s, tiles, grid, sink, flush, flush_bytes);
  }
  // A plain streaming read of the same bytes for the ceiling, one wave of 8-deep loads.
  run<kWeightsOnly, 8>(w, s, max_tiles, grid, sink, flush, flush_bytes);
  CK(cudaFree(w));
  CK(cudaFree(s));
  CK(cudaFree(sink));
  CK(cudaFree(flush));
  return 0;
}
