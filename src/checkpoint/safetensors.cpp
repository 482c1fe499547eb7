// safetensors.cpp: the safetensors reader (mmap + full validation) and the streaming writer.
//
// Layout: u64 little-endian header length N | N bytes of JSON header | data section. Offsets in the
// header are relative to the data section.
// Reader: every check of safetensors.h runs before any TensorView escapes, so callers may trust
// dtype, shape, nbytes and data. Limitations: the header is capped at 100 MB (as the reference
// Rust implementation does) so that a hostile length cannot make us parse gigabytes of JSON;
// __metadata__ values must be strings (the format says string -> string).
// Writer: the header is padded with spaces to a multiple of 8 bytes so that every tensor starts
// 8-aligned when the offsets are (the writer packs tensors in order and pads each to 8 bytes),
// which lets callers view BF16/F32 data in place. The file is written to "<path>.tmp" and
// renamed, so an interrupted write never leaves a truncated file under the final name.
#include "mxmoe/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "json_util.h"

namespace mxmoe {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxHeaderBytes = size_t(100) << 20;

struct DTypeInfo {
  DType d;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kBool, "BOOL", 1}, {DType::kU8, "U8", 1},          {DType::kI8, "I8", 1},
    {DType::kI16, "I16", 2},   {DType::kI32, "I32", 4},        {DType::kI64, "I64", 8},
    {DType::kF16, "F16", 2},   {DType::kBF16, "BF16", 2},      {DType::kF32, "F32", 4},
    {DType::kF64, "F64", 8},   {DType::kF8E4M3, "F8_E4M3", 1},
};

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Reads a non-negative JSON integer, or returns false. Floats, booleans and negatives fail.
bool json_u64(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer()) {
    const int64_t s = v.get<int64_t>();
    if (s < 0) return false;
    *out = static_cast<uint64_t>(s);
    return true;
  }
  return false;
}

}  // namespace

const char* dtype_name(DType d) {
  for (const auto& t : kDTypes)
    if (t.d == d) return t.name;
  return "?";
}
size_t dtype_size(DType d) {
  for (const auto& t : kDTypes)
    if (t.d == d) return t.size;
  return 0;
}
bool dtype_from_name(const std::string& s, DType* out) {
  for (const auto& t : kDTypes) {
    if (s == t.name) {
      *out = t.d;
      return true;
    }
  }
  return false;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string TensorView::shape_str() const { return mxmoe::shape_str(shape); }

// ---- reader ------------------------------------------------------------------------------------

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw Error(path + ": cannot stat: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  if (size > 0) {
    void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      throw Error(path + ": cannot mmap: " + std::strerror(e));
    }
    f->map_ = m;
    f->map_size_ = size;
  }
  ::close(fd);  // the mapping keeps the file alive
  f->parse(static_cast<const uint8_t*>(f->map_), size);
  return f;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::from_memory(const uint8_t* data, size_t size,
                                                              const std::string& label) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = label;
  f->parse(data, size);
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, map_size_);
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::parse(const uint8_t* data, size_t size) {
  const std::string& p = path_;
  if (size < 8)
    throw Error(p + ": truncated: " + std::to_string(size) +
                " bytes, a safetensors file needs at least the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];  // little-endian on any host
  if (n > size - 8)
    throw Error(p + ": header length " + std::to_string(n) + " runs past the end of the file (" +
                std::to_string(size) + " bytes)");
  if (n > kMaxHeaderBytes)
    throw Error(p + ": header length " + std::to_string(n) + " exceeds the 100 MB limit");
  const char* hb = reinterpret_cast<const char*>(data + 8);
  json h = json::parse(hb, hb + n, nullptr, /*allow_exceptions=*/false);
  if (h.is_discarded()) throw Error(p + ": header is not valid JSON");
  if (!h.is_object()) throw Error(p + ": header is not a JSON object");

  const uint8_t* body = data + 8 + n;
  const uint64_t body_size = size - 8 - n;
  tensors_.clear();
  index_.clear();
  metadata_.clear();
  tensors_.reserve(h.size());
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end) -> index, for overlaps
  std::vector<size_t> range_owner;

  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw Error(p + ": __metadata__ is not a JSON object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          throw Error(p + ": __metadata__ entry '" + detail::printable(m.key()) +
                      "' is not a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = p + ": tensor '" + detail::printable(name) + "'";
    if (!v.is_object()) throw Error(where + ": entry is not a JSON object");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) throw Error(where + ": missing or non-string dtype");
    if (sh == v.end() || !sh->is_array()) throw Error(where + ": missing or non-array shape");
    if (off == v.end() || !off->is_array() || off->size() != 2)
      throw Error(where + ": data_offsets must be an array [begin, end]");

    TensorView t;
    t.name = name;
    t.file = p;
    const std::string dts = dt->get<std::string>();
    if (!dtype_from_name(dts, &t.dtype))
      throw Error(where + ": unknown dtype '" + detail::printable(dts, 40) + "'");
    // The element count must not overflow: bound it by the data section, which it must fit in.
    uint64_t numel = 1;
    bool zero = false;
    for (const json& d : *sh) {
      uint64_t u;
      if (!json_u64(d, &u))
        throw Error(where + ": shape " + detail::brief(*sh) +
                    " has a negative or non-integer entry");
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw Error(where + ": shape " + detail::brief(*sh) + " has an out-of-range entry");
      t.shape.push_back(static_cast<int64_t>(u));
      if (u == 0) zero = true;
      if (!zero) {
        if (numel > body_size / std::max<uint64_t>(u, 1) + 1)
          numel = body_size + 1;  // certainly too big; keep going to validate the other entries
        else
          numel *= u;
      }
    }
    if (zero) numel = 0;
    const uint64_t isz = dtype_size(t.dtype);
    const uint64_t nbytes =
        numel > body_size ? body_size + 1 : numel * isz;  // > body_size means "does not fit"

    uint64_t b, e;
    if (!json_u64((*off)[0], &b) || !json_u64((*off)[1], &e))
      throw Error(where + ": data_offsets " + detail::brief(*off) +
                  " are not non-negative integers");
    if (b > e)
      throw Error(where + ": data_offsets " + detail::brief(*off) + " end before they begin");
    if (e > body_size)
      throw Error(where + ": data_offsets " + detail::brief(*off) +
                  " run past the end of the data (" + std::to_string(body_size) + " bytes)");
    if (e - b != nbytes)
      throw Error(
          where + ": data_offsets " + detail::brief(*off) + " hold " + std::to_string(e - b) +
          " bytes, but " + dts + " " + detail::brief(*sh) + " needs " +
          (nbytes > body_size ? std::string("more than the file holds") : std::to_string(nbytes)));
    t.data = body + b;
    t.nbytes = static_cast<size_t>(nbytes);
    if (nbytes > 0) {
      ranges.emplace_back(b, e);
      range_owner.push_back(tensors_.size());
    }
    index_[name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }

  // Overlap check over the non-empty tensors (an empty tensor occupies no bytes).
  std::vector<size_t> order(ranges.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
  for (size_t i = 1; i < order.size(); ++i) {
    const auto& prev = ranges[order[i - 1]];
    const auto& cur = ranges[order[i]];
    if (cur.first < prev.second)
      throw Error(p + ": tensors '" + detail::printable(tensors_[range_owner[order[i - 1]]].name) +
                  "' and '" + detail::printable(tensors_[range_owner[order[i]]].name) +
                  "' overlap in the data section");
  }
}

// ---- writer ------------------------------------------------------------------------------------

void SafetensorsWriter::add(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                            Fill fill) {
  if (name == "__metadata__") throw Error("safetensors writer: reserved tensor name __metadata__");
  for (const Entry& e : entries_)
    if (e.name == name) throw Error("safetensors writer: duplicate tensor '" + name + "'");
  size_t n = dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0) throw Error("safetensors writer: tensor '" + name + "' has a negative dimension");
    n *= static_cast<size_t>(d);
  }
  entries_.push_back(Entry{name, dtype, shape, n, std::move(fill)});
}

