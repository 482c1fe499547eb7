// tools/mxmoe/bench_stub.cpp: `mxmoe bench` in a build without the GPU runtime.
#include "commands.h"
#include "mxmoe/common.h"

namespace mxmoe::cli {

int cmd_bench(int, char**) {
  throw Error(
      "mxmoe was built without CUDA (nvcc not found at configure time); 'mxmoe bench' is "
      "unavailable");
}

}  // namespace mxmoe::cli
