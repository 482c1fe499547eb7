// tools/mxmoe/commands.h: the `mxmoe` subcommands. main.cpp dispatches on argv[1].
//
// Every command takes main's argc/argv unchanged (argv[1] is the command's name; its flags start
// at argv[2]) and returns the process exit status: 0 on success. Bad flags throw UsageError
// (exit 2, see args.h); bad files and bad data throw mxmoe::Error (exit 1). main() prints either
// as one line `mxmoe: error: <message>` on stderr. Progress and timings go to stderr; results that
// a user asked for (tables, summaries) go to stdout.
#pragma once

namespace mxmoe::cli {

int cmd_gen(int argc, char** argv);        // write a synthetic Kimi-K3 checkpoint
int cmd_gen_input(int argc, char** argv);  // write a matching input file for `run`
int cmd_info(int argc, char** argv);       // what a checkpoint holds, MXFP4 scale statistics
int cmd_run(int argc, char** argv);        // run one MoE layer on the CPU reference or the GPU
// Runs a layer on the GPU and on the CPU and prints cosine / NRMSE / max abs error per backend
// and scope. Implemented in cmd_check.cpp (CUDA builds) or check_stub.cpp (no CUDA: throws the
// "built without CUDA" error).
int cmd_check(int argc, char** argv);
// Times the MoE at Kimi-K3's shapes next to in-run ceilings and cuBLAS baselines (bench/bench.h);
// CUDA builds only.
int cmd_bench(int argc, char** argv);

}  // namespace mxmoe::cli
