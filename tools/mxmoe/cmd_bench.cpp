// tools/mxmoe/cmd_bench.cpp: `mxmoe bench` forwards to the benchmark library (bench/bench.h).
#include "bench.h"
#include "commands.h"

namespace mxmoe::cli {

int cmd_bench(int argc, char** argv) { return mxmoe::bench::run_bench(argc, argv); }

}  // namespace mxmoe::cli
