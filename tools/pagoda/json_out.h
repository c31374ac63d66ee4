// Minimal JSON writing for the CLI's --json output.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace pagoda::cli {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not valid.
inline size_t utf8_valid_len(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  if (n == 2 && c < 0xC2) return 0;                       // overlong
  if (n == 3 && c == 0xE0 && b(i + 1) < 0xA0) return 0;   // overlong
  if (n == 3 && c == 0xED && b(i + 1) >= 0xA0) return 0;  // surrogate
  if (n == 4 && ((c == 0xF0 && b(i + 1) < 0x90) || c > 0xF4 || (c == 0xF4 && b(i + 1) >= 0x90)))
    return 0;
  return n;
}

// A JSON string literal. Generated text can end mid-character or hold stray bytes (byte
// tokens); JSON must be valid UTF-8, so each invalid byte becomes U+FFFD, as Python's
// errors="replace" and llama.cpp's server do.
inline std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_valid_len(s, i);
    if (n == 0) {
      o += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    if (n > 1) {
      o.append(s, i, n);
      i += n;
      continue;
    }
    const unsigned char c = static_cast<unsigned char>(s[i++]);
    switch (c) {
      case '"':
        o += "\\\"";
        break;
      case '\\':
        o += "\\\\";
        break;
      case '\n':
        o += "\\n";
        break;
      case '\r':
        o += "\\r";
        break;
      case '\t':
        o += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          o += buf;
        } else {
          o += static_cast<char>(c);
        }
    }
  }
  return o + "\"";
}

template <typename T>
std::string json_array(const std::vector<T>& v) {
  std::string o = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) o += ",";
    if constexpr (std::is_floating_point_v<T>) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(v[i]));
      o += buf;
    } else {
      o += std::to_string(v[i]);
    }
  }
  return o + "]";
}

}  // namespace pagoda::cli
