// Chat messages to prompt text. This is the seam for the Jinja chat-template renderer:
// today a model whose vocabulary has <|im_start|>/<|im_end|> gets ChatML (SmolLM2, Qwen);
// the template from GGUF (tokenizer.chat_template) is kept here for the real renderer.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace pagoda {
class Tokenizer;
}

namespace pagoda::server {

struct ChatTemplateSource {
  std::string template_text;  // tokenizer.chat_template, "" when the model has none
  std::string bos_token, eos_token;
  bool has_chatml_tokens = false;
};

class ChatRenderer {
 public:
  static Result<ChatRenderer> create(ChatTemplateSource source);
  static ChatTemplateSource source_for(const Tokenizer& tok, std::string template_text);

  // messages: OpenAI chat messages (validated by the caller to be objects with a role);
  // tools: the request's tools, null when none.
  Result<std::string> render(const nlohmann::json& messages, bool add_generation_prompt,
                             const nlohmann::json& tools) const;

 private:
  ChatTemplateSource source_;
};

// A message's content as text: a string, or the text parts of a list of parts.
Result<std::string> message_text(const nlohmann::json& content);

}  // namespace pagoda::server
