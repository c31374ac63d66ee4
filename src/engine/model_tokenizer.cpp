#include "engine/model_tokenizer.h"

namespace pagoda {
namespace {

struct FolderTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
  std::string chat_template;  // from tokenizer_config.json, "" when absent
};

// JOIN: hf tokenizer
// A checkpoint folder's tokenizer.json (with tokenizer_config.json: special tokens, chat
// template) as Pagoda's Tokenizer. Until the tokenizer.json reader is wired in here, the
// commands that need a folder's tokenizer refuse it; those driven by token ids run.
Result<FolderTokenizer> load_folder_tokenizer(const std::string& dir) {
  return unsupported(
      "the tokenizer of checkpoint folder '" + dir +
      "' (tokenizer.json, tokenizer_config.json) cannot be read yet; commands "
      "that take token ids (logits --tokens, bench, perplexity --kl-base FOLDER) run");
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const TensorSource& source) {
  if (const GgufFile* f = source.gguf()) return Tokenizer::from_gguf(*f);
  PAGODA_ASSIGN_OR_RETURN(FolderTokenizer t, load_folder_tokenizer(source.path()));
  return std::move(t.tokenizer);
}

Result<std::string> load_chat_template(const TensorSource& source) {
  if (const GgufFile* f = source.gguf())
    return std::string(f->get_string("tokenizer.chat_template").value_or(""));
  PAGODA_ASSIGN_OR_RETURN(FolderTokenizer t, load_folder_tokenizer(source.path()));
  return std::move(t.chat_template);
}

}  // namespace pagoda
