// The bearer-key check of `--api-key`: the header's scheme in any case (RFC 9110 says
// schemes compare case-insensitively), the key compared in time that does not depend on
// where it first differs, so response times tell an attacker nothing about the key.
#pragma once

#include <optional>
#include <string_view>

namespace pagoda::server {

// The token of an `Authorization: Bearer TOKEN` value, or nullopt for another scheme.
std::optional<std::string_view> bearer_token(std::string_view header_value);

// a == b, reading every byte of `a` whatever the contents; false when `key` is empty.
bool same_key(std::string_view a, std::string_view key);

}  // namespace pagoda::server
