// mxmoe/safetensors.h: safetensors files (read by mmap, written by streaming) and checkpoints
// made of several of them.
//
// Format: 8-byte little-endian header length N, N bytes of JSON header
// {"name": {"dtype": "U8", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data section. Offsets are relative to the data section.
//
// The reader validates everything against the file: header length within the file, JSON parsed
// by nlohmann::json, every dtype known, shape entries non-negative, nbytes == product(shape) *
// itemsize, offsets inside the data section, no two tensors overlapping. Any violation throws
// mxmoe::Error with a one-line message naming the file (and the tensor).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mxmoe/common.h"

namespace mxmoe {

enum class DType { kBool, kU8, kI8, kI16, kI32, kI64, kF16, kBF16, kF32, kF64, kF8E4M3 };

const char* dtype_name(DType d);  // "U8", "BF16", ... as safetensors spells them
size_t dtype_size(DType d);
bool dtype_from_name(const std::string& s, DType* out);
std::string shape_str(const std::vector<int64_t>& shape);  // "[3072, 1792]"

// A tensor inside a mapped file. data stays valid while the owning file/checkpoint lives.
struct TensorView {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // the file it lives in, for error messages

  int64_t numel() const;
  std::string shape_str() const;  // "[3072, 1792]"
};

class SafetensorsFile {
 public:
  // mmaps and validates. Throws mxmoe::Error.
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(const std::string& name) const;  // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Validates an in-memory image (the same checks as open); used by open and by the fuzzer.
  static std::unique_ptr<SafetensorsFile> from_memory(const uint8_t* data, size_t size,
                                                      const std::string& label);

 private:
  SafetensorsFile() = default;
  void parse(const uint8_t* data, size_t size);
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Streams a safetensors file: declare tensors first, then write() lays out the header and asks
// each tensor's fill callback for its bytes, in chunks, so that multi-GB files never sit in memory.
class SafetensorsWriter {
 public:
  using Fill = std::function<void(uint8_t* dst, size_t offset, size_t nbytes)>;
  void add(const std::string& name, DType dtype, const std::vector<int64_t>& shape, Fill fill);
  void add_bytes(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                 const void* data);  // copies nothing: data must outlive write()
  void set_metadata(const std::string& key, const std::string& value);
  size_t data_bytes() const;
  void write(const std::string& path) const;  // throws mxmoe::Error on I/O failure

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    size_t nbytes;
    Fill fill;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// A checkpoint directory: config.json plus model.safetensors.index.json (weight_map) and its
// shards, or, without an index, every *.safetensors file in the directory.
class Checkpoint {
 public:
  static std::unique_ptr<Checkpoint> open(const std::string& dir);  // throws mxmoe::Error
  const std::string& dir() const { return dir_; }
  const TensorView* find(const std::string& name) const;
  // The unique tensor whose name ends with `suffix` (at a '.' boundary or the whole name);
  // nullptr if none; throws if several match (e.g. two layers' worth).
  const TensorView* find_suffix(const std::string& suffix) const;
  std::vector<const TensorView*> all() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> by_name_;
  // (reversed name, tensor), sorted: find_suffix is a prefix range lookup on reversed names.
  std::vector<std::pair<std::string, const TensorView*>> by_suffix_;
};

}  // namespace mxmoe
