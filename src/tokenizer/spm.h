// SentencePiece-style encoding ("llama" vocabularies): greedy merging of adjacent pieces by
// score, with byte fallback for anything left that is not a token.
#pragma once

#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace pagoda {

// Encodes text whose spaces are already escaped as U+2581, appending ids to `out`.
void spm_encode(const Vocab& vocab, std::string_view text, std::vector<TokenId>* out);

}  // namespace pagoda
