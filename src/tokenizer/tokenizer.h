// Tokenizers built from GGUF metadata (tokenizer.ggml.*): SentencePiece-style ("llama")
// and byte-level BPE ("gpt2") with the pre-tokenizer named by tokenizer.ggml.pre.
// Vocabulary-only GGUF files (no tensors) are enough to build one. Or from a Hugging Face
// folder's tokenizer.json, whose text steps the file states itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/gguf.h"

namespace pagoda {

using TokenId = int32_t;

// An encoding that may have stopped early (Tokenizer::encode_bounded).
struct BoundedEncoding {
  std::vector<TokenId> ids;
  bool over_limit = false;  // the text has more tokens than the limit
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& file);
  // From a Hugging Face model folder's tokenizer.json and tokenizer_config.json
  // (tokenizer/hf_vocab.h says what is covered); ids follow Hugging Face's tokenizers.
  static Result<std::unique_ptr<Tokenizer>> from_hf_folder(const std::string& dir);

  // Text to ids. add_special: prepend BOS (and append EOS) when the vocabulary's
  // metadata asks for it. parse_special: text matching a special/control token's
  // content becomes that token instead of being split as ordinary text.
  virtual std::vector<TokenId> encode(std::string_view text, bool add_special,
                                      bool parse_special) const = 0;
  // encode() for a caller that refuses more than max_tokens tokens: it stops as soon as the
  // text is known to have more (a prompt longer than the context costs no more than one
  // that fills it). Within the limit, ids are exactly encode()'s; over it, over_limit is set
  // and ids are a prefix of encode()'s result, usually just past the limit (shorter where
  // the text left was too long to fit whatever its tokens).
  virtual BoundedEncoding encode_bounded(std::string_view text, bool add_special,
                                         bool parse_special, size_t max_tokens) const = 0;

  // Bytes of one token as it appears in generated text (may be part of a UTF-8
  // character). Control tokens give "" unless render_special. A view into the
  // tokenizer's own table (valid while it lives): the engine calls this for every
  // generated token, and a copy per call showed in its host time.
  virtual std::string_view token_to_piece(TokenId id, bool render_special = false) const = 0;
  // Ids to text: the concatenation of the pieces, with the SentencePiece leading space
  // rule applied as llama.cpp does.
  virtual std::string decode(const std::vector<TokenId>& ids,
                             bool render_special = false) const = 0;

  virtual int32_t n_vocab() const = 0;
  // The vocabulary's stored token string.
  virtual std::string_view token_text(TokenId id) const = 0;
  virtual std::optional<TokenId> find_token(std::string_view text) const = 0;
  virtual TokenId bos() const = 0;  // -1 when none
  virtual TokenId eos() const = 0;  // -1 when none
  virtual bool add_bos() const = 0;
  // True for tokens that end generation (EOS, EOT, <|im_end|>, <|eot_id|>, ...).
  virtual bool is_end_of_generation(TokenId id) const = 0;
  virtual bool is_control(TokenId id) const = 0;
};

}  // namespace pagoda
