#include "tokenizer/special_tokens.h"

namespace pagoda {
namespace {

// isspace() in the "C" locale, which is what llama.cpp's stripping uses.
bool is_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

}  // namespace

std::vector<Fragment> split_special_tokens(const Vocab& vocab, std::string_view text,
                                           bool parse_special) {
  std::vector<Fragment> frags, next;
  if (text.empty()) return frags;
  frags.push_back({-1, 0, text.size()});
  for (TokenId id : vocab.special_tokens) {
    const TokenData& tok = vocab.tokens[static_cast<size_t>(id)];
    if (!parse_special && (tok.attr & (kAttrControl | kAttrUnknown))) continue;
    const std::string_view needle = tok.text;
    bool found_any = false;
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t pos = f.offset;
      const size_t end = f.offset + f.length;
      while (true) {
        const size_t m = text.substr(0, end).find(needle, pos);
        if (m == std::string_view::npos) {
          if (pos < end) next.push_back({-1, pos, end - pos});
          break;
        }
        found_any = true;
        size_t left_end = m;
        if (tok.attr & kAttrLstrip)
          while (left_end > pos && is_space(text[left_end - 1])) --left_end;
        if (left_end > pos) next.push_back({-1, pos, left_end - pos});
        next.push_back({id, 0, 0});
        pos = m + needle.size();
        if (tok.attr & kAttrRstrip)
          while (pos < end && is_space(text[pos])) ++pos;
      }
    }
    if (found_any) frags.swap(next);
  }
  return frags;
}

}  // namespace pagoda
