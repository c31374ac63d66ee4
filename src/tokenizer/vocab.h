// A tokenizer vocabulary read from GGUF metadata (tokenizer.ggml.*): token strings, scores,
// attributes, merges, special ids and flags, with the same defaults and the same fix-ups
// llama.cpp applies on load (so that ids, rendering and end-of-generation agree with it).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "model/gguf.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

// Per-token attributes (bit flags); tokenizer.ggml.token_type values map onto the first six.
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1 << 0,
  kAttrUnused = 1 << 1,
  kAttrNormal = 1 << 2,
  kAttrControl = 1 << 3,
  kAttrUserDefined = 1 << 4,
  kAttrByte = 1 << 5,
  kAttrLstrip = 1 << 7,  // eat whitespace left of the token when splitting specials out
  kAttrRstrip = 1 << 8,  // ... and right of it
};

enum class VocabType { kSpm, kBpe };

struct TokenData {
  std::string text;
  float score = 0;
  uint32_t attr = kAttrNormal;
};

// Hash and equality that let std::string_view look up std::string keys without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
struct StringEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};

struct Vocab {
  VocabType type = VocabType::kSpm;
  std::string pre_name;  // tokenizer.ggml.pre as stored ("" when absent)
  PreTokenizerSpec pre;  // BPE only

  std::vector<TokenData> tokens;
  std::unordered_map<std::string, TokenId, StringHash, StringEq> token_to_id;
  // BPE merges: key is left + '\n' + right (neither half of a byte-level token can hold a
  // raw newline), value the rank (position in tokenizer.ggml.merges; first one wins).
  std::unordered_map<std::string, int32_t, StringHash, StringEq> merge_ranks;

  TokenId bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, sep = -1, pad = -1, mask = -1;
  TokenId fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;

  // Hugging Face's BPE model (tokenizer.json, tokenizer/hf_vocab.h) writes a character that
  // is not a token by its own rule: <0xXX> byte tokens (byte_fallback), else its model's
  // unknown token, one per run with fuse_unk.
  bool hf_bpe = false;
  bool byte_fallback = false;
  bool fuse_unk = false;
  TokenId bpe_unk = -1;
  // lstrip/rstrip around special tokens take Unicode whitespace (Hugging Face), not the C
  // locale's isspace (llama.cpp).
  bool unicode_strip = false;

  std::unordered_set<TokenId> end_of_generation;
  // Control, user-defined and unknown tokens, longest text first: the order in which text
  // matching them is split out before tokenization.
  std::vector<TokenId> special_tokens;

  static Result<Vocab> from_gguf(const GgufFile& file);

  // Steps both loaders share once tokens, attributes and the special ids are in place. EOT,
  // EOM and FIM ids found by their text (llama.cpp's lists) and the end-of-generation set;
  // `mark` lets them also turn those tokens into control tokens, as GGUF files need (a
  // tokenizer.json says itself which added tokens are special).
  void detect_special_by_text(bool mark);
  // Fills special_tokens from the attributes.
  void build_special_list();

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  bool valid(TokenId id) const { return id >= 0 && id < n_tokens(); }
  uint32_t attr(TokenId id) const { return valid(id) ? tokens[static_cast<size_t>(id)].attr : 0; }
  std::optional<TokenId> find(std::string_view text) const {
    auto it = token_to_id.find(text);
    if (it == token_to_id.end()) return std::nullopt;
    return it->second;
  }
};

}  // namespace pagoda
