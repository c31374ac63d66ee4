#include "tokenizer/unicode.h"

#include <algorithm>

namespace pagoda::unicode {
namespace {

// White_Space property from PropList.txt.
bool white_space_property(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// One entry per code point: the splitters ask for flags of every character of every
// input, so a binary search per character would dominate encoding time.
std::vector<uint16_t> build_table() {
  std::vector<uint16_t> table(kMaxCodePoint + 1, kUndefined);
  for (size_t k = 0; k < kCptRangeCount; ++k) {
    const uint32_t end = k + 1 < kCptRangeCount ? kCptRanges[k + 1].start : kMaxCodePoint + 1;
    std::fill(table.begin() + kCptRanges[k].start, table.begin() + end, kCptRanges[k].flags);
  }
  for (uint32_t c = 0; c <= 0x3000; ++c)
    if (white_space_property(c)) table[c] |= kWhitespace;
  return table;
}

}  // namespace

uint16_t flags(uint32_t cpt) {
  static const std::vector<uint16_t> table = build_table();
  return cpt <= kMaxCodePoint ? table[cpt] : static_cast<uint16_t>(kUndefined);
}

uint32_t decode_one(std::string_view text, size_t* offset) {
  const size_t i = *offset;
  const auto b = [&](size_t k) { return static_cast<uint8_t>(text[i + k]); };
  const auto cont = [&](size_t k) { return i + k < text.size() && (b(k) & 0xC0) == 0x80; };
  const uint8_t lead = b(0);
  if (lead < 0x80) {
    *offset = i + 1;
    return lead;
  }
  if ((lead & 0xE0) == 0xC0 && cont(1)) {
    *offset = i + 2;
    return (static_cast<uint32_t>(lead & 0x1F) << 6) | (b(1) & 0x3F);
  }
  if ((lead & 0xF0) == 0xE0 && cont(1) && cont(2)) {
    *offset = i + 3;
    return (static_cast<uint32_t>(lead & 0x0F) << 12) | (static_cast<uint32_t>(b(1) & 0x3F) << 6) |
           (b(2) & 0x3F);
  }
  if ((lead & 0xF8) == 0xF0 && cont(1) && cont(2) && cont(3)) {
    *offset = i + 4;
    return (static_cast<uint32_t>(lead & 0x07) << 18) | (static_cast<uint32_t>(b(1) & 0x3F) << 12) |
           (static_cast<uint32_t>(b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
  *offset = i + 1;
  return kReplacementChar;
}

std::vector<uint32_t> decode(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  size_t offset = 0;
  while (offset < text.size()) out.push_back(decode_one(text, &offset));
  return out;
}

void append_utf8(std::string* out, uint32_t cpt) {
  if (cpt <= 0x7F) {
    out->push_back(static_cast<char>(cpt));
  } else if (cpt <= 0x7FF) {
    out->push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0xFFFF) {
    out->push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    // Lenient decoding can yield values up to 0x1FFFFF; re-encoding them with the same
    // four-byte pattern gives back the input bytes.
    out->push_back(static_cast<char>(0xF0 | ((cpt >> 18) & 0x07)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
}

std::string to_utf8(uint32_t cpt) {
  std::string s;
  append_utf8(&s, cpt);
  return s;
}

}  // namespace pagoda::unicode
