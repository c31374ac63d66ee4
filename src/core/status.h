// Status and Result are public (include/pagoda/status.h); str_format is the tree's own.
#pragma once

#include <cstdio>
#include <string>

#include "pagoda/status.h"

namespace pagoda {

template <typename... Args>
std::string str_format(const char* fmt, Args... args) {
  int n = std::snprintf(nullptr, 0, fmt, args...);
  std::string s(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::snprintf(s.data(), s.size() + 1, fmt, args...);
  return s;
}

}  // namespace pagoda
