// mxmoe/common.h: what every layer of mxmoe shares: the host/device qualifier, the error types.
//
// Two error channels, chosen per layer:
//  - host-side I/O and the CPU reference throw mxmoe::Error (a std::runtime_error whose message is
//    one line that names the file, tensor or flag at fault);
//  - the GPU C++ API (mxmoe/moe.h) never throws: it returns a Status, because it is called from
//    engines that may be built without exceptions and from inside CUDA graph capture.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#if defined(__CUDACC__)
#define MXMOE_HD __host__ __device__ __forceinline__
#else
#define MXMOE_HD inline
#endif

namespace mxmoe {

// Thrown by host-side code for bad input (malformed files, wrong shapes, bad flags).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// Returned by the GPU API. ok() or a one-line message.
class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Fail(std::string msg) {
    Status s;
    s.ok_ = false;
    s.msg_ = std::move(msg);
    return s;
  }
  bool ok() const { return ok_; }
  const std::string& message() const { return msg_; }

 private:
  bool ok_ = true;
  std::string msg_;
};

}  // namespace mxmoe
