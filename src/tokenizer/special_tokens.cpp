#include "tokenizer/special_tokens.h"

#include "tokenizer/unicode.h"

namespace pagoda {
namespace {

// isspace() in the "C" locale, which is what llama.cpp's stripping uses.
bool is_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

// Length of the whitespace character that ends text[begin, end) (0 if none): Unicode's
// White_Space, as Hugging Face's tokenizers strips around added tokens.
size_t unicode_space_before(std::string_view text, size_t begin, size_t end) {
  size_t start = end;
  while (start > begin && end - start < 4) {
    --start;
    if ((static_cast<uint8_t>(text[start]) & 0xC0) != 0x80) break;
  }
  size_t off = start;
  const uint32_t cpt = unicode::decode_one(text.substr(0, end), &off);
  return off == end && unicode::is_whitespace(cpt) ? end - start : 0;
}

size_t unicode_space_after(std::string_view text, size_t pos, size_t end) {
  size_t off = pos;
  const uint32_t cpt = unicode::decode_one(text.substr(0, end), &off);
  return unicode::is_whitespace(cpt) ? off - pos : 0;
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
        if ((tok.attr & kAttrLstrip) && vocab.unicode_strip) {
          while (left_end > pos)
            if (const size_t n = unicode_space_before(text, pos, left_end))
              left_end -= n;
            else
              break;
        } else if (tok.attr & kAttrLstrip) {
          while (left_end > pos && is_space(text[left_end - 1])) --left_end;
        }
        if (left_end > pos) next.push_back({-1, pos, left_end - pos});
        next.push_back({id, 0, 0});
        pos = m + needle.size();
        if ((tok.attr & kAttrRstrip) && vocab.unicode_strip) {
          while (pos < end)
            if (const size_t n = unicode_space_after(text, pos, end))
              pos += n;
            else
              break;
        } else if (tok.attr & kAttrRstrip) {
          while (pos < end && is_space(text[pos])) ++pos;
        }
      }
    }
    if (found_any) frags.swap(next);
  }
  return frags;
}

}  // namespace pagoda
