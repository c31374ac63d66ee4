// Safetensors reader: the header of a .safetensors file parsed in place over a memory map,
// bounded as the GGUF reader is. The header length is checked against the file and a
// cap before it is read; every tensor's dtype, shape and data_offsets are checked (offsets
// inside the data section, the byte count equal to dtype x shape without overflow, no two
// tensors overlapping), so a truncated or hostile file gives a Status naming the file and
// the tensor, never a crash or an allocation sized by the file.
//
// A sharded checkpoint's model.safetensors.index.json maps each tensor to its shard;
// parse_safetensors_index reads it (shards are plain file names in the same folder).
#pragma once

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

struct SafetensorsTensor {
  std::string name;
  std::string dtype;            // as the header spells it: "BF16", "F32", "I64", ...
  std::optional<DType> type;    // Pagoda's type for it; none for types it does not load
  std::vector<int64_t> shape;   // outermost first ([out, in] for a linear layer's weight)
  uint64_t begin = 0, end = 0;  // data_offsets: from the start of the data section
  int64_t n_elements() const;
};

// Largest header accepted (the safetensors library's own cap).
inline constexpr uint64_t kSafetensorsMaxHeader = 100u << 20;

class SafetensorsFile {
 public:
  // Maps and parses `path`.
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  // Parses a buffer the caller keeps alive (the fuzzer and tests); `name` is for messages.
  static Result<std::unique_ptr<SafetensorsFile>> parse(const uint8_t* data, size_t size,
                                                        const std::string& name = "<buffer>");

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(std::string_view name) const;
  // String entries of __metadata__ (others are refused at parse).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Offset of the data section from the start of the file.
  uint64_t data_offset() const { return data_offset_; }
  const uint8_t* tensor_data(const SafetensorsTensor& t) const {
    return data_ + data_offset_ + t.begin;
  }
  // Gives back the resident pages of a tensor's bytes once copied (no-op on buffers).
  void release(const SafetensorsTensor& t) const {
    if (map_) map_->release(data_offset_ + t.begin, t.end - t.begin);
  }
  // The same for bytes [offset, offset + size) of the file.
  void release_range(uint64_t offset, uint64_t size) const {
    if (map_) map_->release(offset, size);
  }
  void release_all() const {
    if (map_) map_->release(0, size_);
  }

 private:
  SafetensorsFile() = default;
  Status parse_header();

  std::unique_ptr<MappedFile> map_;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  uint64_t data_offset_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// Bytes per element of a safetensors dtype name ("BF16" 2, "F8_E4M3" 1, ...); 0 when the
// name is not one of the whole-byte dtypes.
int safetensors_dtype_bytes(std::string_view dtype);

// A sharded checkpoint's index: which shard file holds each tensor.
struct SafetensorsIndex {
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  std::vector<std::string> shards;                // distinct shard names, sorted
  std::optional<int64_t> total_size;              // metadata.total_size when given
};
// Parses the text of model.safetensors.index.json (`where` names it in messages). Shard
// names must be plain file names: no directories, no "..".
Result<SafetensorsIndex> parse_safetensors_index(std::string_view json_text,
                                                 const std::string& where);

}  // namespace pagoda
