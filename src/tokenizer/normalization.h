// Unicode normalization (UAX #15: NFC, NFD, NFKC, NFKD) and lowercasing, for the
// tokenizer.json normalizers of the same names. Unicode 15.1, as the rest of the tokenizer.
//
// Text that is not valid UTF-8 keeps its undecodable bytes as they are: each acts as a
// starter that nothing composes with, so ids stay defined on any input.
#pragma once

#include <string>
#include <string_view>

namespace pagoda::unicode {

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

// Whether `text` is certainly in `form` by the quick check of UAX #15 (false also for
// "maybe"). Costs one pass over ASCII and one table look-up per other character.
bool is_normalized_quick(std::string_view text, NormalForm form);

// `text` in `form`. Text the quick check passes comes back as it is.
std::string normalize(std::string_view text, NormalForm form);

// Each character's full lowercase mapping, character by character (as Rust's
// char::to_lowercase, which Hugging Face's Lowercase normalizer applies): no final-sigma
// rule, so "ΟΔΟΣ" becomes "οδοσ"; U+0130 becomes "i" U+0307.
std::string to_lower(std::string_view text);

}  // namespace pagoda::unicode
