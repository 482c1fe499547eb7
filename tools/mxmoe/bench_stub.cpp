// tools/mxmoe/bench_stub.cpp: `mxmoe bench` in a build without the GPU runtime.
#include "commands.h"
#include "device_run.h"

namespace mxmoe::cli {

int cmd_bench(int, char**) { throw built_without_cuda("'mxmoe bench'"); }

}  // namespace mxmoe::cli
