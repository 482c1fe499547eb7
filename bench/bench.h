// bench/bench.h: `mxmoe bench`, the benchmark of issue 4 (item 1), as a library entry point.
//
// The CLI forwards `mxmoe bench ...` here unchanged: argv[1] is "bench", flags start at argv[2].
// Flags: see `mxmoe bench --help` (options.cpp). The table goes to stdout, progress to stderr.
// Exit status: 0 all cases ran and verified; 1 a case failed verification; 77 no CUDA device (so
// CTest reports the smoke test as skipped). Bad flags throw mxmoe::cli::UsageError (exit 2 via the
// CLI's main), CUDA / cuBLAS failures throw mxmoe::Error with a one-line message naming the call.
#pragma once

namespace mxmoe::bench {

int run_bench(int argc, char** argv);

}  // namespace mxmoe::bench
