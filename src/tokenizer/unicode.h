// Code point classification and UTF-8 handling for the tokenizers. Decoding is deliberately
// lenient in the way llama.cpp is (each undecodable byte becomes U+FFFD and nothing else is
// validated), because token ids must match llama.cpp's on any input, malformed ones included.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::unicode {

// General-category flags (one per code point) plus the White_Space property.
enum CptFlag : uint16_t {
  kUndefined = 0x01,  // unassigned (Cn)
  kNumber = 0x02,     // \p{N}
  kLetter = 0x04,     // \p{L}
  kSeparator = 0x08,  // \p{Z}
  kMark = 0x10,       // \p{M}
  kPunctuation = 0x20,
  kSymbol = 0x40,
  kControl = 0x80,  // \p{C} other than Cn
  kCategoryMask = 0xFF,
  kWhitespace = 0x100,
};

struct CptRange {
  uint32_t start;
  uint16_t flags;
};
// Generated table (unicode_data.cpp): runs of code points sharing their category flags.
extern const CptRange kCptRanges[];
extern const size_t kCptRangeCount;

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kReplacementChar = 0xFFFD;

// Flags of `cpt`; anything past U+10FFFF is undefined.
uint16_t flags(uint32_t cpt);
inline bool is_whitespace(uint32_t cpt) {
  return flags(cpt) & kWhitespace;
}

// Byte length of the UTF-8 sequence that `lead` starts, judged by its top four bits only
// (continuation bytes count as 1), as SentencePiece and llama.cpp split text.
inline size_t utf8_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// Decodes one code point at `*offset` and advances past it. A byte that does not start a
// complete sequence decodes to U+FFFD and advances by one.
uint32_t decode_one(std::string_view text, size_t* offset);
std::vector<uint32_t> decode(std::string_view text);
// Appends the UTF-8 encoding of `cpt` (four-byte pattern for anything above U+FFFF).
void append_utf8(std::string* out, uint32_t cpt);
std::string to_utf8(uint32_t cpt);

}  // namespace pagoda::unicode
