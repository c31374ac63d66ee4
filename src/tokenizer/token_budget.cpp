#include "tokenizer/token_budget.h"

#include <algorithm>
#include <string>

#include "core/status.h"
#include "tokenizer/byte_alphabet.h"

namespace pagoda {

size_t LengthBound::min_tokens(std::string_view text) const {
  if (max_bytes_per_token == 0) return 0;
  size_t counted = text.size();
  if (any_may_vanish)
    for (char c : text) counted -= may_vanish[static_cast<uint8_t>(c)];
  return (counted + max_bytes_per_token - 1) / max_bytes_per_token;
}

LengthBound length_bound(const Vocab& vocab) {
  LengthBound none, b;
  // A tokenizer.json's BPE may fuse a run of unknown characters into one token, and its
  // normalizer rewrites the text first: no bound from the raw length holds.
  if (vocab.hf_bpe) return none;
  // A symbol left unmerged is one character of at most 4 bytes.
  b.max_bytes_per_token = 4;
  for (const TokenData& t : vocab.tokens)
    b.max_bytes_per_token = std::max(b.max_bytes_per_token, t.text.size());
  if (vocab.type == VocabType::kSpm) {
    // Merges only make tokens; a leftover symbol that is not one falls back to one id per
    // byte: <0xXX>, else the byte itself, else <unk>. Without <unk> and with a <0xXX>
    // missing, a byte could give nothing.
    if (vocab.unk >= 0) return b;
    for (int c = 0; c < 256; ++c)
      if (!vocab.find(str_format("<0x%02X>", c))) return none;
    return b;
  }
  // Byte-level BPE: a leftover symbol that is not a token falls back to the single-byte
  // tokens among its bytes. Symbols are merge results or single characters of the byte
  // alphabet, so with every merge making a token only a byte without a token can vanish.
  std::string merged;
  for (const auto& [key, rank] : vocab.merge_ranks) {
    const size_t nl = key.find('\n');
    merged.assign(key, 0, nl);
    if (nl != std::string::npos) merged.append(key, nl + 1, std::string::npos);
    if (!vocab.find(merged)) return none;
  }
  for (int c = 0; c < 256; ++c) {
    b.may_vanish[static_cast<size_t>(c)] =
        !vocab.find(byte_alphabet::utf8_of_byte(static_cast<uint8_t>(c)));
    b.any_may_vanish = b.any_may_vanish || b.may_vanish[static_cast<size_t>(c)];
  }
  return b;
}

}  // namespace pagoda
