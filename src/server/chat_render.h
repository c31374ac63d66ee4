// Chat messages to prompt text with the model's own chat template (tokenizer.chat_template
// from GGUF, rendered by Pagoda's Jinja interpreter as transformers renders it). A model
// without a template whose vocabulary has <|im_start|>/<|im_end|> gets plain ChatML.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/status.h"
#include "pagoda/chat_template.h"

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

  bool has_template() const { return tmpl_.has_value(); }
  // What a message's list of content parts becomes for the template, as vLLM decides it:
  // the parts themselves for a template that iterates content, else their text joined.
  ChatContentFormat content_format() const {
    return tmpl_ ? tmpl_->content_format() : ChatContentFormat::kString;
  }
  // messages: OpenAI chat messages (validated by the caller to be objects with a role);
  // tools: the request's tools, null when none. Ordered JSON: the template sees the keys
  // in the request's order, as transformers does (a `tojson` shows it). A content given
  // as a list of parts reaches the template in its content format; a part that is not
  // text (an image, audio) is refused.
  Result<std::string> render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                             const nlohmann::ordered_json& tools) const;

 private:
  ChatTemplateSource source_;
  std::optional<ChatTemplate> tmpl_;
};

// A message's content as text: a string, none (""), or a list of text parts joined with
// "\n" as vLLM joins them. A part of another type is refused, naming the type.
Result<std::string> message_text(const nlohmann::ordered_json& content);

}  // namespace pagoda::server