void SafetensorsWriter::add_bytes(const std::string& name, DType dtype,
                                  const std::vector<int64_t>& shape, const void* data) {
  const uint8_t* src = static_cast<const uint8_t*>(data);
  add(name, dtype, shape, [src](uint8_t* dst, size_t offset, size_t nbytes) {
    std::memcpy(dst, src + offset, nbytes);
  });
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

static size_t pad8(size_t n) { return (n + 7) & ~size_t(7); }

size_t SafetensorsWriter::data_bytes() const {
  size_t total = 0;
  for (const Entry& e : entries_) total = pad8(total) + e.nbytes;
  return total;
}

void SafetensorsWriter::write(const std::string& path) const {
  // Offsets: each tensor 8-aligned within the data section; the gaps are zero bytes that no
  // tensor claims (the reader allows gaps, only overlaps are errors).
  json h = json::object();
  std::vector<size_t> begins;
  size_t pos = 0;
  for (const Entry& e : entries_) {
    pos = pad8(pos);
    begins.push_back(pos);
    json shape = json::array();
    for (int64_t d : e.shape) shape.push_back(d);
    h[e.name] = {
        {"dtype", dtype_name(e.dtype)}, {"shape", shape}, {"data_offsets", {pos, pos + e.nbytes}}};
    pos += e.nbytes;
  }
  if (!metadata_.empty()) {
    json m = json::object();
    for (const auto& kv : metadata_) m[kv.first] = kv.second;
    h["__metadata__"] = m;
  }
  std::string header = h.dump();
  header.resize(pad8(header.size()), ' ');

  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error(path + ": cannot create: " + std::strerror(errno));
  auto fail = [&](const char* what) {
    throw Error(path + ": " + what + ": " + std::strerror(errno));
  };
  try {
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t(header.size()) >> (8 * i));
    if (std::fwrite(len, 1, 8, f) != 8) fail("write failed");
    if (std::fwrite(header.data(), 1, header.size(), f) != header.size()) fail("write failed");

    constexpr size_t kChunk = size_t(16) << 20;
    std::vector<uint8_t> buf;
    size_t written = 0;
    for (size_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      if (begins[i] > written) {  // alignment gap
        static const uint8_t zeros[8] = {};
        const size_t gap = begins[i] - written;
        if (std::fwrite(zeros, 1, gap, f) != gap) fail("write failed");
        written += gap;
      }
      for (size_t off = 0; off < e.nbytes; off += kChunk) {
        const size_t n = std::min(kChunk, e.nbytes - off);
        buf.resize(n);
        e.fill(buf.data(), off, n);
        if (std::fwrite(buf.data(), 1, n, f) != n) fail("write failed");
      }
      written += e.nbytes;
    }
  } catch (...) {  // a failed write or a throwing fill: leave no partial file behind
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  if (std::fclose(f) != 0) {
    std::remove(tmp.c_str());
    throw Error(path + ": close failed: " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    throw Error(path + ": cannot rename from " + base_name(tmp) + ": " + std::strerror(e));
  }
}

}  // namespace mxmoe
