// Pre-tokenization for byte-level BPE: splitting text into words before merges are applied,
// as named by tokenizer.ggml.pre. Each variant is a sequence of splitting steps; every step
// splits each piece left by the previous one, keeping both matches and the text between
// them (llama.cpp's unicode_regex_split). The GPT-2 and Llama-3 patterns run through
// hand-written splitters whose corner cases reproduce llama.cpp's; the others run through
// tokenizer/regex.h.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/regex.h"

namespace pagoda {

struct PreTokenizerSpec {
  std::string canonical;  // the variant's main name, e.g. "llama3"
  std::vector<std::string> patterns;
  bool ignore_merges = false;  // a word that is itself a token skips the merges
  bool add_bos = false;        // default for tokenizer.ggml.add_bos_token
  bool no_bos = false;         // the variant has no BOS token by default (chatglm)
  // Every pattern runs through the regex engine, never a hand-written splitter: a pattern
  // from a tokenizer.json means what the regex says, not llama.cpp's reading of it.
  bool regex_only = false;
};

// The variant for a tokenizer.ggml.pre value; nullptr for a name we do not know.
const PreTokenizerSpec* find_pre_tokenizer(std::string_view name);
const PreTokenizerSpec& default_pre_tokenizer();
// Every tokenizer.ggml.pre value find_pre_tokenizer() knows.
std::vector<std::string_view> known_pre_tokenizer_names();

class PreTokenizer {
 public:
  static Result<PreTokenizer> create(const PreTokenizerSpec& spec);

  // Splits `text` into words (UTF-8). Malformed UTF-8 is read as llama.cpp reads it: each
  // undecodable byte becomes U+FFFD, so the words hold that character instead.
  std::vector<std::string> split(std::string_view text) const;
  // The same words, handed to `fn` one at a time as they are found; `fn` returning false
  // stops the split there (the rest of the text is not split) and makes this return false.
  bool for_each_word(std::string_view text,
                     const std::function<bool(std::string_view word)>& fn) const;

  const PreTokenizerSpec& spec() const { return spec_; }

 private:
  enum class Kind { kGpt2, kLlama3, kRegex };
  struct Step {
    Kind kind;
    std::shared_ptr<const Regex> regex;
  };
  PreTokenizerSpec spec_;
  std::vector<Step> steps_;
};

}  // namespace pagoda
