// JSON in and out of template values: request data (messages, tools) becomes values in
// the order its keys came in, and the tojson filter writes values the way Hugging Face's
// override of it does (Python's json.dumps).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "jinja/value.h"

namespace pagoda::jinja {

Value from_json(const nlohmann::ordered_json& j);

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // newline + this per level; none: one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};

// json.dumps(v, ...); raises TypeError (a render error) for values JSON cannot hold.
std::string to_json(const Value& v, const JsonDumpOptions& options);

}  // namespace pagoda::jinja
