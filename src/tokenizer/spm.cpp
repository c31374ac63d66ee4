#include "tokenizer/spm.h"

#include <algorithm>
#include <map>
#include <queue>
#include <string>

#include "core/status.h"
#include "tokenizer/merge_symbols.h"
#include "tokenizer/unicode.h"

namespace pagoda {
namespace {

using tokenizer_detail::Symbol;
using Bigram = tokenizer_detail::Bigram<float>;

// Highest score first; among equal scores the leftmost pair, so results are deterministic.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.priority < b.priority || (a.priority == b.priority && a.left > b.left);
  }
};

class SpmSession {
 public:
  SpmSession(const Vocab& vocab, std::string_view text) : vocab_(vocab), text_(text) {}

  void encode(std::vector<TokenId>* out) {
    append_char_symbols(text_, &symbols_);
    for (int i = 1; i < static_cast<int>(symbols_.size()); ++i) try_add(i - 1, i);

    while (!queue_.empty()) {
      const Bigram b = queue_.top();
      queue_.pop();
      Symbol& l = symbols_[static_cast<size_t>(b.left)];
      Symbol& r = symbols_[static_cast<size_t>(b.right)];
      // Stale: one side already merged elsewhere.
      if (l.length == 0 || r.length == 0 || l.length + r.length != b.length) continue;
      l.length += r.length;
      r.length = 0;
      l.next = r.next;
      if (r.next >= 0) symbols_[static_cast<size_t>(r.next)].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
    if (symbols_.empty()) return;
    for (int i = 0; i != -1; i = symbols_[static_cast<size_t>(i)].next)
      resegment(symbols_[static_cast<size_t>(i)], out);
  }

 private:
  std::string_view piece(const Symbol& s) const { return text_.substr(s.offset, s.length); }

  void try_add(int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols_[static_cast<size_t>(left)];
    const Symbol& r = symbols_[static_cast<size_t>(right)];
    const std::string_view merged = text_.substr(l.offset, l.length + r.length);
    const auto id = vocab_.find(merged);
    if (!id) return;
    queue_.push({left, right, vocab_.tokens[static_cast<size_t>(*id)].score, merged.size()});
    // Remembers how this text was formed, for pieces that end up not being tokens.
    rev_merge_[std::string(merged)] = {left, right};
  }

  void resegment(const Symbol& s, std::vector<TokenId>* out) {
    const std::string_view text = piece(s);
    if (auto id = vocab_.find(text)) {
      out->push_back(*id);
      return;
    }
    auto it = rev_merge_.find(text);
    if (it == rev_merge_.end()) {
      for (char c : text) push_byte(static_cast<uint8_t>(c), out);
      return;
    }
    resegment(symbols_[static_cast<size_t>(it->second.first)], out);
    resegment(symbols_[static_cast<size_t>(it->second.second)], out);
  }

  // Byte fallback: <0xXX>, else the byte itself as a token, else <unk> (llama.cpp would
  // throw here; a vocabulary without byte tokens cannot represent the byte otherwise).
  void push_byte(uint8_t byte, std::vector<TokenId>* out) {
    const std::string hex = str_format("<0x%02X>", byte);
    if (auto id = vocab_.find(hex)) {
      out->push_back(*id);
    } else if (auto raw = vocab_.find(std::string_view(reinterpret_cast<const char*>(&byte), 1))) {
      out->push_back(*raw);
    } else if (vocab_.unk >= 0) {
      out->push_back(vocab_.unk);
    }
  }

  const Vocab& vocab_;
  std::string_view text_;
  std::vector<Symbol> symbols_;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue_;
  std::map<std::string, std::pair<int, int>, std::less<>> rev_merge_;
};

}  // namespace

void spm_encode(const Vocab& vocab, std::string_view text, std::vector<TokenId>* out) {
  SpmSession(vocab, text).encode(out);
}

bool spm_cuts_before_spaces(const Vocab& vocab) {
  constexpr std::string_view kMarker = "\xE2\x96\x81";  // U+2581
  for (const TokenData& t : vocab.tokens) {
    const std::string_view text = t.text;
    for (size_t i = text.find(kMarker, 1); i != std::string_view::npos;
         i = text.find(kMarker, i + 1))
      if (i < kMarker.size() || text.substr(i - kMarker.size(), kMarker.size()) != kMarker)
        return false;
  }
  return true;
}

size_t spm_next_cut(std::string_view text, size_t from) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  for (size_t b = std::max<size_t>(from, 1); b < text.size(); ++b) {
    if (text[b] != ' ' || byte(b - 1) >= 0x80 || text[b - 1] == ' ') continue;
    // A lead byte up to three back could start a character that runs past b - 1.
    bool aligned = true;
    for (size_t j = b >= 4 ? b - 4 : 0; j + 1 < b; ++j) aligned = aligned && byte(j) < 0xC0;
    if (aligned) return b;
  }
  return text.size();
}

}  // namespace pagoda
