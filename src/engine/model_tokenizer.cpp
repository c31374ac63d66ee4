#include "engine/model_tokenizer.h"

#include "tokenizer/hf_vocab.h"

namespace pagoda {

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const TensorSource& source) {
  if (const GgufFile* f = source.gguf()) return Tokenizer::from_gguf(*f);
  return Tokenizer::from_hf_folder(source.path());
}

Result<std::string> load_chat_template(const TensorSource& source) {
  if (const GgufFile* f = source.gguf())
    return std::string(f->get_string("tokenizer.chat_template").value_or(""));
  return load_hf_chat_template(source.path());
}

}  // namespace pagoda
