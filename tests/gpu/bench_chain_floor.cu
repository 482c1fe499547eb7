// tests/gpu/bench_chain_floor.cu: what does the decode chain's STRUCTURE cost, with no math?
// (bench/NOTES.md D round 30.) At EP16 T=1 the chain (prologue -> GEMM1 -> GEMM2 -> combine,
// PDL edges in one CUDA graph) takes ~25 us for 17.5 MB of weights, a ~6 us read at the copy
// rate; every piece of it has been tuned, and what is left looks like the chain's own latency.
// The lever named since the twenty-first session is one persistent kernel instead of four. This
// program prices that lever before anyone builds it: it replays only the chain's byte streams
// and dependencies, in CUDA graphs, L2 flushed before each replay:
//   copy    one kernel streams GEMM1's and GEMM2's weight bytes, no dependency: the DRAM floor
//           plus one launch; copy-cl4 the same grid in clusters of 4 (the split-K GEMMs' launch);
//   chain   four kernels with PDL, like run_moe's: a one-CTA glue kernel writes the offsets;
//           "GEMM1" streams its weights before its wait (as the decode kernels preload), then
//           reads the offsets and writes h; "GEMM2" likewise with its weights, then reads h and
//           writes y; a one-CTA "combine" reads y. Each kernel triggers its dependents at its
//           start (early: the most overlap PDL allows; all of a GEMM's weights stream before
//           its wait, so chain-early is the best case of any four-kernel chain), or at its end
//           (late);
//   fused   one persistent kernel (every CTA resident): each CTA reads the ids itself, streams
//           its GEMM1 slice, writes its h, arrives on a grid counter; streams the part of its
//           GEMM2 slice that fits in shared memory before waiting on that counter and the rest
//           after; then reads h, writes y and arrives on a second counter, whose last arriver
//           "combines" (reads y) and resets both counters for the next replay.
// With zero bytes the same variants give the pure latency of each structure. Prints the median
// of each variant and case. A standalone program, timing only (no assertions, not a ctest):
// `ninja bench_chain_floor` (EXCLUDE_FROM_ALL); gpu_check.sh runs it under MXMOE_GPU_MICRO=1.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "bench_cuda_check.h"
#include "sm90/decode_gemm_kernel.cuh"  // evict_first_policy, ld_weights_v4: the kernels' loads
#include "sm90/ptx.cuh"                 // ld_acquire_gpu
#include "smxx/pdl.cuh"

