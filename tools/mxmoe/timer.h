// tools/mxmoe/timer.h: wall-clock seconds for the progress and timing lines on stderr.
#pragma once

#include <chrono>

namespace mxmoe::cli {

class Timer {
 public:
  Timer() : t0_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace mxmoe::cli
