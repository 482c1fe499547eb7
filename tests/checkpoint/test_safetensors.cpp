// test_safetensors.cpp: the safetensors writer -> reader round trip, and every class of malformed
// file giving an mxmoe::Error whose one-line message names the file (and the tensor).
#include <gtest/gtest.h>

#include <cstring>

#include "mxmoe/safetensors.h"
#include "test_util.h"

namespace mxmoe {
namespace {

using test::raw_safetensors;
using test::ScratchDir;
using test::write_file;

TEST(Safetensors, DTypeNamesRoundTrip) {
  const DType all[] = {DType::kBool, DType::kU8,  DType::kI8,    DType::kI16,
                       DType::kI32,  DType::kI64, DType::kF16,   DType::kBF16,
                       DType::kF32,  DType::kF64, DType::kF8E4M3};
  const size_t sizes[] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8, 1};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) {
    DType back;
    ASSERT_TRUE(dtype_from_name(dtype_name(all[i]), &back)) << dtype_name(all[i]);
    EXPECT_EQ(back, all[i]);
    EXPECT_EQ(dtype_size(all[i]), sizes[i]) << dtype_name(all[i]);
  }
  DType d;
  EXPECT_FALSE(dtype_from_name("F4", &d));
  EXPECT_FALSE(dtype_from_name("u8", &d));  // names are case-sensitive in the format
}

TEST(Safetensors, WriterReaderRoundTripEveryDtype) {
  ScratchDir dir;
  const DType all[] = {DType::kBool, DType::kU8,  DType::kI8,    DType::kI16,
                       DType::kI32,  DType::kI64, DType::kF16,   DType::kBF16,
                       DType::kF32,  DType::kF64, DType::kF8E4M3};
  SafetensorsWriter w;
  std::vector<std::string> payload;
  // Odd element counts, so that 8-byte alignment padding is exercised between tensors.
  for (DType d : all) {
    const std::vector<int64_t> shape = {3, 5};
    std::string bytes(15 * dtype_size(d), '\0');
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 + int(d) * 31);
    payload.push_back(bytes);
  }
  for (size_t i = 0; i < payload.size(); ++i)
    w.add_bytes(std::string("t_") + dtype_name(all[i]), all[i], {3, 5}, payload[i].data());
  w.add_bytes("empty_1d", DType::kF32, {0}, nullptr);
  w.add_bytes("empty_2d", DType::kBF16, {4, 0}, nullptr);
  const float scalar = 3.25f;
  w.add_bytes("scalar", DType::kF32, {}, &scalar);
  // A streamed tensor larger than one 16 MB writer chunk, checked byte by byte below.
  const size_t big = (size_t(16) << 20) + 12345;
  w.add("big", DType::kU8, {int64_t(big)}, [](uint8_t* dst, size_t off, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>((off + i) * 2654435761u >> 13);
  });
  w.set_metadata("format", "pt");
  w.set_metadata("note", "round trip");
  const std::string path = dir.file("rt.safetensors");
  w.write(path);

  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->path(), path);
  ASSERT_EQ(f->tensors().size(), payload.size() + 4);
  for (size_t i = 0; i < payload.size(); ++i) {
    const TensorView* t = f->find(std::string("t_") + dtype_name(all[i]));
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype, all[i]);
    EXPECT_EQ(t->shape, (std::vector<int64_t>{3, 5}));
    EXPECT_EQ(t->shape_str(), "[3, 5]");
    EXPECT_EQ(t->numel(), 15);
    ASSERT_EQ(t->nbytes, payload[i].size());
    EXPECT_EQ(std::memcmp(t->data, payload[i].data(), t->nbytes), 0) << t->name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % 8, 0u) << t->name << " not 8-aligned";
    EXPECT_EQ(t->file, path);
  }
  const TensorView* e1 = f->find("empty_1d");
  ASSERT_NE(e1, nullptr);
  EXPECT_EQ(e1->nbytes, 0u);
  EXPECT_EQ(e1->numel(), 0);
  const TensorView* e2 = f->find("empty_2d");
  ASSERT_NE(e2, nullptr);
  EXPECT_EQ(e2->shape, (std::vector<int64_t>{4, 0}));
  const TensorView* sc = f->find("scalar");
  ASSERT_NE(sc, nullptr);
  EXPECT_TRUE(sc->shape.empty());
  ASSERT_EQ(sc->nbytes, 4u);
  float back;
  std::memcpy(&back, sc->data, 4);
  EXPECT_EQ(back, 3.25f);
  const TensorView* b = f->find("big");
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->nbytes, big);
  size_t bad = 0;
  for (size_t i = 0; i < big; ++i) bad += b->data[i] != static_cast<uint8_t>(i * 2654435761u >> 13);
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(f->find("absent"), nullptr);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("note"), "round trip");
  EXPECT_FALSE(test::fs::exists(path + ".tmp"));
}

