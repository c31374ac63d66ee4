#include "tokenizer/hf_pipeline.h"

#include <functional>

#include "tokenizer/bpe.h"
#include "tokenizer/byte_alphabet.h"
#include "tokenizer/normalization.h"

namespace pagoda {
namespace {

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(s);
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t m; (m = s.find(from, pos)) != std::string_view::npos; pos = m + from.size()) {
    out.append(s, pos, m - pos);
    out.append(to);
  }
  out.append(s, pos, std::string_view::npos);
  return out;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

bool hf_encode_text(const Vocab& vocab, const HfTextSteps& steps, std::string_view text,
                    bool at_start, std::vector<TokenId>* out, const TokenBudget& budget) {
  std::string normalized(text);
  for (const HfNormalizeStep& n : steps.normalizer) {
    using Kind = HfNormalizeStep::Kind;
    using unicode::NormalForm;
    switch (n.kind) {
      case Kind::kPrepend:
        if (!normalized.empty()) normalized.insert(0, n.text);
        break;
      case Kind::kReplace:
        normalized = replace_all(normalized, n.text, n.replacement);
        break;
      case Kind::kNfc:
        normalized = unicode::normalize(normalized, NormalForm::kNfc);
        break;
      case Kind::kNfd:
        normalized = unicode::normalize(normalized, NormalForm::kNfd);
        break;
      case Kind::kNfkc:
        normalized = unicode::normalize(normalized, NormalForm::kNfkc);
        break;
      case Kind::kNfkd:
        normalized = unicode::normalize(normalized, NormalForm::kNfkd);
        break;
      case Kind::kLowercase:
        normalized = unicode::to_lower(normalized);
        break;
    }
  }
  std::string mapped;
  // Piece by piece through the steps, so that the budget can stop the work after any word.
  // `first`: the piece starts where the input does (Metaspace's "first" scheme).
  std::function<bool(size_t, std::string_view, bool)> run = [&](size_t k, std::string_view piece,
                                                                bool first) -> bool {
    if (k == steps.pre_tokenizer.size()) {
      if (budget.cannot_fit(out->size(), piece)) return false;
      if (steps.byte_level) {
        mapped.clear();
        byte_alphabet::encode(piece, &mapped);
        bpe_encode_word(vocab, mapped, out);
      } else {
        bpe_encode_word(vocab, piece, out);
      }
      return !budget.exceeded(out->size());
    }
    const HfPreStep& step = steps.pre_tokenizer[k];
    switch (step.kind) {
      case HfPreStep::Kind::kSplit: {
        bool first_word = first;
        return step.split->for_each_word(piece, [&](std::string_view word) {
          const bool more = run(k + 1, word, first_word);
          first_word = false;
          return more;
        });
      }
      case HfPreStep::Kind::kSpacePrefix:
        if (starts_with(piece, " ")) return run(k + 1, piece, first);
        return run(k + 1, " " + std::string(piece), first);
      case HfPreStep::Kind::kMetaspace: {
        std::string s = replace_all(piece, " ", step.replacement);
        const bool prepend = step.prepend == HfPreStep::Prepend::kAlways ||
                             (step.prepend == HfPreStep::Prepend::kFirst && first);
        if (prepend && !starts_with(s, step.replacement)) s.insert(0, step.replacement);
        return run(k + 1, s, first);
      }
    }
    return true;
  };
  return normalized.empty() || run(0, normalized, at_start);
}

}  // namespace pagoda
