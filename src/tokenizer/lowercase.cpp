// to_lower (declared in normalization.h): lowercasing is the other normalizer that needs
// Unicode tables, and it shares their generated file.
#include <algorithm>

#include "tokenizer/normalization.h"
#include "tokenizer/normalization_tables.h"
#include "tokenizer/unicode.h"

namespace pagoda::unicode {
namespace {

// Appends the lowercase of `c` and returns true, or returns false when it has none.
bool append_lower(uint32_t c, std::string* out) {
  const CaseMapping* end = kLowercase + kLowercaseCount;
  const CaseMapping* m = std::lower_bound(
      kLowercase, end, c, [](const CaseMapping& e, uint32_t v) { return e.cpt < v; });
  if (m != end && m->cpt == c) {
    append_utf8(out, m->lower);
    return true;
  }
  for (size_t k = 0; k < kLowercaseLongCount; ++k) {
    if (kLowercaseLong[k].cpt != c) continue;
    for (uint32_t j = 0; j < kLowercaseLong[k].length; ++j)
      append_utf8(out, kLowercaseLong[k].lower[j]);
    return true;
  }
  return false;
}

size_t utf8_size(uint32_t c) {
  return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

}  // namespace

std::string to_lower(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const char b = text[i];
    if (static_cast<uint8_t>(b) < 0x80) {
      out.push_back(b >= 'A' && b <= 'Z' ? static_cast<char>(b - 'A' + 'a') : b);
      ++i;
      continue;
    }
    const size_t start = i;
    const uint32_t c = decode_one(text, &i);
    // Only a well-formed sequence is mapped (an overlong one would not encode back to itself);
    // anything else keeps its bytes.
    if (utf8_size(c) == i - start && c != kReplacementChar && append_lower(c, &out)) continue;
    out.append(text, start, i - start);
  }
  return out;
}

}  // namespace pagoda::unicode