TEST(Safetensors, WriterRejectsDuplicatesAndReservedNames) {
  SafetensorsWriter w;
  uint8_t x = 0;
  w.add_bytes("a", DType::kU8, {1}, &x);
  EXPECT_THROW(w.add_bytes("a", DType::kU8, {1}, &x), Error);
  EXPECT_THROW(w.add_bytes("__metadata__", DType::kU8, {1}, &x), Error);
  EXPECT_THROW(w.add_bytes("neg", DType::kU8, {-1}, &x), Error);
}

TEST(Safetensors, WriterFailureNamesPathAndLeavesNothing) {
  ScratchDir dir;
  SafetensorsWriter w;
  w.add("t", DType::kU8, {4}, [](uint8_t*, size_t, size_t) { throw Error("fill failed"); });
  EXPECT_THROW(w.write(dir.file("x.safetensors")), Error);
  EXPECT_FALSE(test::fs::exists(dir.file("x.safetensors")));
  EXPECT_FALSE(test::fs::exists(dir.file("x.safetensors.tmp")));
  SafetensorsWriter w2;
  try {
    w2.write(dir.file("no/such/dir/y.safetensors"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("y.safetensors"), std::string::npos) << e.what();
  }
}

// Writes `bytes` to a file and expects open() and from_memory() to reject it with a message that
// contains the file name and every string in `needles`.
void expect_bad(const std::string& bytes, std::vector<std::string> needles) {
  ScratchDir dir;
  const std::string path = dir.file("bad.safetensors");
  write_file(path, bytes);
  needles.push_back(path);
  try {
    SafetensorsFile::open(path);
    ADD_FAILURE() << "open accepted a bad file; expected an error naming " << needles[0];
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "multi-line message: " << msg;
    for (const std::string& n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "message '" << msg << "' lacks '" << n << "'";
  }
  needles.back() = "label.st";
  try {
    SafetensorsFile::from_memory(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                 "label.st");
    ADD_FAILURE() << "from_memory accepted a bad image";
  } catch (const Error& e) {
    for (const std::string& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

const std::string k16(16, 'x');  // 16 data bytes

TEST(SafetensorsMalformed, TruncatedBelowHeaderLength) {
  expect_bad("", {"truncated"});
  expect_bad(std::string(7, '\0'), {"truncated"});
}

TEST(SafetensorsMalformed, HeaderLengthPastEof) {
  std::string s = raw_safetensors("{}", "");
  s[0] = 100;  // claims 100 header bytes, file has 2
  expect_bad(s, {"header length 100"});
  std::string huge(8, '\xff');  // 2^64 - 1: must not overflow the bounds check
  expect_bad(huge + "{}", {"header length"});
}

TEST(SafetensorsMalformed, InvalidJson) {
  expect_bad(raw_safetensors("{\"a\": ", ""), {"JSON"});
  expect_bad(raw_safetensors("[1, 2]", ""), {"not a JSON object"});
}

TEST(SafetensorsMalformed, NonObjectEntries) {
  expect_bad(raw_safetensors("{\"w\": 5}", ""), {"'w'", "not a JSON object"});
  expect_bad(
      raw_safetensors("{\"w\": {\"dtype\": 3, \"shape\": [1], \"data_offsets\": [0, 1]}}", "x"),
      {"'w'", "dtype"});
  expect_bad(raw_safetensors("{\"w\": {\"dtype\": \"U8\", \"data_offsets\": [0, 1]}}", "x"),
             {"'w'", "shape"});
  expect_bad(
      raw_safetensors("{\"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0]}}", "x"),
      {"'w'", "data_offsets"});
  expect_bad(raw_safetensors("{\"__metadata__\": [1]}", ""), {"__metadata__"});
  expect_bad(raw_safetensors("{\"__metadata__\": {\"k\": 1}}", ""), {"__metadata__", "'k'"});
}

TEST(SafetensorsMalformed, UnknownDtype) {
  expect_bad(raw_safetensors(
                 "{\"w1\": {\"dtype\": \"F4\", \"shape\": [16], \"data_offsets\": [0, 16]}}", k16),
             {"'w1'", "unknown dtype 'F4'"});
}

TEST(SafetensorsMalformed, NegativeOrNonIntegerShape) {
  expect_bad(
      raw_safetensors(
          "{\"w\": {\"dtype\": \"U8\", \"shape\": [-4, -4], \"data_offsets\": [0, 16]}}", k16),
      {"'w'", "shape"});
  expect_bad(raw_safetensors(
                 "{\"w\": {\"dtype\": \"U8\", \"shape\": [4.5], \"data_offsets\": [0, 16]}}", k16),
             {"'w'", "shape"});
}

TEST(SafetensorsMalformed, NbytesMismatch) {
  expect_bad(raw_safetensors(
                 "{\"w\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 16]}}", k16),
             {"'w'", "needs 12"});
  // A shape whose byte count overflows 64 bits must not wrap around to a small number.
  expect_bad(raw_safetensors("{\"w\": {\"dtype\": \"F64\", \"shape\": [4294967296, 4294967296, "
                             "16], \"data_offsets\": [0, 0]}}",
                             ""),
             {"'w'"});
}

TEST(SafetensorsMalformed, OffsetsPastEnd) {
  expect_bad(raw_safetensors(
                 "{\"w\": {\"dtype\": \"U8\", \"shape\": [32], \"data_offsets\": [0, 32]}}", k16),
             {"'w'", "past the end"});
  expect_bad(raw_safetensors(
                 "{\"w\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [8, 4]}}", k16),
             {"'w'", "end before they begin"});
  expect_bad(raw_safetensors(
                 "{\"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [-1, 0]}}", k16),
             {"'w'", "data_offsets"});
}

TEST(SafetensorsMalformed, OverlappingTensors) {
  expect_bad(raw_safetensors("{\"a\": {\"dtype\": \"U8\", \"shape\": [10], \"data_offsets\": [0, "
                             "10]}, \"b\": {\"dtype\": \"U8\", \"shape\": [8], \"data_offsets\": "
                             "[8, 16]}}",
                             k16),
             {"'a'", "'b'", "overlap"});
}

TEST(SafetensorsMalformed, TruncatedRealFile) {
  // A valid file cut short: the last tensor's offsets now run past the end.
  ScratchDir dir;
  SafetensorsWriter w;
  std::vector<uint8_t> a(100, 1), b(100, 2);
  w.add_bytes("a", DType::kU8, {100}, a.data());
  w.add_bytes("b", DType::kU8, {100}, b.data());
  w.write(dir.file("ok.safetensors"));
  std::string bytes = test::read_file(dir.file("ok.safetensors"));
  ASSERT_NO_THROW(SafetensorsFile::open(dir.file("ok.safetensors")));
  bytes.resize(bytes.size() - 10);
  expect_bad(bytes, {"'b'", "past the end"});
}

TEST(SafetensorsMalformed, HostileValuesKeepMessagesOneLine) {
  // A million nested arrays as a shape: reported without recursing through it.
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  expect_bad(
      raw_safetensors(
          "{\"w\": {\"dtype\": \"U8\", \"shape\": " + deep + ", \"data_offsets\": [0, 16]}}", k16),
      {"'w'", "shape"});
  // A control character in a tensor name is escaped (expect_bad checks the message has no '\n').
  expect_bad(raw_safetensors("{\"bad\\nname\": {\"dtype\": \"X\", \"shape\": [1], "
                             "\"data_offsets\": [0, 1]}}",
                             k16),
             {"bad\\x0aname", "unknown dtype"});
}

TEST(SafetensorsMalformed, MissingFileNamesPath) {
  try {
    SafetensorsFile::open("/nonexistent/dir/m.safetensors");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/m.safetensors"), std::string::npos);
  }
}

TEST(SafetensorsMalformed, GapsAndEmptyTensorsAreAccepted) {
  // Not errors: a gap between tensors, and an empty tensor whose offset lies inside another.
  const std::string img = raw_safetensors(
      "{\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [8, 12]}, "
      "\"e\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [9, 9]}}",
      k16);
  auto f =
      SafetensorsFile::from_memory(reinterpret_cast<const uint8_t*>(img.data()), img.size(), "m");
  EXPECT_EQ(f->tensors().size(), 2u);
}

}  // namespace
}  // namespace mxmoe
