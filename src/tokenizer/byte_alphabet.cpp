#include "tokenizer/byte_alphabet.h"

#include <array>

#include "tokenizer/unicode.h"

namespace pagoda::byte_alphabet {
namespace {

constexpr uint32_t kCharLimit = 256 + 68;  // every character of the alphabet is below this

struct Tables {
  std::array<uint32_t, 256> chars{};
  std::array<std::string, 256> utf8;
  std::array<int16_t, kCharLimit> byte_of{};  // -1: not in the alphabet
  Tables() {
    // Printable Latin-1 bytes stand for themselves; the other 68 bytes take the code
    // points from U+0100 upwards, in byte order.
    const auto printable = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    uint32_t next = 256;
    byte_of.fill(-1);
    for (int b = 0; b < 256; ++b) {
      chars[b] = printable(b) ? static_cast<uint32_t>(b) : next++;
      utf8[b] = unicode::to_utf8(chars[b]);
      byte_of[chars[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

uint32_t char_of_byte(uint8_t byte) {
  return tables().chars[byte];
}
const std::string& utf8_of_byte(uint8_t byte) {
  return tables().utf8[byte];
}

std::optional<uint8_t> byte_of_char(uint32_t cpt) {
  if (cpt >= kCharLimit || tables().byte_of[cpt] < 0) return std::nullopt;
  return static_cast<uint8_t>(tables().byte_of[cpt]);
}

void encode(std::string_view bytes, std::string* out) {
  const auto& utf8 = tables().utf8;
  for (char c : bytes) out->append(utf8[static_cast<uint8_t>(c)]);
}

}  // namespace pagoda::byte_alphabet