namespace {

using mxmoe::sm90::decode::evict_first_policy;
using mxmoe::sm90::decode::ld_weights_v4;
namespace pdl = mxmoe::pdl;

constexpr int kThreads = 256;
constexpr int kUnroll = 8;                          // 16-byte loads in flight per thread
constexpr int64_t kChunk = int64_t{kThreads} * 16;  // bytes per CTA-wide load
constexpr int kCtasPerSm = 4;
constexpr int64_t kSmemKeep = 160 << 10;  // GEMM2 bytes an SM could hold ahead

// This CTA's share [b0, b1) of `bytes`, in whole kChunk pieces.
struct Slice {
  int64_t b0, b1;
};
__device__ __forceinline__ Slice cta_slice(int64_t bytes, int cta, int ctas) {
  const int64_t chunks = (bytes + kChunk - 1) / kChunk;
  const int64_t c0 = chunks * cta / ctas, c1 = chunks * (cta + 1) / ctas;
  return {std::min(bytes, c0 * kChunk), std::min(bytes, c1 * kChunk)};
}
// Streams [b0, b1) of w with the decode kernels' evict-first 16-byte loads, kUnroll in flight.
__device__ __forceinline__ unsigned stream(const uint8_t* w, int64_t b0, int64_t b1, uint64_t pol) {
  unsigned acc = 0;
  for (int64_t off = b0 + threadIdx.x * 16; off < b1; off += kChunk * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j)
      v[j] =
          off + j * kChunk < b1 ? ld_weights_v4(w + off + j * kChunk, pol) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  return acc;
}
__device__ __forceinline__ void keep(unsigned acc, unsigned* sink) {
  if (acc == 0x9E3779B9u) sink[0] = acc;  // keeps every load alive
}

struct Buffers {
  const uint8_t* w1;  // GEMM1 weights
  const uint8_t* w2;  // GEMM2 weights
  int64_t b1, b2;     // their bytes
  const int* ids;     // [pairs]
  int pairs;
  int* offsets;    // [pairs] (the glue's output)
  float* h;        // [ctas * kThreads]
  float* y;        // [ctas * kThreads]
  float* out;      // [kThreads]
  int* counters;   // [2] (fused)
  unsigned* sink;  // [2]: [0] keeps loads alive, [1] a fused wait timed out
};

// ---- chain: glue -> GEMM1 -> GEMM2 -> combine, PDL ----
// kEarly: a kernel lets its dependent launch as soon as it starts (legal at any point: the
// dependent's wait still waits for this grid's completion and memory), so the dependent's CTAs
// take whatever SM room is left and stream their weights beside this kernel's.
template <bool kEarly>
__global__ void __launch_bounds__(kThreads) glue_kernel(Buffers b) {
  if (kEarly) pdl::launch_dependents();
  pdl::wait();
  for (int i = threadIdx.x; i < b.pairs; i += kThreads) b.offsets[i] = b.ids[i] + 1;
  if (!kEarly) pdl::launch_dependents();
}
template <bool kEarly, bool kGemm1>
__global__ void __launch_bounds__(kThreads) gemm_kernel(Buffers b) {
  if (kEarly) pdl::launch_dependents();
  const uint64_t pol = evict_first_policy();
  const Slice s = cta_slice(kGemm1 ? b.b1 : b.b2, blockIdx.x, gridDim.x);
  unsigned acc = stream(kGemm1 ? b.w1 : b.w2, s.b0, s.b1, pol);  // no dependency: before wait
  pdl::wait();
  const int i = blockIdx.x * kThreads + threadIdx.x;
  if (kGemm1) {
    b.h[i] = static_cast<float>(acc & 1u) + static_cast<float>(b.offsets[threadIdx.x % b.pairs]);
  } else {
    b.y[i] = static_cast<float>(acc & 1u) + b.h[i];
  }
  keep(acc, b.sink);
  if (!kEarly) pdl::launch_dependents();
}
__global__ void __launch_bounds__(kThreads) combine_kernel(Buffers b, int ctas) {
  pdl::wait();
  pdl::launch_dependents();
  float sum = 0.0f;
  for (int c = 0; c < ctas; c += 64) sum += b.y[c * kThreads + threadIdx.x];
  b.out[threadIdx.x] = sum;
}

// ---- copy: one kernel, both streams, no dependency ----
__global__ void __launch_bounds__(kThreads) copy_kernel(Buffers b) {
  const uint64_t pol = evict_first_policy();
  const Slice s1 = cta_slice(b.b1, blockIdx.x, gridDim.x);
  const Slice s2 = cta_slice(b.b2, blockIdx.x, gridDim.x);
  keep(stream(b.w1, s1.b0, s1.b1, pol) ^ stream(b.w2, s2.b0, s2.b1, pol), b.sink);
}

// ---- fused: one persistent kernel, grid counters ----
__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}
// Thread 0 spins until *p reaches n, then the CTA goes on. Bounded (50 ms of %globaltimer): a
// grid that is not all resident would otherwise hang the device call; the host reports it.
__device__ __forceinline__ void wait_count(const int* p, int n, unsigned* timed_out) {
  if (threadIdx.x == 0) {
    const uint64_t t0 = globaltimer_ns();
    while (mxmoe::sm90::ptx::ld_acquire_gpu(p) < n) {
      if (globaltimer_ns() - t0 > 50000000ull) {
        *timed_out = 1u;
        break;
      }
    }
  }
  __syncthreads();
}
__global__ void __launch_bounds__(kThreads) fused_kernel(Buffers b, int64_t keep_per_cta) {
  __shared__ int s_off;
  __shared__ bool s_last;
  const uint64_t pol = evict_first_policy();
  const int ctas = gridDim.x;
  // every CTA groups the ids itself (the glue's work, here one read per thread)
  if (threadIdx.x == 0) {
    int v = 0;
    for (int i = 0; i < b.pairs; ++i) v += b.ids[i];
    s_off = v;
  }
  const Slice s1 = cta_slice(b.b1, blockIdx.x, ctas);
  unsigned acc = stream(b.w1, s1.b0, s1.b1, pol);
  __syncthreads();
  const int i = blockIdx.x * kThreads + threadIdx.x;
  b.h[i] = static_cast<float>(acc & 1u) + static_cast<float>(s_off);
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(&b.counters[0], 1);
  }
  // GEMM2's weights do not depend on h: what fits in shared memory streams before the wait
  const Slice s2 = cta_slice(b.b2, blockIdx.x, ctas);
  const int64_t split = std::min(s2.b1, s2.b0 + keep_per_cta);
  acc ^= stream(b.w2, s2.b0, split, pol);
  wait_count(&b.counters[0], ctas, b.sink + 1);
  acc ^= stream(b.w2, split, s2.b1, pol);
  float hsum = 0.0f;
  for (int c = 0; c < 4; ++c) hsum += b.h[((blockIdx.x + c) % ctas) * kThreads + threadIdx.x];
  b.y[i] = static_cast<float>(acc & 1u) + hsum;
  keep(acc, b.sink);
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    s_last = atomicAdd(&b.counters[1], 1) == ctas - 1;
  }
  __syncthreads();
  if (s_last) {  // the combine: every CTA has passed both counters
    __threadfence();
    float sum = 0.0f;
    for (int c = 0; c < ctas; c += 64) sum += b.y[c * kThreads + threadIdx.x];
    b.out[threadIdx.x] = sum;
    if (threadIdx.x == 0) {
      b.counters[0] = 0;
      b.counters[1] = 0;
    }
  }
}

