#include "tokenizer/bpe.h"

#include <queue>
#include <string>

#include "core/status.h"
#include "tokenizer/byte_alphabet.h"
#include "tokenizer/merge_symbols.h"
#include "tokenizer/unicode.h"

namespace pagoda {
namespace {

using tokenizer_detail::Symbol;
using Bigram = tokenizer_detail::Bigram<int32_t>;

// Lowest rank first; among equal ranks the leftmost pair.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.priority > b.priority || (a.priority == b.priority && a.left > b.left);
  }
};

class BpeWord {
 public:
  BpeWord(const Vocab& vocab, std::string* key) : vocab_(vocab), key_(*key) {}

  void encode(std::string_view word, bool ignore_merges, std::vector<TokenId>* out) {
    word_ = word;
    symbols_.clear();
    if (ignore_merges) {
      if (auto id = vocab_.find(word)) {
        out->push_back(*id);
        return;
      }
    }
    append_char_symbols(word, &symbols_);
    for (int i = 1; i < static_cast<int>(symbols_.size()); ++i) try_add(i - 1, i);
    while (!queue_.empty()) {
      const Bigram b = queue_.top();
      queue_.pop();
      Symbol& l = symbols_[static_cast<size_t>(b.left)];
      Symbol& r = symbols_[static_cast<size_t>(b.right)];
      // Stale: a side was merged away or grew since the pair was queued (lengths only
      // grow, so an unchanged total means the pair is the one that was queued).
      if (l.length == 0 || r.length == 0 || l.length + r.length != b.length || l.next != b.right)
        continue;
      l.length += r.length;
      r.length = 0;
      l.next = r.next;
      if (r.next >= 0) symbols_[static_cast<size_t>(r.next)].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
    bool after_unk = false;
    for (const Symbol& s : symbols_) {
      if (s.length == 0) continue;
      const std::string_view piece = word_.substr(s.offset, s.length);
      if (auto id = vocab_.find(piece)) {
        out->push_back(*id);
        after_unk = false;
        continue;
      }
      if (vocab_.hf_bpe) {
        after_unk = push_unknown_hf(piece, after_unk, out);
        continue;
      }
      // Not a token: llama.cpp falls back to single bytes of the encoded piece, which are
      // only tokens for ASCII characters; the rest is dropped.
      for (char c : piece)
        if (auto id = vocab_.find(std::string_view(&c, 1))) out->push_back(*id);
    }
  }

 private:
  // A symbol that is not a token is one character no merge can touch (merges join tokens).
  // Hugging Face's BPE writes it as its bytes' <0xXX> tokens under byte_fallback when all
  // exist, else as the unknown token (one for a run of them with fuse_unk), else drops it.
  // Returns whether the unknown token ends the output.
  bool push_unknown_hf(std::string_view piece, bool after_unk, std::vector<TokenId>* out) {
    if (vocab_.byte_fallback) {
      std::vector<TokenId> bytes;
      for (char c : piece) {
        auto id = vocab_.find(str_format("<0x%02X>", static_cast<uint8_t>(c)));
        if (!id) break;
        bytes.push_back(*id);
      }
      if (bytes.size() == piece.size()) {
        out->insert(out->end(), bytes.begin(), bytes.end());
        return false;
      }
    }
    if (vocab_.bpe_unk < 0) return after_unk;
    if (!(vocab_.fuse_unk && after_unk)) out->push_back(vocab_.bpe_unk);
    return true;
  }

  void try_add(int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols_[static_cast<size_t>(left)];
    const Symbol& r = symbols_[static_cast<size_t>(right)];
    key_.assign(word_.substr(l.offset, l.length));
    key_.push_back('\n');
    key_.append(word_.substr(r.offset, r.length));
    auto it = vocab_.merge_ranks.find(key_);
    if (it == vocab_.merge_ranks.end()) return;
    queue_.push({left, right, it->second, l.length + r.length});
  }

  const Vocab& vocab_;
  std::string& key_;
  std::string_view word_;
  std::vector<Symbol> symbols_;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue_;
};

}  // namespace

void bpe_encode_word(const Vocab& vocab, std::string_view word, std::vector<TokenId>* out) {
  std::string key;
  BpeWord(vocab, &key).encode(word, vocab.pre.ignore_merges, out);
}

bool bpe_encode(const Vocab& vocab, const PreTokenizer& pre, std::string_view text,
                std::vector<TokenId>* out, const TokenBudget& budget) {
  std::string key, encoded;
  BpeWord bpe(vocab, &key);
  return pre.for_each_word(text, [&](std::string_view word) {
    if (budget.cannot_fit(out->size(), word)) return false;
    encoded.clear();
    byte_alphabet::encode(word, &encoded);
    bpe.encode(encoded, vocab.pre.ignore_merges, out);
    return !budget.exceeded(out->size());
  });
}

}  // namespace pagoda
