// bench/test_check.h: the check macro of bench/'s CPU tests, which build without GoogleTest
// (wherever bench/ builds). CHECK(cond, fmt, ...) prints a failure with its place and counts it;
// main returns check_summary("... passed"), which prints the count and gives the exit status.
#pragma once

#include <cstdio>

namespace mxmoe::bench::test {

inline int& check_failures() {
  static int n = 0;
  return n;
}

inline int check_summary(const char* passed) {
  if (check_failures()) {
    std::fprintf(stderr, "%d check(s) failed\n", check_failures());
    return 1;
  }
  std::printf("%s\n", passed);
  return 0;
}

}  // namespace mxmoe::bench::test

#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) {                                                         \
      ++::mxmoe::bench::test::check_failures();                            \
      std::fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                   \
      std::fputc('\n', stderr);                                            \
    }                                                                      \
  } while (0)
