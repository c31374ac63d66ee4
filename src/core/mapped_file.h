// A read-only memory map of a whole file. Loaders parse headers in place and copy the
// tensors they keep into ordinary memory (reading weights through the map is several
// times slower on the machines we measured).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace pagoda {

class MappedFile {
 public:
  static Result<std::unique_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Drops the resident pages of [offset, offset + size) from this process (they are
  // read again from the file if touched later). Loaders call it once they have copied
  // the tensors, so a model is not resident twice.
  void release(size_t offset, size_t size) const;

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace pagoda
