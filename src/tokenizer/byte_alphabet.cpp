#include "tokenizer/byte_alphabet.h"

#include <array>

#include "tokenizer/unicode.h"

namespace pagoda::byte_alphabet {
namespace {

struct Tables {
  std::array<uint32_t, 256> chars{};
  std::array<std::string, 256> utf8;
  Tables() {
    // Printable Latin-1 bytes stand for themselves; the other 68 bytes take the code
    // points from U+0100 upwards, in byte order.
    const auto printable = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      chars[b] = printable(b) ? static_cast<uint32_t>(b) : next++;
      utf8[b] = unicode::to_utf8(chars[b]);
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
  if (cpt < 256) {
    const bool printable =
        (cpt >= 0x21 && cpt <= 0x7E) || (cpt >= 0xA1 && cpt <= 0xAC) || (cpt >= 0xAE);
    if (printable) return static_cast<uint8_t>(cpt);
    return std::nullopt;
  }
  if (cpt < 256 + 68) {
    const auto& chars = tables().chars;
    for (int b = 0; b < 256; ++b)
      if (chars[b] == cpt) return static_cast<uint8_t>(b);
  }
  return std::nullopt;
}

void encode(std::string_view bytes, std::string* out) {
  const auto& utf8 = tables().utf8;
  for (char c : bytes) out->append(utf8[static_cast<uint8_t>(c)]);
}

}  // namespace pagoda::byte_alphabet
