// tools/mxmoe/check_stub.cpp: `mxmoe check` in a build without the GPU comparison (no nvcc at
// configure time, or cmd_check.cpp not in the tree yet): it needs a GPU, so it fails the way
// `run --device cuda` does.
#include "commands.h"
#include "device_run.h"
#include "mxmoe/common.h"

namespace mxmoe::cli {

int cmd_check(int, char**) {
  if (cuda_built()) throw Error("'mxmoe check' is not part of this build (cmd_check.cpp missing)");
  throw built_without_cuda("'mxmoe check'");
}

}  // namespace mxmoe::cli