enum Variant { kCopy, kCopyCluster4, kChainLate, kChainEarly, kFused, kVariants };
const char* const kVariantName[kVariants] = {"copy", "copy-cl4", "chain-late", "chain-early",
                                             "fused"};

template <class K, class... A>
void launch(K kernel, int grid, cudaStream_t st, A... args) {
  CK(pdl::launch_pdl(kernel, dim3(grid), dim3(kThreads), 0, st, args...));
}

double time_variant(Variant v, const Buffers& b, int ctas, void* flush, size_t flush_bytes) {
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaGraph_t graph;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  switch (v) {
    case kCopy:
      launch(copy_kernel, ctas, st, b);
      break;
    case kCopyCluster4: {  // the same grid in clusters of 4, as the split-K decode GEMMs launch
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(ctas);
      cfg.blockDim = dim3(kThreads);
      cfg.stream = st;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = 4;
      attr[0].val.clusterDim.y = 1;
      attr[0].val.clusterDim.z = 1;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      CK(cudaLaunchKernelEx(&cfg, copy_kernel, b));
      break;
    }
    case kChainLate:
    case kChainEarly:
      if (v == kChainEarly) {
        launch(glue_kernel<true>, 1, st, b);
        launch(gemm_kernel<true, true>, ctas, st, b);
        launch(gemm_kernel<true, false>, ctas, st, b);
      } else {
        launch(glue_kernel<false>, 1, st, b);
        launch(gemm_kernel<false, true>, ctas, st, b);
        launch(gemm_kernel<false, false>, ctas, st, b);
      }
      launch(combine_kernel, 1, st, b, ctas);
      break;
    case kFused: {
      const int64_t keep = kSmemKeep / kCtasPerSm;
      launch(fused_kernel, ctas, st, b, keep);
      break;
    }
  }
  CK(cudaStreamEndCapture(st, &graph));
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  const double us = median_flushed_us([&](cudaStream_t s) { CK(cudaGraphLaunch(exec, s)); }, flush,
                                      flush_bytes, st, 23, 3);
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaStreamDestroy(st));
  return us;
}

}  // namespace

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  int occ = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fused_kernel, kThreads, 0));
  const int ctas = std::min(occ, kCtasPerSm) * sms;  // fused: every CTA resident
  // Kimi-K3's routed experts, MXFP4 (0.5 B + one scale byte per 32 elements): GEMM1 w13
  // [2I, 3584], GEMM2 w2 [3584, I]. EP16: I = 3072, one local expert per token; TP8xEP4: I = 384.
  const auto mx = [](int64_t elems) { return elems / 2 + elems / 32; };
  struct Case {
    const char* name;
    int64_t experts;
    int64_t I;
    int pairs;
  };
  const Case cases[] = {{"empty", 0, 0, 1},
                        {"ep16 T=1", 1, 3072, 1},
                        {"ep16 T=8", 8, 3072, 8},
                        {"tp8ep4 T=1", 4, 384, 4},
                        {"tp8ep4 T=64", 153, 384, 256}};
  int64_t max1 = 0, max2 = 0;
  for (const Case& c : cases) {
    max1 = std::max(max1, c.experts * mx(2 * c.I * 3584));
    max2 = std::max(max2, c.experts * mx(3584 * c.I));
  }
  uint8_t *w1 = nullptr, *w2 = nullptr;
  int *ids = nullptr, *offsets = nullptr;
  float *h = nullptr, *y = nullptr, *out = nullptr;
  int* counters = nullptr;
  unsigned* sink = nullptr;
  void* flush = nullptr;
  const size_t flush_bytes = 256u << 20;
  CK(cudaMalloc(&w1, max1 + 16));
  CK(cudaMalloc(&w2, max2 + 16));
  CK(cudaMemset(w1, 0x5A, max1 + 16));
  CK(cudaMemset(w2, 0x7E, max2 + 16));
  CK(cudaMalloc(&ids, 1024 * sizeof(int)));
  CK(cudaMemset(ids, 0, 1024 * sizeof(int)));
  CK(cudaMalloc(&offsets, 1024 * sizeof(int)));
  CK(cudaMalloc(&h, static_cast<size_t>(ctas) * kThreads * sizeof(float)));
  CK(cudaMalloc(&y, static_cast<size_t>(ctas) * kThreads * sizeof(float)));
  CK(cudaMalloc(&out, kThreads * sizeof(float)));
  CK(cudaMalloc(&counters, 2 * sizeof(int)));
  CK(cudaMemset(counters, 0, 2 * sizeof(int)));
  CK(cudaMalloc(&sink, 2 * sizeof(unsigned)));
  CK(cudaMemset(sink, 0, 2 * sizeof(unsigned)));
  CK(cudaMalloc(&flush, flush_bytes));
  std::printf("CHAIN FLOOR %d SMs, %d CTAs of %d threads (%d per SM), L2 flushed, median of 20\n",
              sms, ctas, kThreads, ctas / sms);
  std::printf("%-12s %9s %9s |", "case", "w1 MB", "w2 MB");
  for (const char* name : kVariantName) std::printf(" %11s", name);
  std::printf(" | copy GB/s (us: median)\n");
  for (const Case& c : cases) {
    Buffers b{w1,
              w2,
              c.experts * mx(2 * c.I * 3584),
              c.experts * mx(3584 * c.I),
              ids,
              c.pairs,
              offsets,
              h,
              y,
              out,
              counters,
              sink};
    double us[kVariants];
    for (int v = 0; v < kVariants; ++v)
      us[v] = time_variant(static_cast<Variant>(v), b, ctas, flush, flush_bytes);
    std::printf("%-12s %9.2f %9.2f |", c.name, b.b1 * 1e-6, b.b2 * 1e-6);
    for (double u : us) std::printf(" %11.1f", u);
    std::printf(" | %6.0f\n", (b.b1 + b.b2) / us[0] * 1e-3);
    unsigned timed_out = 0;
    CK(cudaMemcpy(&timed_out, sink + 1, sizeof(unsigned), cudaMemcpyDeviceToHost));
    if (timed_out != 0) {
      std::printf("FAILED: a fused CTA waited 50 ms for the grid (not all CTAs resident)\n");
      return 1;
    }
  }
  CK(cudaFree(w1));
  CK(cudaFree(w2));
  CK(cudaFree(ids));
  CK(cudaFree(offsets));
  CK(cudaFree(h));
  CK(cudaFree(y));
  CK(cudaFree(out));
  CK(cudaFree(counters));
  CK(cudaFree(sink));
  CK(cudaFree(flush));
  return 0;
}
