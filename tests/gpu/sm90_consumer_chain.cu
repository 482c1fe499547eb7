// tests/gpu/sm90_consumer_chain.cu: the kernels of sm90_bench_consumer_chain.cpp, a diagnostic
// microbenchmark of one consumer warpgroup's per-64-K-step chain
//   fragment load -> FP4->BF16 expansion (expand_fragment) -> 4 x wgmma m64nBNk16 (RS) -> wait
// over resident data: the B tile (BN x 64 BF16, 128-byte swizzled as in the prefill kernel) and
// the weight fragments sit in shared memory or registers; nothing touches global memory inside the
// timed loop. Compiled by nvcc (a .cu: the sm90_*.cpp files of test_sm90_grouped_gemm are host
// C++), joined to test_sm90_grouped_gemm by the sm90_*.cu glob in tests/gpu/CMakeLists.txt.
//
// Variants (template V), each a persistent kernel of WG (1 or 2) warpgroups per CTA, one CTA per
// SM, every warpgroup running `steps` 64-K steps on one 64 x BN accumulator tile:
//   0 (a) wgmma only: A registers loaded once (a_in), B in smem; fence, 4 wgmma, commit, wait<1>.
//   1 (b) expand_fragment only: the fragment registers are re-pinned every step (asm volatile,
//         no code) so the expansion cannot be hoisted; its 16 outputs are pinned the same way
//         (what the prefill kernel does before wgmma), so it is not dead code.
//   2 (c) expand + wgmma as the prefill mainloop (grouped_gemm_kernel.cuh): expand step k into
//         a[k & 1], 4 wgmma, commit, wait<1>.
//   3 (d) 2-deep: 3 register buffers; issue step k, then expand step k + 1 (its buffer was last
//         read by step k - 2, retired by the previous wait), then wait<1> (retires k - 1): when
//         the wait returns, step k + 1's A registers are ready, so two groups can stay queued.
//   4 (e) ld.shared of the fragment (16 B + 4 B per thread, 4 slots per warpgroup, slot k & 3,
//         loaded at the top of step k: its latency is exposed) + expand + wgmma as (c).
// Timing: clock64 around the loop (per CTA, after a barrier) and cudaEvents on the host side.
// Debug output (out != nullptr): each thread's accumulators d[BN/2] (variants a, c, d, e) or its
// 16 expanded A registers (variant b), for the correctness check.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "sm90/grouped_gemm_kernel.cuh"  // expand_fragment, ptx::*

namespace mxmoe::sm90::chain {

constexpr int kSlots = 4;  // fragment slots per warpgroup in shared memory (variant e)

struct ChainArgs {
  const uint4* q_in;     // [kSlots][128] packed FP4 fragments (slot 0: variants b, c, d)
  const uint32_t* s_in;  // [kSlots][128] each thread's scale word
  const uint32_t* a_in;  // [128][16] A registers of variant (a)
  const uint16_t* b_in;  // [BN][64] BF16 bits of the B tile, row-major (token n, k)
  int steps;             // 64-K steps per warpgroup (a multiple of 12)
  int grid;
  float* out;         // debug output or null
  long long* clocks;  // [grid] SM cycles of the loop, or null
};

// What the kernel uses, raised to 120 KB so that no two CTAs share an SM (one CTA per SM).
size_t chain_smem_bytes(int bn, int wg) {
  const size_t used =
      1024 + static_cast<size_t>(bn) * 128 + static_cast<size_t>(wg) * kSlots * kWarpgroup * 20;
  return used > 120 * 1024 ? used : 120 * 1024;
}

__device__ __forceinline__ uint32_t lds_u32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
// Makes the fragment look new every step (no code), so its expansion is not loop-invariant.
__device__ __forceinline__ void touch(uint4& q, uint32_t& s) {
  ptx::fence_operand(q.x);
  ptx::fence_operand(q.y);
  ptx::fence_operand(q.z);
  ptx::fence_operand(q.w);
  ptx::fence_operand(s);
}
__device__ __forceinline__ void pin16(uint32_t (&a)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) ptx::fence_operand(a[i]);
}
template <int BN>
__device__ __forceinline__ void issue_step(float* d, const uint32_t (&a)[16], uint32_t b_addr) {
  ptx::wgmma_fence();
#pragma unroll
  for (int j = 0; j < 4; ++j)
    ptx::WgmmaRS<BN>::mma(d, &a[4 * j], ptx::desc_sw128(b_addr + 32 * j), 1);
  ptx::wgmma_commit();
}

template <int V, int BN, int WG>
__global__ void __launch_bounds__(WG* kWarpgroup, 1) chain_kernel(const ChainArgs p) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                             ~static_cast<uintptr_t>(1023));
  const int tid = threadIdx.x, wg = tid / kWarpgroup, lt = tid % kWarpgroup;

  // B tile, 128-byte swizzle: 16-byte chunk c of row r at r * 128 + ((c ^ (r & 7)) << 4).
  for (int idx = tid; idx < BN * 8; idx += WG * kWarpgroup) {
    const int r = idx >> 3, c = idx & 7;
    *reinterpret_cast<uint4*>(smem + r * 128 + ((c ^ (r & 7)) << 4)) =
        reinterpret_cast<const uint4*>(p.b_in)[idx];
  }
  uint4* fq = reinterpret_cast<uint4*>(smem + BN * 128);  // [WG][kSlots][128]
  uint32_t* fs = reinterpret_cast<uint32_t*>(fq + WG * kSlots * kWarpgroup);
