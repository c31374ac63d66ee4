// Writes a .safetensors file: the JSON header (each tensor's dtype, shape and byte range,
// then __metadata__), padded with spaces to 8 bytes, then the tensors' bytes in order.
// The header is written first from the specs alone, and each tensor's bytes are asked for
// only when its turn comes, so a writer holds one tensor at a time, not the checkpoint.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace pagoda {

struct SafetensorsSpec {
  std::string name;
  std::string dtype;  // as the format spells it: "F32", "BF16", "F8_E4M3", "I8", ...
  std::vector<int64_t> shape;
};

// `produce(i, &bytes)` fills tensor i's bytes; their count must be what its dtype and
// shape say. On an error the partial file is removed.
Status write_safetensors(const std::string& path, const std::vector<SafetensorsSpec>& specs,
                         const std::map<std::string, std::string>& metadata,
                         const std::function<Status(size_t, std::vector<uint8_t>*)>& produce);

}  // namespace pagoda
