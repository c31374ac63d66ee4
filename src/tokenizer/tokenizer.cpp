#include "tokenizer/tokenizer.h"

#include <cstdint>
#include <cstdlib>

#include "tokenizer/bpe.h"
#include "tokenizer/byte_alphabet.h"
#include "tokenizer/hf_vocab.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/spm.h"
#include "tokenizer/token_budget.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace pagoda {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581, SentencePiece's space

void replace_all(std::string* s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s->size());
  size_t pos = 0;
  while (true) {
    const size_t m = s->find(from, pos);
    if (m == std::string::npos) break;
    out.append(*s, pos, m - pos);
    out.append(to);
    pos = m + from.size();
  }
  out.append(*s, pos, std::string::npos);
  s->swap(out);
}

// The byte a <0xXX> token stands for (lenient like strtol on the two hex digits).
char byte_of_token(std::string_view text) {
  const std::string hex(text.size() > 3 ? text.substr(3, 2) : std::string_view());
  return static_cast<char>(std::strtol(hex.c_str(), nullptr, 16));
}

// Inverse of the GPT-2 byte alphabet. A character outside it cannot come from bytes; it is
// rendered the way llama.cpp renders it so that output stays comparable.
std::string bytes_of_bpe_token(std::string_view text) {
  std::string out;
  size_t off = 0;
  while (off < text.size()) {
    const uint32_t cpt = unicode::decode_one(text, &off);
    if (auto b = byte_alphabet::byte_of_char(cpt)) {
      out.push_back(static_cast<char>(*b));
      continue;
    }
    out += "[UNK_BYTE_0x";
    const std::string utf8 = unicode::to_utf8(cpt);
    for (char c : utf8) out += str_format("%02x", static_cast<uint8_t>(c));
    out += std::string(text) + "]";
  }
  return out;
}

class GgufTokenizer final : public Tokenizer {
 public:
  // `hf`: the vocabulary came from a tokenizer.json, whose steps encode ordinary text.
  GgufTokenizer(Vocab vocab, std::optional<PreTokenizer> pre,
                std::shared_ptr<const HfTextSteps> hf = nullptr)
      : vocab_(std::move(vocab)), pre_(std::move(pre)), hf_(std::move(hf)) {
    // All pieces back to back, with start offsets (the top bit marks pieces hidden
    // unless rendering special tokens): the engine looks up a piece for every generated
    // token, and a table of separate strings cost it three cache misses (the token's
    // record, the string, its bytes) where this costs about one.
    piece_start_.reserve(vocab_.tokens.size() + 1);
    for (TokenId id = 0; id < vocab_.n_tokens(); ++id) {
      const bool hidden = vocab_.attr(id) & (kAttrControl | kAttrUnknown);
      piece_start_.push_back(static_cast<uint32_t>(pieces_.size()) | (hidden ? kHidden : 0u));
      pieces_ += render(id);  // from_gguf checked the total fits 31 bits
    }
    piece_start_.push_back(static_cast<uint32_t>(pieces_.size()));
  }

  std::vector<TokenId> encode(std::string_view text, bool add_special,
                              bool parse_special) const override {
    return encode_bounded(text, add_special, parse_special, SIZE_MAX).ids;
  }

  BoundedEncoding encode_bounded(std::string_view text, bool add_special, bool parse_special,
                                 size_t max_tokens) const override {
    BoundedEncoding r;
    std::vector<TokenId>& out = r.ids;
    const TokenBudget budget{max_tokens, &length_bound_};
    const std::vector<Fragment> frags = split_special_tokens(vocab_, text, parse_special);
    if (add_special && vocab_.add_bos) out.push_back(vocab_.bos);
    // SentencePiece adds a space before text that starts the input or follows a special
    // token (the "dummy prefix").
    bool after_special = true;
    for (const Fragment& f : frags) {
      bool fits = true;
      if (f.token >= 0) {
        out.push_back(f.token);
        fits = !budget.exceeded(out.size());
      } else if (hf_) {
        fits = hf_encode_text(vocab_, *hf_, text.substr(f.offset, f.length), f.offset == 0, &out,
                              budget);
      } else if (vocab_.type == VocabType::kSpm) {
        fits = encode_spm(text.substr(f.offset, f.length), vocab_.add_space_prefix && after_special,
                          budget, &out);
      } else {
        fits = bpe_encode(vocab_, *pre_, text.substr(f.offset, f.length), &out, budget);
      }
      after_special = f.token >= 0;
      if (!fits) {
        r.over_limit = true;
        return r;
      }
    }
    if (add_special && vocab_.add_eos) out.push_back(vocab_.eos);
    r.over_limit = budget.exceeded(out.size());
    return r;
  }

  std::string_view token_to_piece(TokenId id, bool render_special) const override {
    if (id < 0 || static_cast<size_t>(id) + 1 >= piece_start_.size()) return {};
    const uint32_t start = piece_start_[static_cast<size_t>(id)];
    if (!render_special && (start & kHidden)) return {};
    const uint32_t begin = start & ~kHidden,
                   end = piece_start_[static_cast<size_t>(id) + 1] & ~kHidden;
    return std::string_view(pieces_).substr(begin, end - begin);
  }

