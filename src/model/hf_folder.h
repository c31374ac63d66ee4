// The files of a Hugging Face checkpoint folder, for every reader and writer of one:
// bounded JSON reads and the list of safetensors shards (model.safetensors, or those
// model.safetensors.index.json names).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/safetensors.h"

namespace pagoda {

// Reads a JSON file of at most a few MiB (configs, indexes; tokenizer.json has its own cap).
Result<std::string> read_json_file(const std::filesystem::path& p);

struct HfShards {
  std::vector<std::string> names;         // file names inside the folder
  std::optional<SafetensorsIndex> index;  // when the folder has model.safetensors.index.json
  std::filesystem::path index_path;
};
Result<HfShards> list_hf_shards(const std::filesystem::path& dir);

}  // namespace pagoda
