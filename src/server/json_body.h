// Request bodies to JSON with a nesting limit enforced while parsing. Copying, comparing and
// dumping an nlohmann value recurse once per level, so a body nesting 100,000 arrays
// overflowed the stack the first time it was copied: such a document is refused before it
// is ever built.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "server/api_error.h"

namespace pagoda::server {

// Far deeper than any OpenAI request (tools' JSON schemas nest a dozen levels) and far
// shallower than what recursion over the value can survive.
inline constexpr int kDefaultMaxJsonDepth = 64;

// The body as an ordered JSON object (key order reaches chat templates), or a 400: not
// valid JSON, not an object, or containers nested more than max_depth deep ({} is depth 1).
ApiResult<nlohmann::ordered_json> parse_json_body(std::string_view body,
                                                  int max_depth = kDefaultMaxJsonDepth);

}  // namespace pagoda::server