  std::string decode(const std::vector<TokenId>& ids, bool render_special) const override {
    std::string out;
    // With add_space_prefix, the space that encoding put in front is taken off the first
    // token again (llama.cpp's detokenize without remove_special: the first token, whatever
    // it renders to, uses up the chance).
    bool strip_space = vocab_.add_space_prefix;
    for (TokenId id : ids) {
      const std::string_view piece = token_to_piece(id, render_special);
      if (strip_space && !piece.empty() && piece[0] == ' ')
        out.append(piece, 1, std::string::npos);
      else
        out += piece;
      strip_space = false;
    }
    return out;
  }

  int32_t n_vocab() const override { return vocab_.n_tokens(); }
  std::string_view token_text(TokenId id) const override {
    return vocab_.valid(id) ? std::string_view(vocab_.tokens[static_cast<size_t>(id)].text)
                            : std::string_view();
  }
  std::optional<TokenId> find_token(std::string_view text) const override {
    return vocab_.find(text);
  }
  TokenId bos() const override { return vocab_.bos; }
  TokenId eos() const override { return vocab_.eos; }
  bool add_bos() const override { return vocab_.add_bos; }
  bool is_end_of_generation(TokenId id) const override {
    return vocab_.end_of_generation.count(id) > 0;
  }
  bool is_control(TokenId id) const override { return vocab_.attr(id) & kAttrControl; }

 private:
  // Cut where it can be (spm_next_cut), SentencePiece text is encoded a part at a time, so
  // the budget is checked between parts; parts are also faster than one session over a long
  // text, whose queue and merge map grow with it (1 MB of English: 0.8 s against 1.9 s).
  static constexpr size_t kSpmPartBytes = 1024;

  // One fragment of ordinary text; false when it stopped over the budget.
  bool encode_spm(std::string_view text, bool dummy_prefix, const TokenBudget& budget,
                  std::vector<TokenId>* out) const {
    std::string piece;
    for (size_t start = 0; start < text.size();) {
      const size_t end = spm_cuts_ ? spm_next_cut(text, start + kSpmPartBytes) : text.size();
      if (budget.cannot_fit(out->size(), text.substr(start, end - start))) return false;
      piece.clear();
      if (dummy_prefix && start == 0) piece.push_back(' ');
      piece.append(text.substr(start, end - start));
      replace_all(&piece, " ", kSpaceMarker);
      spm_encode(vocab_, piece, out);
      if (budget.exceeded(out->size())) return false;
      start = end;
    }
    return true;
  }

  // The piece of a token with special tokens rendered; token_to_piece hides them.
  std::string render(TokenId id) const {
    const TokenData& t = vocab_.tokens[static_cast<size_t>(id)];
    if (t.attr & (kAttrControl | kAttrUnknown | kAttrUserDefined)) return t.text;
    if (t.attr & kAttrNormal) {
      if (vocab_.type == VocabType::kBpe) return bytes_of_bpe_token(t.text);
      std::string s = t.text;
      replace_all(&s, kSpaceMarker, " ");
      return s;
    }
    if (t.attr & kAttrByte) return std::string(1, byte_of_token(t.text));
    return {};  // unused and undefined tokens render as nothing
  }

  Vocab vocab_;
  std::optional<PreTokenizer> pre_;
  std::shared_ptr<const HfTextSteps> hf_;
  LengthBound length_bound_ = length_bound(vocab_);
  bool spm_cuts_ = vocab_.type == VocabType::kSpm && spm_cuts_before_spaces(vocab_);
  static constexpr uint32_t kHidden = 1u << 31;
  std::string pieces_;                 // every token's rendered piece, in id order
  std::vector<uint32_t> piece_start_;  // n_vocab + 1 offsets into pieces_ (| kHidden)
};

}  // namespace

namespace {

// Pieces render to at most their stored text's bytes; the piece table's offsets are 31-bit.
Status check_piece_table(const Vocab& vocab) {
  size_t text_bytes = 0;
  for (const TokenData& t : vocab.tokens) text_bytes += t.text.size();
  if (text_bytes >= (size_t{1} << 31))
    return invalid_argument("tokenizer: the vocabulary's token strings exceed 2 GiB");
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_hf_folder(const std::string& dir) {
  PAGODA_ASSIGN_OR_RETURN(HfTokenizer t, load_hf_tokenizer(dir));
  PAGODA_RETURN_IF_ERROR(check_piece_table(t.vocab));
  auto steps = std::make_shared<const HfTextSteps>(std::move(t.steps));
  return std::unique_ptr<Tokenizer>(
      new GgufTokenizer(std::move(t.vocab), std::nullopt, std::move(steps)));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& file) {
  PAGODA_ASSIGN_OR_RETURN(Vocab vocab, Vocab::from_gguf(file));
  std::optional<PreTokenizer> pre;
  if (vocab.type == VocabType::kBpe) {
    auto p = PreTokenizer::create(vocab.pre);
    if (!p.is_ok())
      return p.status().with_context("tokenizer: pre-tokenizer '" + vocab.pre.canonical + "'");
    pre = std::move(p).value();
  }
  PAGODA_RETURN_IF_ERROR(check_piece_table(vocab));
  return std::unique_ptr<Tokenizer>(new GgufTokenizer(std::move(vocab), std::move(pre)));
}

}  // namespace pagoda
