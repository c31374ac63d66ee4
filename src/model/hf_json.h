// Reading Hugging Face JSON configs (config.json, quantization_config): where a key's
// absence and an explicit null mean the same (transformers writes "head_dim": null and
// the like).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace pagoda {

// The value of `key`, or null when absent or JSON null.
inline const nlohmann::json* find_key(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// A value for messages and string comparisons: a string as it is, anything else as JSON.
inline std::string json_text(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

}  // namespace pagoda
