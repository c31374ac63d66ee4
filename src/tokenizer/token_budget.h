// How many tokens an encoding may produce before it stops (Tokenizer::encode_bounded): a
// server refuses a prompt longer than the context, and encoding all of a 10 MB prompt to
// learn that took seconds of CPU.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tokenizer/vocab.h"

namespace pagoda {

// The fewest tokens a vocabulary can encode a text to, from the text's length: a text with
// nowhere to stop inside (one 10 MB word) is refused without being encoded.
struct LengthBound {
  // No token stands for more bytes than this; 0 when the vocabulary promises no bound.
  size_t max_bytes_per_token = 0;
  // Bytes that can encode to no token at all (a byte-level BPE vocabulary may lack some of
  // the 256 byte tokens): the bound does not count them.
  std::array<bool, 256> may_vanish{};
  bool any_may_vanish = false;

  // At least this many tokens encode `text` (raw bytes, as the encoder is given them).
  size_t min_tokens(std::string_view text) const;
};

// The bound for a vocabulary. Every leftover symbol of an encoding must give at least one
// token: SentencePiece falls back to byte tokens or <unk>, byte-level BPE to the byte tokens
// a vocabulary has, and its merges must all make tokens.
LengthBound length_bound(const Vocab& vocab);

struct TokenBudget {
  size_t max_tokens = SIZE_MAX;  // more ids than this in the output: stop
  const LengthBound* bound = nullptr;

  bool exceeded(size_t n_out) const { return n_out > max_tokens; }
  // Whether `n_out` ids so far plus `text` still to encode cannot fit.
  bool cannot_fit(size_t n_out, std::string_view text) const {
    if (max_tokens == SIZE_MAX || !bound) return exceeded(n_out);
    return n_out + bound->min_tokens(text) > max_tokens;
  }
};

}  // namespace pagoda
