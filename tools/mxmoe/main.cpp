// tools/mxmoe/main.cpp: `mxmoe <command> [flags]`: dispatch, and the one place errors become
// exit statuses (UsageError -> 2, mxmoe::Error and anything else -> 1), each printed as a single
// line on stderr so that scripts and tests can match it.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "args.h"
#include "commands.h"

namespace {

const char kUsage[] =
    "usage: mxmoe <command> [flags]   (mxmoe <command> --help for its flags)\n"
    "commands:\n"
    "  gen        write a synthetic Kimi-K3 checkpoint (config.json + safetensors)\n"
    "  gen-input  write an input file for `run` that matches a checkpoint's config\n"
    "  info       summarize a checkpoint: layers, tensors, MXFP4 scale statistics\n"
    "  run        run one MoE layer (routed experts or the whole block) on CPU or GPU\n"
    "  check      run a layer on GPU and CPU and compare (CUDA builds only)\n"
    "  bench      time the MoE at Kimi-K3 shapes against ceilings and cuBLAS (CUDA builds only)\n";

// Messages are promised to be one line: fold any newline a lower layer let through.
std::string one_line(const char* what) {
  std::string s = what ? what : "unknown error";
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace mxmoe::cli;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "help")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "gen") return cmd_gen(argc, argv);
    if (cmd == "gen-input") return cmd_gen_input(argc, argv);
    if (cmd == "info") return cmd_info(argc, argv);
    if (cmd == "run") return cmd_run(argc, argv);
    if (cmd == "check") return cmd_check(argc, argv);
    if (cmd == "bench") return cmd_bench(argc, argv);
    std::fprintf(stderr, "mxmoe: error: unknown command '%s' (try 'mxmoe --help')\n", cmd.c_str());
    return 2;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "mxmoe: error: %s (try 'mxmoe %s --help')\n", one_line(e.what()).c_str(),
                 cmd.c_str());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "mxmoe: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    // mxmoe::Error above all; other std exceptions (from the standard library or the JSON parser)
    // are still bad input or environment, never a reason to crash.
    std::fprintf(stderr, "mxmoe: error: %s\n", one_line(e.what()).c_str());
    return 1;
  }
}
