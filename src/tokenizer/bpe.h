// Byte-level BPE encoding ("gpt2" vocabularies): each pre-tokenized word is mapped to the
// GPT-2 byte alphabet and its characters are merged pairwise by merge rank.
#pragma once

#include <string_view>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/token_budget.h"
#include "tokenizer/vocab.h"

namespace pagoda {

// Pre-tokenizes and encodes `text` (raw UTF-8), appending ids to `out`, word by word. Stops
// and returns false once `out` is over the budget or the next word cannot fit in it; `out`
// then holds a prefix of the encoding.
bool bpe_encode(const Vocab& vocab, const PreTokenizer& pre, std::string_view text,
                std::vector<TokenId>* out, const TokenBudget& budget = {});

// Merges one word already in the vocabulary's alphabet (byte-mapped for byte-level BPE, raw
// UTF-8 for Hugging Face's character-level BPE) and appends its ids.
void bpe_encode_word(const Vocab& vocab, std::string_view word, std::vector<TokenId>* out);

}  // namespace pagoda
