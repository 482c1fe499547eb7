// replay_main.cpp: runs a fuzz harness over every file of a corpus directory without libFuzzer,
// so that CI (g++, no clang) replays the seed corpus through the same harness code.
// Usage: <replay binary> DIR [DIR...]. Exit 0 when every input ran; the harness aborts on a bug.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  size_t n = 0;
  for (int i = 1; i < argc; ++i) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(argv[i], ec)) {
      if (!e.is_regular_file()) continue;
      std::ifstream in(e.path(), std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      std::vector<uint8_t> buf(bytes.begin(), bytes.end());  // exact-size heap copy
      LLVMFuzzerTestOneInput(buf.data(), buf.size());
      ++n;
    }
    if (ec) {
      std::fprintf(stderr, "replay: cannot list %s: %s\n", argv[i], ec.message().c_str());
      return 1;
    }
  }
  std::printf("replay: %zu inputs ran\n", n);
  return n > 0 ? 0 : 1;
}
