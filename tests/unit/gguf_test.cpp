// The GGUF reader on well-formed files (every metadata type, v2 and v3, alignment) and on
// broken ones: each must give a Status naming the problem, never a crash (these tests
// also run under AddressSanitizer and UndefinedBehaviorSanitizer).
#include <gtest/gtest.h>

#include "shared_dir.h"

#include <cstring>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "model/gguf_writer.h"

namespace pagoda {
namespace {

// Builds raw GGUF bytes field by field, so tests can write what no writer would.
struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  Bytes& put(T x) {
    const size_t n = b.size();
    b.resize(n + sizeof(T));
    std::memcpy(b.data() + n, &x, sizeof(T));
    return *this;
  }
  Bytes& str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    return put<uint32_t>(0x46554747).put(version).put(n_tensors).put(n_kv);
  }
  Bytes& pad(size_t align) {
    b.resize((b.size() + align - 1) / align * align, 0);
    return *this;
  }
};

Result<std::unique_ptr<GgufFile>> parse(const std::vector<uint8_t>& b) {
  return GgufFile::parse(b.data(), b.size());
}

void expect_error(const std::vector<uint8_t>& b, const std::string& fragment) {
  auto r = parse(b);
  ASSERT_FALSE(r.is_ok()) << "expected an error mentioning '" << fragment << "'";
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().message();
}

std::vector<uint8_t> sample_file() {
  GgufWriter w;
  w.set_u32("general.u32", 7);
  w.set_i32("general.i32", -7);
  w.set_u64("general.u64", 1ull << 40);
  w.set_f32("general.f32", 1.5f);
  w.set_bool("general.bool", true);
  w.set_string("general.architecture", "llama");
  w.set_strings("tokens", {"a", "", "\xe2\x96\x81hello"});
  w.set_f32s("scores", {0.5f, -1.0f});
  w.set_i32s("types", {1, 2, 3});
  std::vector<uint8_t> t1(4 * 8 * 4);
  for (size_t i = 0; i < t1.size(); ++i) t1[i] = static_cast<uint8_t>(i);
  w.add_tensor("a.weight", DType::kF32, {8, 4}, t1);
  w.add_tensor("b.weight", DType::kQ8_0, {64, 2}, std::vector<uint8_t>(2 * 2 * 34, 1));
  return w.to_bytes();
}

