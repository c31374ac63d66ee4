// A tokenizer from a Hugging Face model folder: tokenizer.json (vocabulary, merges, added
// tokens, normalizer, pre-tokenizer, post-processor), tokenizer_config.json (bos/eos/unk
// tokens, add_bos_token/add_eos_token, chat_template), chat_template.jinja and
// generation_config.json (eos_token_id), read into the Vocab the GGUF path builds plus the
// text steps (HfTextSteps) that GGUF metadata only names. What is not implemented is refused
// with an error naming the component, never approximated.
//
// Covered: model BPE, byte-level (ByteLevel pre-tokenizer) or over characters with
// byte_fallback / unk_token / fuse_unk (Llama-2-style files), merges as "a b" strings or
// [a, b] pairs; normalizers Prepend, Replace (string pattern), NFC, NFD, NFKC, NFKD, Lowercase
// (tokenizer/normalization.h) and Sequence; pre-tokenizers Split (regex or string pattern,
// Isolated), ByteLevel, Digits, Metaspace and Sequence; post-processors TemplateProcessing (one
// special token at either end), ByteLevel, Sequence.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "tokenizer/hf_pipeline.h"
#include "tokenizer/vocab.h"

namespace pagoda {

// File sizes refused before reading: a tokenizer.json of the largest vocabularies is under
// 40 MB, the other files are a few KB.
constexpr size_t kMaxTokenizerJsonBytes = size_t{256} << 20;
constexpr size_t kMaxHfSideFileBytes = size_t{16} << 20;

// The texts of the folder's files; "" stands for a file that is absent (only tokenizer.json
// is required).
struct HfTokenizerFiles {
  std::string tokenizer_json;
  std::string tokenizer_config;
  std::string generation_config;
  std::string chat_template_jinja;
};

struct HfTokenizer {
  Vocab vocab;
  HfTextSteps steps;
  std::string chat_template;  // "" when the folder has none
};

Result<HfTokenizer> parse_hf_tokenizer(const HfTokenizerFiles& files);

// Whether `path` is a folder holding a tokenizer.json.
bool is_hf_tokenizer_folder(const std::string& path);
// Reads the files of folder `dir` (sizes bounded) and parses them.
Result<HfTokenizerFiles> read_hf_tokenizer_files(const std::string& dir);
Result<HfTokenizer> load_hf_tokenizer(const std::string& dir);
// Only the chat template of folder `dir` (chat_template.jinja, else tokenizer_config.json's),
// without reading tokenizer.json; "" when the folder has none.
Result<std::string> load_hf_chat_template(const std::string& dir);

}  // namespace pagoda
