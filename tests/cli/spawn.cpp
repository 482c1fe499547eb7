// tests/cli/spawn.cpp: child-process runner for the CLI tests (see spawn.h). POSIX only.
#include "spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace mxmoe::test {

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::string CliResult::describe() const {
  std::ostringstream os;
  if (timed_out)
    os << "TIMED OUT";
  else if (signaled)
    os << "KILLED by signal " << signal;
  else
    os << "exit " << exit_code;
  os << "\n--- stdout ---\n" << out << "--- stderr ---\n" << err;
  return os.str();
}

CliResult run_cli(const std::vector<std::string>& args, const std::string& scratch_dir,
                  int timeout_s) {
  CliResult r;
  const std::string out_path = scratch_dir + "/cli.stdout", err_path = scratch_dir + "/cli.stderr";
  std::vector<std::string> argv_s = {MXMOE_CLI_PATH};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    r.err = "posix_spawn failed for " + argv_s[0];
    return r;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  for (;;) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!r.timed_out) {
    if (WIFEXITED(status)) {
      r.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      r.signaled = true;
      r.signal = WTERMSIG(status);
    }
  }
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

std::vector<std::string> error_lines(const CliResult& r) {
  std::vector<std::string> lines;
  std::istringstream is(r.err);
  for (std::string line; std::getline(is, line);)
    if (line.rfind("mxmoe: error:", 0) == 0) lines.push_back(line);
  return lines;
}

}  // namespace mxmoe::test