#pragma unroll
  for (int sl = 0; sl < kSlots; ++sl) {
    fq[(wg * kSlots + sl) * kWarpgroup + lt] = p.q_in[sl * kWarpgroup + lt];
    fs[(wg * kSlots + sl) * kWarpgroup + lt] = p.s_in[sl * kWarpgroup + lt];
  }
  ptx::fence_proxy_async();  // generic-proxy stores of B, read by wgmma (async proxy)
  __syncthreads();
  const uint32_t b_addr = ptx::smem_addr(smem);
  const uint32_t fq_addr = ptx::smem_addr(fq + wg * kSlots * kWarpgroup + lt);
  const uint32_t fs_addr = ptx::smem_addr(fs + wg * kSlots * kWarpgroup + lt);

  uint4 q = p.q_in[lt];
  uint32_t s = p.s_in[lt];
  float d[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;
  uint32_t a[3][16];
  if constexpr (V == 0) {
#pragma unroll
    for (int i = 0; i < 16; ++i) a[0][i] = p.a_in[lt * 16 + i];
  }
  const int steps = p.steps;

  __syncthreads();
  const long long t0 = clock64();
  if constexpr (V == 0) {  // (a) wgmma only
    for (int k = 0; k < steps; ++k) {
      issue_step<BN>(d, a[0], b_addr);
      ptx::wgmma_wait<1>();
    }
  } else if constexpr (V == 1) {  // (b) expand only
    for (int k = 0; k < steps; ++k) {
      touch(q, s);
      expand_fragment(q, s, a[0], 0);
      pin16(a[0]);
    }
  } else if constexpr (V == 2 || V == 4) {  // (c) prefill mainloop; (e) with ld.shared first
    auto step = [&](int k, auto buf) {
      constexpr int B = decltype(buf)::value;
      if constexpr (V == 4) {
        const uint32_t slot = static_cast<uint32_t>(k & (kSlots - 1)) * kWarpgroup;
        q = ptx::lds_v4_b32(fq_addr + slot * 16);
        s = lds_u32(fs_addr + slot * 4);
      } else {
        touch(q, s);
      }
      expand_fragment(q, s, a[B], 0);
      pin16(a[B]);
      issue_step<BN>(d, a[B], b_addr);
      ptx::wgmma_wait<1>();
    };
    for (int k = 0; k < steps; k += 2) {
      step(k, std::integral_constant<int, 0>());
      step(k + 1, std::integral_constant<int, 1>());
    }
  } else {  // (d) 2-deep
    touch(q, s);
    expand_fragment(q, s, a[0], 0);
    auto step = [&](auto buf) {
      constexpr int B = decltype(buf)::value;
      pin16(a[B]);
      issue_step<BN>(d, a[B], b_addr);
      touch(q, s);
      expand_fragment(q, s, a[(B + 1) % 3], 0);  // last read by step k - 2, already retired
      ptx::wgmma_wait<1>();                      // retires step k - 1
    };
    for (int k = 0; k < steps; k += 3) {
      step(std::integral_constant<int, 0>());
      step(std::integral_constant<int, 1>());
      step(std::integral_constant<int, 2>());
    }
  }
  ptx::wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) ptx::fence_operand(d[i]);
  __syncthreads();
  const long long t1 = clock64();
  if (p.clocks != nullptr && tid == 0) p.clocks[blockIdx.x] = t1 - t0;

  if (p.out != nullptr) {
    const int64_t th = static_cast<int64_t>(blockIdx.x) * WG * kWarpgroup + tid;
    if constexpr (V == 1) {
      uint32_t* o = reinterpret_cast<uint32_t*>(p.out) + th * 16;
#pragma unroll
      for (int i = 0; i < 16; ++i) o[i] = a[0][i];
    } else {
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) p.out[th * (BN / 2) + i] = d[i];
    }
  }
}

template <int V, int BN, int WG>
cudaError_t launch_t(const ChainArgs& p, cudaStream_t stream) {
  const size_t smem = chain_smem_bytes(BN, WG);
  cudaError_t e = cudaFuncSetAttribute(
      chain_kernel<V, BN, WG>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  chain_kernel<V, BN, WG><<<p.grid, WG * kWarpgroup, smem, stream>>>(p);
  return cudaGetLastError();
}
template <int V, int BN>
cudaError_t launch_wg(int wg, const ChainArgs& p, cudaStream_t stream) {
  return wg == 1 ? launch_t<V, BN, 1>(p, stream) : launch_t<V, BN, 2>(p, stream);
}
template <int V>
cudaError_t launch_bn(int bn, int wg, const ChainArgs& p, cudaStream_t stream) {
  switch (bn) {
    case 64:
      return launch_wg<V, 64>(wg, p, stream);
    case 128:
      return launch_wg<V, 128>(wg, p, stream);
    case 192:
      return launch_wg<V, 192>(wg, p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

// variant 0..4 = (a)..(e); bn in {64, 128, 192}; wg in {1, 2}; steps % 12 == 0.
cudaError_t launch_chain(int variant, int bn, int wg, const ChainArgs& p, cudaStream_t stream) {
  if ((wg != 1 && wg != 2) || p.steps <= 0 || p.steps % 12 != 0 || p.grid <= 0)
    return cudaErrorInvalidValue;
  switch (variant) {
    case 0:
      return launch_bn<0>(bn, wg, p, stream);
    case 1:
      return launch_bn<1>(bn, wg, p, stream);
    case 2:
      return launch_bn<2>(bn, wg, p, stream);
    case 3:
      return launch_bn<3>(bn, wg, p, stream);
    case 4:
      return launch_bn<4>(bn, wg, p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace mxmoe::sm90::chain
