// bench/device_util.cpp: error messages and the owning buffer of device_util.h.
#include "device_util.h"

#include <string>

#include "mxmoe/common.h"

namespace mxmoe::bench {

namespace {
std::string where(const char* file, int line) {
  std::string f = file;
  const size_t slash = f.find_last_of('/');
  if (slash != std::string::npos) f = f.substr(slash + 1);
  return f + ":" + std::to_string(line);
}
}  // namespace

void throw_cuda(const char* call, cudaError_t e, const char* file, int line) {
  throw Error(std::string("bench: ") + call + " failed: " + cudaGetErrorName(e) + " (" +
              cudaGetErrorString(e) + ") at " + where(file, line));
}

void throw_cublas(const char* call, cublasStatus_t s, const char* file, int line) {
  throw Error(std::string("bench: ") + call + " failed: " + cublasGetStatusName(s) + " (" +
              cublasGetStatusString(s) + ") at " + where(file, line));
}

DevBuf::DevBuf(size_t bytes, const char* what) : n_(bytes) {
  if (bytes == 0) return;
  const cudaError_t e = cudaMalloc(&p_, bytes);
  if (e != cudaSuccess) {
    p_ = nullptr;
    cudaGetLastError();  // clear the sticky-free allocation error so later calls are not blamed
    throw Error("bench: cannot allocate " + std::to_string(bytes >> 20) +
                " MiB of device memory for " + what + ": " + cudaGetErrorString(e));
  }
}

DevBuf::~DevBuf() {
  if (p_) cudaFree(p_);
}

DevBuf& DevBuf::operator=(DevBuf&& o) noexcept {
  if (this != &o) {
    if (p_) cudaFree(p_);
    p_ = o.p_;
    n_ = o.n_;
    o.p_ = nullptr;
    o.n_ = 0;
  }
  return *this;
}

}  // namespace mxmoe::bench
