// GPT-2's reversible byte-to-character alphabet: byte-level BPE vocabularies store every
// token as a string over 256 printable code points, one per byte, so that a vocabulary
// never contains raw spaces, control bytes or partial UTF-8.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pagoda::byte_alphabet {

// The code point that stands for `byte`.
uint32_t char_of_byte(uint8_t byte);
// UTF-8 of char_of_byte(byte).
const std::string& utf8_of_byte(uint8_t byte);
// The byte a code point stands for, if it is one of the 256.
std::optional<uint8_t> byte_of_char(uint32_t cpt);

// Maps every byte of `bytes` to its character (UTF-8), appending to `out`.
void encode(std::string_view bytes, std::string* out);

}  // namespace pagoda::byte_alphabet
