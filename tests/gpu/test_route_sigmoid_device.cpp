// tests/gpu/test_route_sigmoid_device.cpp: the router's branch-free sigmoid (smxx/route_warp.cuh:
// route_rcp_rn, route_sigmoids) gives the bits of the division it replaces, on the device, over
// every input it can see. (Compiled as CUDA.)
//  - route_rcp_rn(x) == 1.0f / x for every float x in [1, kRouteRcpMax] (~1.05e9 values);
//  - route_sigmoids(z) == situ_sigmoid(z) for every one of the 2^32 float bit patterns, in
//    batches of 8 (the shared-memory keys' batch), so the lane fallback (z < ~-86.6, NaN) is
//    covered with the neighbours it drags along.
// Exhaustive, so nothing is sampled: a mismatch anywhere fails with its first input.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "gpu_test_util.h"
#include "smxx/route_warp.cuh"

namespace mxmoe::test {
namespace {

struct Mismatches {
  unsigned long long count;
  unsigned long long first;  // the smallest mismatching input's bits (~0 when none)
};

__device__ void record(Mismatches* m, uint64_t bits) {
  atomicAdd(&m->count, 1ull);
  atomicMin(&m->first, static_cast<unsigned long long>(bits));
}

__global__ void rcp_kernel(uint32_t lo, uint32_t hi, Mismatches* m) {
  for (uint64_t b = lo + blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; b <= hi;
       b += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const float x = __uint_as_float(static_cast<uint32_t>(b));
    if (__float_as_uint(smxx::route_rcp_rn(x)) != __float_as_uint(1.0f / x)) record(m, b);
  }
}

constexpr int kBatch = 8;
__global__ void sigmoid_kernel(Mismatches* m) {
  const uint64_t batches = (uint64_t{1} << 32) / kBatch;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < batches;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    float z[kBatch], s[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) z[u] = __uint_as_float(static_cast<uint32_t>(i * kBatch + u));
    smxx::route_sigmoids(z, s);
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (__float_as_uint(s[u]) != __float_as_uint(situ_sigmoid(z[u]))) record(m, i * kBatch + u);
  }
}

template <class Launch>
Mismatches count_on_device(Launch&& launch) {
  Mismatches init{0, ~0ull}, got{};
  Mismatches* dm = nullptr;
  EXPECT_EQ(cudaSuccess, cudaMalloc(&dm, sizeof(Mismatches)));
  EXPECT_EQ(cudaSuccess, cudaMemcpy(dm, &init, sizeof(init), cudaMemcpyHostToDevice));
  launch(dm);
  EXPECT_EQ(cudaSuccess, cudaGetLastError());
  EXPECT_EQ(cudaSuccess, cudaDeviceSynchronize());
  EXPECT_EQ(cudaSuccess, cudaMemcpy(&got, dm, sizeof(got), cudaMemcpyDeviceToHost));
  EXPECT_EQ(cudaSuccess, cudaFree(dm));
  return got;
}

float from_bits(uint64_t b) {
  const uint32_t u = static_cast<uint32_t>(b);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(GpuRouteSigmoid, FastReciprocalIsIeeeOverItsRange) {
  MXMOE_REQUIRE_SM90();
  uint32_t lo, hi;
  const float one = 1.0f, top = smxx::kRouteRcpMax;
  std::memcpy(&lo, &one, 4);
  std::memcpy(&hi, &top, 4);
  const Mismatches m =
      count_on_device([&](Mismatches* dm) { rcp_kernel<<<1024, 256>>>(lo, hi, dm); });
  std::printf("[route sigmoid] route_rcp_rn vs 1.0f / x: %u floats in [1, 2^125], %llu differ\n",
              hi - lo + 1, m.count);
  EXPECT_EQ(0ull, m.count) << "first at x = " << from_bits(m.first) << " (bits 0x" << std::hex
                           << m.first << ")";
}

TEST(GpuRouteSigmoid, SigmoidsEqualSituSigmoidOnEveryFloat) {
  MXMOE_REQUIRE_SM90();
  const Mismatches m = count_on_device([&](Mismatches* dm) { sigmoid_kernel<<<2048, 256>>>(dm); });
  std::printf(
      "[route sigmoid] route_sigmoids vs situ_sigmoid: all 2^32 bit patterns, %llu "
      "differ\n",
      m.count);
  EXPECT_EQ(0ull, m.count) << "first at z = " << from_bits(m.first) << " (bits 0x" << std::hex
                           << m.first << ")";
}

}  // namespace
}  // namespace mxmoe::test
