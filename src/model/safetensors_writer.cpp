#include "model/safetensors_writer.h"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/text.h"
#include "model/safetensors.h"

namespace pagoda {
namespace {

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};

Status write_all(FILE* f, const void* p, size_t n, const std::string& path) {
  if (n != 0 && std::fwrite(p, 1, n, f) != n) return io_error("writing '" + path + "' failed");
  return Status::ok();
}

Status write_body(FILE* f, const std::string& path, const std::vector<SafetensorsSpec>& specs,
                  const std::map<std::string, std::string>& metadata,
                  const std::function<Status(size_t, std::vector<uint8_t>*)>& produce) {
  // nlohmann's ordered_json keeps the tensors in the order their bytes follow.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const SafetensorsSpec& s : specs) {
    const int eb = safetensors_dtype_bytes(s.dtype);
    if (eb == 0)
      return invalid_argument("tensor '" + s.name + "': unknown dtype '" + s.dtype + "'");
    uint64_t n = static_cast<uint64_t>(eb);
    for (int64_t d : s.shape) {
      if (d < 0) return invalid_argument("tensor '" + s.name + "' has a negative dimension");
      n *= static_cast<uint64_t>(d);
    }
    header[s.name] = {
        {"dtype", s.dtype}, {"shape", s.shape}, {"data_offsets", {offset, offset + n}}};
    sizes.push_back(n);
    offset += n;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t len = text.size();
  uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(len >> (8 * i));
  PAGODA_RETURN_IF_ERROR(write_all(f, le, 8, path));
  PAGODA_RETURN_IF_ERROR(write_all(f, text.data(), text.size(), path));
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < specs.size(); ++i) {
    bytes.clear();
    PAGODA_RETURN_IF_ERROR(produce(i, &bytes));
    if (bytes.size() != sizes[i])
      return internal_error(str_format("tensor '%s': %zu bytes produced, its shape needs %llu",
                                       specs[i].name.c_str(), bytes.size(),
                                       static_cast<unsigned long long>(sizes[i])));
    PAGODA_RETURN_IF_ERROR(write_all(f, bytes.data(), bytes.size(), path));
  }
  if (std::fflush(f) != 0) return io_error("writing '" + path + "' failed");
  return Status::ok();
}

}  // namespace

Status write_safetensors(const std::string& path, const std::vector<SafetensorsSpec>& specs,
                         const std::map<std::string, std::string>& metadata,
                         const std::function<Status(size_t, std::vector<uint8_t>*)>& produce) {
  Status st;
  {
    std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "wb"));
    if (!f) return io_error("cannot create '" + path + "'");
    st = write_body(f.get(), path, specs, metadata, produce);
  }
  if (!st.is_ok()) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  return st;
}

}  // namespace pagoda
