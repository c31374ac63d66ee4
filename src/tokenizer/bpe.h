// Byte-level BPE encoding ("gpt2" vocabularies): each pre-tokenized word is mapped to the
// GPT-2 byte alphabet and its characters are merged pairwise by merge rank.
#pragma once

#include <string_view>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab.h"

namespace pagoda {

// Pre-tokenizes and encodes `text` (raw UTF-8), appending ids to `out`.
void bpe_encode(const Vocab& vocab, const PreTokenizer& pre, std::string_view text,
                std::vector<TokenId>* out);

}  // namespace pagoda
