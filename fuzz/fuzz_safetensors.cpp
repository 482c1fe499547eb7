// fuzz_safetensors.cpp: libFuzzer harness for SafetensorsFile::from_memory.
//
// Property: any byte string either parses, yielding tensors whose [data, data + nbytes) lies
// inside the input (touched here so that ASan checks it), or throws mxmoe::Error. Any other
// exception, a crash, a hang or an out-of-bounds read is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "mxmoe/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = mxmoe::SafetensorsFile::from_memory(data, size, "fuzz.safetensors");
    unsigned sum = 0;
    for (const mxmoe::TensorView& t : f->tensors()) {
      if (t.nbytes != static_cast<size_t>(t.numel()) * mxmoe::dtype_size(t.dtype)) std::abort();
      if (t.nbytes == 0) continue;
      if (t.data < data || t.data + t.nbytes > data + size) std::abort();
      sum += t.data[0] + t.data[t.nbytes - 1];
      if (f->find(t.name) == nullptr) std::abort();
    }
    volatile unsigned sink = sum;
    (void)sink;
  } catch (const mxmoe::Error&) {
  }
  return 0;
}
