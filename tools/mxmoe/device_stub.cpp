// tools/mxmoe/device_stub.cpp: the CUDA seam (device_run.h) of a build without CUDA. Compiled
// instead of device_cuda.cpp when nvcc was not found at configure time (MXMOE_HAS_CUDA OFF).
#include "device_run.h"

namespace mxmoe::cli {

bool cuda_built() { return false; }

void run_on_cuda(const RunRequest&, const std::string&, std::vector<float>*) {
  throw built_without_cuda("--device cuda");
}

}  // namespace mxmoe::cli
