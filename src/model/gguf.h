// GGUF reader: parses the header, metadata and tensor table of a GGUF v2/v3 file in
// place over a memory map. Every count, length and offset is checked against the bytes
// actually present before it is used, so a truncated or hostile file gives a Status
// naming the problem, never a crash or an allocation sized by the file.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/status.h"

namespace pagoda {

enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
std::string_view gguf_type_name(GgufType t);
// Bytes of one value of a fixed-size type; 0 for strings and arrays.
size_t gguf_value_size(GgufType t);

// One metadata value. Scalars are widened into i/u/f; strings point into the file.
struct GgufValue {
  GgufType type = GgufType::kU8;
  int64_t i = 0;         // signed integer types and bool
  uint64_t u = 0;        // unsigned integer types
  double f = 0;          // f32 and f64
  std::string_view str;  // kString
  // kArray: element type and count; elements of fixed-size type are left in place at
  // `array_data` (little-endian, possibly unaligned), strings and nested arrays are parsed.
  GgufType elem_type = GgufType::kU8;
  uint64_t count = 0;
  const uint8_t* array_data = nullptr;
  std::vector<std::string_view> strings;
  std::vector<GgufValue> arrays;

  bool is_integer() const;
  bool is_float() const { return type == GgufType::kF32 || type == GgufType::kF64; }
  // Any integer type as int64 (u64 above INT64_MAX is reported as not representable).
  std::optional<int64_t> as_int() const;
  std::optional<double> as_float() const;  // floats and integers
  // Element `k` of a numeric array, widened. Caller checks k < count.
  int64_t array_int(uint64_t k) const;
  double array_float(uint64_t k) const;
  // Human-readable rendering, arrays abbreviated.
  std::string to_string(size_t max_elems = 8) const;
};

struct GgufTensorInfo {
  std::string name;
  DType type = DType::kF32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the contiguous (row) dimension
  uint64_t offset = 0;           // from the start of the data section
  uint64_t size = 0;             // bytes
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

// "[ne0, ne1, ...]" over the tensor's dimensions, for messages.
std::string tensor_shape(const GgufTensorInfo& t);
// Dimensions ne[0..n_dims) as "[a, b]".
std::string shape_text(const int64_t* ne, int n_dims);
// OK when the four dimensions ne are `shape` (ne[0] first, missing dimensions 1); else a
// corrupt-file error naming `label` and both shapes. GGUF files and checkpoint folders
// check their tensors with it alike.
Status check_shape(const std::string& label, const int64_t* ne, int n_dims,
                   const std::vector<int64_t>& shape);

class GgufFile {
 public:
  // Maps and parses `path`.
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Parses a buffer the caller keeps alive (used by the fuzzer and tests).
  static Result<std::unique_ptr<GgufFile>> parse(const uint8_t* data, size_t size);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  const std::string& path() const { return path_; }
  size_t file_size() const { return size_; }

  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string_view> get_string(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // The tensor `name` with exactly `shape` (ne[0] first, as GGUF stores it; missing
  // dimensions are 1): not_found without it, corrupt with another shape.
  Result<const GgufTensorInfo*> find_tensor(const std::string& name,
                                            const std::vector<int64_t>& shape) const;
  const uint8_t* tensor_data(const GgufTensorInfo& t) const {
    return data_ + data_offset_ + t.offset;
  }
  uint64_t data_offset() const { return data_offset_; }
  // Gives back the memory of the tensor data pages once they have been copied (no-op for
  // parsed buffers). Metadata stays valid.
  void release_tensor(const GgufTensorInfo& t) const {
    if (map_) map_->release(data_offset_ + t.offset, t.size);
  }
  void release_tensor_data() const {
    if (map_) map_->release(data_offset_, size_ - std::min<size_t>(data_offset_, size_));
  }

 private:
  GgufFile() = default;
  Status parse_all();

  std::unique_ptr<MappedFile> map_;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace pagoda
