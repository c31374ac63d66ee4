// A model's tokenizer and chat template, wherever the model came from: a GGUF file's
// vocabulary and tokenizer.chat_template, or a Hugging Face checkpoint folder's
// tokenizer.json and tokenizer_config.json.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "model/tensor_source.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const TensorSource& source);
// The model's chat template, "" when it has none.
Result<std::string> load_chat_template(const TensorSource& source);

}  // namespace pagoda