TEST(Gguf, ReadsEveryScalarAndArrayType) {
  const auto bytes = sample_file();
  auto f = parse(bytes);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ((*f)->version(), 3u);
  EXPECT_EQ((*f)->get_int("general.u32"), 7);
  EXPECT_EQ((*f)->get_int("general.i32"), -7);
  EXPECT_EQ((*f)->get_int("general.u64"), 1ll << 40);
  EXPECT_EQ((*f)->get_float("general.f32"), 1.5);
  EXPECT_EQ((*f)->get_bool("general.bool"), true);
  EXPECT_EQ((*f)->get_string("general.architecture"), "llama");
  const GgufValue* tokens = (*f)->find("tokens");
  ASSERT_NE(tokens, nullptr);
  ASSERT_EQ(tokens->strings.size(), 3u);
  EXPECT_EQ(tokens->strings[2], "\xe2\x96\x81hello");
  EXPECT_EQ(tokens->strings[1], "");
  const GgufValue* scores = (*f)->find("scores");
  EXPECT_EQ(scores->array_float(1), -1.0);
  EXPECT_EQ((*f)->find("types")->array_int(2), 3);
  ASSERT_EQ((*f)->tensors().size(), 2u);
  const GgufTensorInfo* a = (*f)->find_tensor("a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->ne[0], 8);
  EXPECT_EQ(a->ne[1], 4);
  EXPECT_EQ(a->size, 128u);
  EXPECT_EQ((*f)->tensor_data(*a)[5], 5);
  EXPECT_EQ((*f)->tensor_data(*a) - bytes.data(), static_cast<std::ptrdiff_t>((*f)->data_offset()));
  EXPECT_EQ((*f)->data_offset() % 32, 0u);
  EXPECT_EQ((*f)->find_tensor("b.weight")->size, 136u);
}

TEST(Gguf, ReadsAllThirteenValueTypesIncludingNestedArrays) {
  Bytes b;
  b.header(2, 0, 14);
  b.str("u8").put<uint32_t>(0).put<uint8_t>(200);
  b.str("i8").put<uint32_t>(1).put<int8_t>(-100);
  b.str("u16").put<uint32_t>(2).put<uint16_t>(60000);
  b.str("i16").put<uint32_t>(3).put<int16_t>(-30000);
  b.str("u32").put<uint32_t>(4).put<uint32_t>(4000000000u);
  b.str("i32").put<uint32_t>(5).put<int32_t>(-2000000000);
  b.str("f32").put<uint32_t>(6).put<float>(0.25f);
  b.str("bool").put<uint32_t>(7).put<uint8_t>(0);
  b.str("string").put<uint32_t>(8).str("text");
  b.str("u64").put<uint32_t>(10).put<uint64_t>(~0ull);
  b.str("i64").put<uint32_t>(11).put<int64_t>(-5);
  b.str("f64").put<uint32_t>(12).put<double>(-2.5);
  b.str("arr_u16").put<uint32_t>(9).put<uint32_t>(2).put<uint64_t>(2).put<uint16_t>(1).put<uint16_t>(65535);
  // An array of two arrays of i8.
  b.str("nested").put<uint32_t>(9).put<uint32_t>(9).put<uint64_t>(2);
  b.put<uint32_t>(1).put<uint64_t>(1).put<int8_t>(-1);
  b.put<uint32_t>(1).put<uint64_t>(2).put<int8_t>(3).put<int8_t>(4);
  auto f = parse(b.b);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ((*f)->version(), 2u);
  EXPECT_EQ((*f)->get_int("u8"), 200);
  EXPECT_EQ((*f)->get_int("i8"), -100);
  EXPECT_EQ((*f)->get_int("u16"), 60000);
  EXPECT_EQ((*f)->get_int("i16"), -30000);
  EXPECT_EQ((*f)->get_int("u32"), 4000000000ll);
  EXPECT_EQ((*f)->get_int("i32"), -2000000000);
  EXPECT_EQ((*f)->get_float("f32"), 0.25);
  EXPECT_EQ((*f)->get_bool("bool"), false);
  EXPECT_EQ((*f)->get_string("string"), "text");
  EXPECT_FALSE((*f)->get_int("u64").has_value());  // does not fit int64
  EXPECT_EQ((*f)->find("u64")->u, ~0ull);
  EXPECT_EQ((*f)->get_int("i64"), -5);
  EXPECT_EQ((*f)->get_float("f64"), -2.5);
  EXPECT_EQ((*f)->find("arr_u16")->array_int(1), 65535);
  const GgufValue* nested = (*f)->find("nested");
  ASSERT_EQ(nested->arrays.size(), 2u);
  EXPECT_EQ(nested->arrays[0].array_int(0), -1);
  EXPECT_EQ(nested->arrays[1].array_int(1), 4);
  // The writer copies every type back out unchanged.
  GgufWriter w;
  for (const auto& [k, v] : (*f)->metadata()) w.set_value(k, v);
  const auto again = w.to_bytes();
  auto g = parse(again);
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ((*g)->find("nested")->arrays[1].array_int(0), 3);
  EXPECT_EQ((*g)->get_float("f64"), -2.5);
}

TEST(Gguf, HonoursCustomAlignment) {
  GgufWriter w;
  w.set_alignment(64);
  w.add_tensor("x", DType::kF32, {3}, std::vector<uint8_t>(12, 9));
  w.add_tensor("y", DType::kF32, {5}, std::vector<uint8_t>(20, 7));
  const auto bytes = w.to_bytes();
  auto f = parse(bytes);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ((*f)->alignment(), 64u);
  EXPECT_EQ((*f)->data_offset() % 64, 0u);
  EXPECT_EQ((*f)->find_tensor("y")->offset, 64u);
  EXPECT_EQ((*f)->tensor_data(*(*f)->find_tensor("y"))[0], 7);
}

TEST(Gguf, EveryTruncationIsAnErrorNotACrash) {
  const auto bytes = sample_file();
  // Cutting into the padding after the last tensor loses nothing; anything shorter must fail.
  auto full = parse(bytes);
  ASSERT_TRUE(full.is_ok());
  const GgufTensorInfo& last = (*full)->tensors().back();
  const size_t end = (*full)->data_offset() + last.offset + last.size;
  for (size_t n = 0; n < end; ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    auto f = parse(cut);
    EXPECT_FALSE(f.is_ok()) << "truncated to " << n << " bytes parsed";
  }
}

TEST(Gguf, RejectsBadHeaders) {
  expect_error(Bytes().put<uint32_t>(0x12345678).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(0).b, "bad magic");
  expect_error(Bytes().header(1, 0, 0).b, "version 1");
  expect_error(Bytes().header(99, 0, 0).b, "unknown GGUF version 99");
  expect_error(Bytes().header(0x03000000, 0, 0).b, "big-endian");
  expect_error(Bytes().put<uint32_t>(0x46554747).b, "truncated");
  expect_error(Bytes().header(3, 0, 1ull << 60).b, "metadata count");
  expect_error(Bytes().header(3, 1ull << 60, 0).b, "tensor count");
}

TEST(Gguf, RejectsHostileMetadata) {
  expect_error(Bytes().header(3, 0, 1).put<uint64_t>(1ull << 62).put<uint64_t>(0).put<uint64_t>(0).b,
               "metadata key length");
  expect_error(Bytes().header(3, 0, 1).str("k").put<uint32_t>(13).b, "unknown value type 13");
  expect_error(Bytes().header(3, 0, 1).str("k").put<uint32_t>(8).put<uint64_t>(1ull << 40).b, "string value");
  expect_error(Bytes().header(3, 0, 1).str("k").put<uint32_t>(9).put<uint32_t>(4).put<uint64_t>(1ull << 61).b,
               "cannot fit");
  expect_error(Bytes().header(3, 0, 1).str("k").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(1ull << 40).b,
               "cannot fit");
  expect_error(Bytes().header(3, 0, 1).str("k").put<uint32_t>(9).put<uint32_t>(77).put<uint64_t>(1).b,
               "unknown array element type");
  expect_error(Bytes().header(3, 0, 1).str("k").put<uint32_t>(7).put<uint8_t>(2).b, "bool");
  expect_error(Bytes().header(3, 0, 2).str("k").put<uint32_t>(4).put<uint32_t>(1).str("k").put<uint32_t>(4).put<uint32_t>(2).b,
               "duplicate metadata key");
  expect_error(Bytes().header(3, 0, 1).str("general.alignment").put<uint32_t>(4).put<uint32_t>(48).b,
               "power of two");
  // Arrays nested without end.
  Bytes deep;
  deep.header(3, 0, 1).str("k").put<uint32_t>(9);
  for (int i = 0; i < 20; ++i) deep.put<uint32_t>(9).put<uint64_t>(1);
  deep.put<uint32_t>(0).put<uint64_t>(0);
  expect_error(deep.b, "nested deeper");
}

// One tensor info with the given fields, followed by a data section of `data` bytes.
std::vector<uint8_t> one_tensor(uint32_t n_dims, std::vector<uint64_t> ne, uint32_t type,
                                uint64_t offset, size_t data) {
  Bytes b;
  b.header(3, 1, 0).str("t").put<uint32_t>(n_dims);
  for (uint64_t n : ne) b.put<uint64_t>(n);
  b.put<uint32_t>(type).put<uint64_t>(offset).pad(32);
  b.b.resize(b.b.size() + data, 0);
  return b.b;
}

TEST(Gguf, RejectsHostileTensorInfos) {
  EXPECT_TRUE(parse(one_tensor(2, {4, 2}, 0, 0, 32)).is_ok());
  expect_error(one_tensor(5, {1, 1, 1, 1, 1}, 0, 0, 32), "dimensions");
  expect_error(one_tensor(1, {4}, 1234, 0, 32), "unknown or unsupported type id 1234");
  // Pagoda's internal NF4 (id 1000) has no GGUF type number: a file cannot claim it.
  expect_error(one_tensor(1, {32}, 1000, 0, 32), "unknown or unsupported type id 1000");
  expect_error(one_tensor(1, {4}, 0, 3, 32), "not aligned");
  expect_error(one_tensor(2, {4, 2}, 0, 0, 31), "runs past the end");
  expect_error(one_tensor(1, {4}, 0, 1ull << 62, 32), "runs past the end");
  expect_error(one_tensor(2, {1ull << 40, 1ull << 40}, 0, 0, 32), "overflows");
  expect_error(one_tensor(1, {1ull << 63}, 0, 0, 32), "negative dimension");
  expect_error(one_tensor(1, {31}, 8, 0, 64), "not a multiple");
  Bytes dup;
  dup.header(3, 2, 0);
  for (int i = 0; i < 2; ++i) dup.str("t").put<uint32_t>(1).put<uint64_t>(1).put<uint32_t>(0).put<uint64_t>(0);
  dup.pad(32).put<uint32_t>(0).pad(32);
  expect_error(dup.b, "duplicate tensor name");
}

// Internal block types are neither written into GGUF nor asked for by name.
TEST(Gguf, InternalTypesStayOutOfFiles) {
  GgufWriter w;
  w.add_tensor("x.weight", DType::kNF4, {32}, std::vector<uint8_t>(18, 0));
  const std::string path = ::testing::TempDir() + "/nf4.gguf";
  const Status s = w.write(path);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("NF4"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("no GGUF type number"), std::string::npos) << s.message();
  DType t;
  EXPECT_FALSE(parse_dtype("NF4", &t));
  EXPECT_TRUE(parse_dtype("IQ4_NL", &t));
  EXPECT_TRUE(is_internal_dtype(DType::kNF4));
  EXPECT_FALSE(is_internal_dtype(DType::kMXFP4));
}

TEST(Gguf, OpenReportsMissingFiles) {
  auto f = GgufFile::open("/nonexistent/model.gguf");
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.status().message().find("/nonexistent/model.gguf"), std::string::npos);
}

TEST(Gguf, OpensTheSharedModel) {
  auto f = GgufFile::open(test::shared_dir() + "/models/stories260K.gguf");
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ((*f)->get_string("general.architecture"), "llama");
  EXPECT_EQ((*f)->tensors().size(), 48u);
  uint64_t total = 0;
  for (const auto& t : (*f)->tensors()) total += t.size;
  EXPECT_LE((*f)->data_offset() + total, (*f)->file_size());
}

}  // namespace
}  // namespace pagoda
