// The pieces BPE and SentencePiece both merge: symbols in a linked list over the text, and
// the queued pairs of neighbours, ordered by the vocabulary's rank (BPE) or score (SPM).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <vector>

#include "tokenizer/unicode.h"

namespace pagoda::tokenizer_detail {

struct Symbol {
  int prev;
  int next;
  size_t offset;
  size_t length;  // 0 once merged into its left neighbour
};

// `Priority`: the merge rank (BPE, lower first) or the token score (SPM, higher first).
template <typename Priority>
struct Bigram {
  int left;
  int right;
  Priority priority;
  size_t length;  // of left + right when the pair was queued
};

// Appends one symbol per UTF-8 character of `text` (its length judged by the lead byte
// alone), linked to its neighbours.
inline void append_char_symbols(std::string_view text, std::vector<Symbol>* symbols) {
  for (size_t off = 0; off < text.size();) {
    const size_t n =
        std::min(unicode::utf8_len(static_cast<uint8_t>(text[off])), text.size() - off);
    const int index = static_cast<int>(symbols->size());
    symbols->push_back({index - 1, off + n == text.size() ? -1 : index + 1, off, n});
    off += n;
  }
}

}  // namespace pagoda::tokenizer_detail
