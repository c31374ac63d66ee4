#include "server/auth.h"

#include "server/http_reader.h"

namespace pagoda::server {

std::optional<std::string_view> bearer_token(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  if (v.size() < 7 || !iequals_ascii(v.substr(0, 6), "bearer") || (v[6] != ' ' && v[6] != '\t'))
    return std::nullopt;
  v.remove_prefix(7);
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

bool same_key(std::string_view a, std::string_view key) {
  if (key.empty()) return false;
  // Every byte of `a` is compared (against the key, cycled) and differences are OR-ed, so
  // the time depends on the lengths only.
  unsigned diff = a.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(key[i % key.size()]);
  return diff == 0;
}

}  // namespace pagoda::server
