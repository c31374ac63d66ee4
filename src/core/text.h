// Small text helpers shared across layers.
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace pagoda {

// ASCII lower case (names, flags, file types); other bytes are left as they are.
inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace pagoda
