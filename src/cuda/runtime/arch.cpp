// src/cuda/runtime/arch.cpp: the architecture gate. See arch.h.
#include "runtime/arch.h"

#include <cuda_runtime.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

namespace mxmoe::runtime {
namespace {

std::atomic<int> g_fake_major{-1}, g_fake_minor{-1};
std::mutex g_mu;
std::vector<int> g_cached;  // major * 10 + minor per device ordinal, -1 when not read yet

}  // namespace

void set_fake_capability_for_testing(int major, int minor) {
  g_fake_minor.store(minor);
  g_fake_major.store(major);
}

Status device_capability(int device, int* major, int* minor) {
  if (g_fake_major.load() >= 0) {
    *major = g_fake_major.load();
    *minor = g_fake_minor.load();
    return Status::Ok();
  }
  std::lock_guard<std::mutex> lock(g_mu);
  if (device < 0) return Status::Fail("mxmoe: bad CUDA device ordinal " + std::to_string(device));
  if (g_cached.size() <= static_cast<size_t>(device)) g_cached.resize(device + 1, -1);
  if (g_cached[device] < 0) {
    int ma = 0, mi = 0;
    cudaError_t e = cudaDeviceGetAttribute(&ma, cudaDevAttrComputeCapabilityMajor, device);
    if (e == cudaSuccess)
      e = cudaDeviceGetAttribute(&mi, cudaDevAttrComputeCapabilityMinor, device);
    if (e != cudaSuccess)
      return Status::Fail("mxmoe: cannot read the compute capability of CUDA device " +
                          std::to_string(device) + ": " + cudaGetErrorString(e));
    g_cached[device] = ma * 10 + mi;
  }
  *major = g_cached[device] / 10;
  *minor = g_cached[device] % 10;
  return Status::Ok();
}

Status check_architecture(int major, int minor) {
  if (major == 9 && minor == 0) return Status::Ok();
  return Status::Fail("unsupported architecture sm_" + std::to_string(major) +
                      std::to_string(minor) + ": mxmoe's kernels are built for sm_90a (Hopper)");
}

}  // namespace mxmoe::runtime
