// Splitting special tokens out of text before tokenization (llama.cpp's
// tokenizer_st_partition): each special token, longest first, is searched for in every
// piece of text still unclaimed, and each occurrence becomes that token.
#pragma once

#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace pagoda {

struct Fragment {
  TokenId token = -1;  // >= 0: a special token; -1: text [offset, offset + length)
  size_t offset = 0;
  size_t length = 0;
};

// Control and unknown tokens are split out only with `parse_special`; user-defined tokens
// always are (Hugging Face tokenizers treat added tokens the same way).
std::vector<Fragment> split_special_tokens(const Vocab& vocab, std::string_view text,
                                           bool parse_special);

}  // namespace pagoda
