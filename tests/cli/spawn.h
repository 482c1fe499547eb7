// tests/cli/spawn.h: runs the `mxmoe` binary as a child process and captures what it says.
//
// The path of the binary comes from the MXMOE_CLI_PATH compile definition. stdout and stderr go to
// files (no pipe can fill up and deadlock), and a child that outlives its timeout is killed and
// reported, so a hanging CLI fails the test instead of hanging CTest.
#pragma once

#include <string>
#include <vector>

namespace mxmoe::test {

struct CliResult {
  int exit_code = -1;     // valid when !signaled && !timed_out
  bool signaled = false;  // killed by a signal (a crash)
  int signal = 0;
  bool timed_out = false;
  std::string out, err;
  // A printable account for assertion messages.
  std::string describe() const;
};

// Runs `mxmoe args...`. scratch_dir receives the captured stdout/stderr files.
CliResult run_cli(const std::vector<std::string>& args, const std::string& scratch_dir,
                  int timeout_s = 600);

// The lines of stderr that start with "mxmoe: error:".
std::vector<std::string> error_lines(const CliResult& r);

}  // namespace mxmoe::test
