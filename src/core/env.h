// Strict integer settings (core/settings.cpp's PAGODA_* variables, flags): anything but a
// whole decimal integer in range is an error naming the setting. atoi's "garbage is 0"
// silently turned a typo into a different configuration in a benchmark row.
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

}  // namespace pagoda
