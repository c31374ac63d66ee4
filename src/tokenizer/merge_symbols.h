// The pieces BPE and SentencePiece both merge: symbols in a linked list over the text, and
// the queued pairs of neighbours, ordered by the vocabulary's rank (BPE) or score (SPM).
#pragma once

#include <cstddef>

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

}  // namespace pagoda::tokenizer_detail
