// GGUF v3 writer, used by our own converters (`pagoda quantize`, `pagoda mkmodel`) and by
// tests that build well-formed and deliberately broken files.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/gguf.h"

namespace pagoda {

class GgufWriter {
 public:
  void set_u32(std::string_view key, uint32_t v);
  void set_i32(std::string_view key, int32_t v);
  void set_u64(std::string_view key, uint64_t v);
  void set_f32(std::string_view key, float v);
  void set_bool(std::string_view key, bool v);
  void set_string(std::string_view key, std::string_view v);
  void set_strings(std::string_view key, const std::vector<std::string>& v);
  void set_f32s(std::string_view key, const std::vector<float>& v);
  void set_i32s(std::string_view key, const std::vector<int32_t>& v);
  // Copies a value read from another file (any type, arrays included).
  void set_value(std::string_view key, const GgufValue& v);
  void remove(std::string_view key);

  // The writer keeps a copy of `data` (size must equal the type's row bytes x rows).
  void add_tensor(std::string name, DType type, std::vector<int64_t> ne, std::vector<uint8_t> data);
  // As above without copying: `data` must outlive write().
  void add_tensor_ref(std::string name, DType type, std::vector<int64_t> ne, const uint8_t* data,
                      size_t size);

  void set_alignment(uint32_t a) { alignment_ = a; }
  Status write(const std::string& path) const;
  // Serialises the whole file into memory (tests and fuzz seeds).
  std::vector<uint8_t> to_bytes() const;

 private:
  struct Entry {
    std::string key;
    std::vector<uint8_t> bytes;  // type tag and value, serialised
  };
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> owned;
    const uint8_t* data;
    size_t size;
  };
  void put(std::string_view key, std::vector<uint8_t> bytes);
  std::vector<uint8_t> header() const;

  std::vector<Entry> kv_;
  std::vector<Tensor> tensors_;
  uint32_t alignment_ = 32;
};

}  // namespace pagoda
