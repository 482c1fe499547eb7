// bench/main.cpp: `mxmoe_bench_cli bench [flags]`, the benchmark without the `mxmoe` CLI around it
// (same arguments, same exit statuses as `mxmoe bench`; errors printed as one line on stderr).
#include <cstdio>
#include <exception>
#include <new>

#include "args.h"
#include "bench.h"

int main(int argc, char** argv) {
  try {
    return mxmoe::bench::run_bench(argc, argv);
  } catch (const mxmoe::cli::UsageError& e) {
    std::fprintf(stderr, "mxmoe: error: %s (try 'mxmoe bench --help')\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "mxmoe: error: out of host memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mxmoe: error: %s\n", e.what());
    return 1;
  }
}
