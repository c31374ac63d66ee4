// The text steps of a Hugging Face tokenizer.json that GGUF metadata only names: the
// normalizer and pre-tokenizer as data (read by tokenizer/hf_vocab.h), run on each piece of
// ordinary text between special tokens, then Hugging Face's BPE model on each word.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/token_budget.h"
#include "tokenizer/vocab.h"

namespace pagoda {

// One normalizer step; a Sequence is their list.
struct HfNormalizeStep {
  enum class Kind { kPrepend, kReplace, kNfc, kNfd, kNfkc, kNfkd, kLowercase };
  Kind kind = Kind::kPrepend;
  std::string text;         // kPrepend: what goes in front; kReplace: the string replaced
  std::string replacement;  // kReplace
};

// One pre-tokenizer step; each one works on every piece the steps before it left.
struct HfPreStep {
  enum class Kind {
    kSplit,        // regex split keeping matches and the text between them (Isolated)
    kSpacePrefix,  // ByteLevel's add_prefix_space: " " in front unless the piece starts so
    kMetaspace,    // spaces become `replacement`, which is also put in front per `prepend`
  };
  enum class Prepend { kAlways, kFirst, kNever };
  Kind kind = Kind::kSplit;
  std::shared_ptr<const PreTokenizer> split;  // kSplit
  std::string replacement;                    // kMetaspace
  Prepend prepend = Prepend::kAlways;         // kMetaspace; kFirst: only at the input's start
};

struct HfTextSteps {
  std::vector<HfNormalizeStep> normalizer;
  std::vector<HfPreStep> pre_tokenizer;
  bool byte_level = false;  // words are mapped to the GPT-2 byte alphabet before merging
};

// Encodes one piece of ordinary text, appending ids; `at_start` says it begins the input.
// Stops and returns false once `out` is over the budget (a prefix of the ids is then in it).
bool hf_encode_text(const Vocab& vocab, const HfTextSteps& steps, std::string_view text,
                    bool at_start, std::vector<TokenId>* out, const TokenBudget& budget);

}  // namespace pagoda
