// Switches read from the environment (developer and A/B switches such as
// PAGODA_CUDA_FUSE). Read strictly: unset or empty gives the default, anything but a
// whole decimal integer in range is an error naming the variable. atoi's "garbage is 0"
// silently turned a typo into a different configuration in a benchmark row.
//
// Header-only on purpose: the CUDA plugin takes pagoda_lib's symbols from the executable
// that opens it, and a function only the plugin calls would not be linked in there.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "core/status.h"

namespace pagoda {

// Parses `text` as a decimal integer in [lo, hi]; `name` is the setting's name for the
// error message.
inline Result<int64_t> parse_setting(const char* name, const char* text, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || v < lo || v > hi)
    return invalid_argument(str_format("%s=%s: expected an integer from %lld to %lld", name, text,
                                       static_cast<long long>(lo), static_cast<long long>(hi)));
  return static_cast<int64_t>(v);
}

// The environment variable `name` as an integer in [lo, hi], or `fallback` when it is
// unset or empty.
inline Result<int64_t> env_integer(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return fallback;
  return parse_setting(name, e, lo, hi);
}

}  // namespace pagoda
