// SentencePiece-style encoding ("llama" vocabularies): greedy merging of adjacent pieces by
// score, with byte fallback for anything left that is not a token.
#pragma once

#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace pagoda {

// Encodes text whose spaces are already escaped as U+2581, appending ids to `out`.
void spm_encode(const Vocab& vocab, std::string_view text, std::vector<TokenId>* out);

// Whether text may be cut before a space (see spm_next_cut) and each part encoded alone with
// the same result: true when no token holds U+2581 other than at its start or after another
// U+2581 (SentencePiece splits at whitespace, so its vocabularies have none), since then no
// merge can join the text left of such a cut with the U+2581 right of it.
bool spm_cuts_before_spaces(const Vocab& vocab);
// The first place at or after `from` where `text` (raw: spaces not yet escaped) can be cut:
// a space whose previous byte is ASCII other than a space, with no multi-byte lead byte in
// the three before that, so that the cut is where a symbol starts whichever way the text
// before it splits into characters. text.size() when there is none.
size_t spm_next_cut(std::string_view text, size_t from);

}  // namespace pagoda
