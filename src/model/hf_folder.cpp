#include "model/hf_folder.h"

#include <fstream>
#include <sstream>

namespace pagoda {
namespace {

namespace fs = std::filesystem;

// config.json and the index are a few KiB; anything past this is not one.
constexpr uintmax_t kMaxJsonBytes = 64u << 20;

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

}  // namespace

Result<std::string> read_json_file(const fs::path& p) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(p, ec);
  if (ec) return io_error("cannot read '" + p.string() + "': " + ec.message());
  if (size > kMaxJsonBytes) return corrupt("'" + p.string() + "' is too large for a JSON file");
  std::ifstream in(p, std::ios::binary);
  if (!in) return io_error("cannot read '" + p.string() + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<HfShards> list_hf_shards(const fs::path& dir) {
  HfShards s;
  s.index_path = dir / "model.safetensors.index.json";
  if (is_file(s.index_path)) {
    PAGODA_ASSIGN_OR_RETURN(const std::string text, read_json_file(s.index_path));
    PAGODA_ASSIGN_OR_RETURN(s.index, parse_safetensors_index(text, s.index_path.string()));
    s.names = s.index->shards;
  } else if (is_file(dir / "model.safetensors")) {
    s.names = {"model.safetensors"};
  } else {
    return not_found("folder '" + dir.string() +
                     "' has neither model.safetensors nor model.safetensors.index.json");
  }
  for (const std::string& name : s.names)
    if (!is_file(dir / name))
      return not_found("'" + s.index_path.string() + "' names shard '" + name +
                       "', which is not in the folder");
  return s;
}

}  // namespace pagoda
