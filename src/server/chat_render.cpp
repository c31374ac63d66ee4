#include "server/chat_render.h"

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace pagoda::server {

using nlohmann::ordered_json;

namespace {

// The texts of a list of content parts. As vLLM reads them: a plain string counts as a
// text part, and so does a refusal (an assistant turn the model declined).
Result<std::vector<std::string>> part_texts(const ordered_json& parts) {
  std::vector<std::string> texts;
  for (const ordered_json& part : parts) {
    if (part.is_string()) {
      texts.push_back(part.get<std::string>());
      continue;
    }
    auto type = part.is_object() ? part.find("type") : part.end();
    if (!part.is_object() || type == part.end() || !type->is_string())
      return invalid_argument("each content part must be an object with a string 'type'");
    const std::string t = type->get<std::string>();
    if (t != "text" && t != "refusal")
      return invalid_argument("content part type '" + t +
                              "' is not supported: this server takes text only "
                              "({\"type\": \"text\", \"text\": ...})");
    auto text = part.find(t);
    if (text == part.end() || !text->is_string())
      return invalid_argument("a '" + t + "' content part needs a string '" + t + "'");
    texts.push_back(text->get<std::string>());
  }
  return texts;
}

}  // namespace

Result<std::string> message_text(const ordered_json& content) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return invalid_argument("message content must be a string or a list");
  PAGODA_ASSIGN_OR_RETURN(std::vector<std::string> texts, part_texts(content));
  std::string s;
  for (size_t i = 0; i < texts.size(); ++i) s += (i ? "\n" : "") + texts[i];
  return s;
}

ChatTemplateSource ChatRenderer::source_for(const Tokenizer& tok, std::string template_text) {
  ChatTemplateSource s;
  s.template_text = std::move(template_text);
  if (tok.bos() >= 0) s.bos_token = std::string(tok.token_text(tok.bos()));
  if (tok.eos() >= 0) s.eos_token = std::string(tok.token_text(tok.eos()));
  s.has_chatml_tokens = tok.find_token("<|im_start|>") && tok.find_token("<|im_end|>");
  return s;
}

Result<ChatRenderer> ChatRenderer::create(ChatTemplateSource source) {
  ChatRenderer r;
  if (!source.template_text.empty()) {
    auto t = ChatTemplate::parse(source.template_text);
    if (!t) return t.status().with_context("the chat template");
    r.tmpl_ = std::move(t).value();
  }
  r.source_ = std::move(source);
  return r;
}

namespace {

// A list of content parts as the template takes it: the text parts, normalised as vLLM
// passes them, for a template that iterates content; their text joined for one that
// uses content as a string. A string (or none) content stays as the client sent it, as
// transformers passes it.
Status adapt_content(ordered_json* message, ChatContentFormat format) {
  auto content = message->find("content");
  if (content == message->end() || !content->is_array()) {
    if (content != message->end() && !content->is_null() && !content->is_string())
      return invalid_argument("message content must be a string or a list");
    return Status::ok();
  }
  if (format == ChatContentFormat::kString) {
    PAGODA_ASSIGN_OR_RETURN(std::string text, message_text(*content));
    *content = std::move(text);
    return Status::ok();
  }
  PAGODA_ASSIGN_OR_RETURN(std::vector<std::string> texts, part_texts(*content));
  ordered_json parts = ordered_json::array();
  for (std::string& t : texts) parts.push_back({{"type", "text"}, {"text", std::move(t)}});
  *content = std::move(parts);
  return Status::ok();
}

// The messages as the template takes them: content lists adapted to its content format,
// and tool call arguments parsed. OpenAI clients send those as a JSON string; templates
// (Qwen2.5's, Llama 3.1's) expect the object and `tojson` it, as vLLM hands it to them. A
// string that is not a JSON object stays as it is.
Result<ordered_json> messages_for_template(const ordered_json& messages, ChatContentFormat format) {
  ordered_json out = messages;
  if (!out.is_array()) return out;
  for (ordered_json& m : out) {
    if (!m.is_object()) continue;
    PAGODA_RETURN_IF_ERROR(adapt_content(&m, format));
    if (!m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (ordered_json& call : m["tool_calls"]) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
        continue;
      ordered_json& fn = call["function"];
      if (!fn.contains("arguments") || !fn["arguments"].is_string()) continue;
      ordered_json parsed = ordered_json::parse(fn["arguments"].get<std::string>(), nullptr,
                                                /*allow_exceptions=*/false);
      if (parsed.is_object()) fn["arguments"] = std::move(parsed);
    }
  }
  return out;
}

}  // namespace

Result<std::string> ChatRenderer::render(const ordered_json& messages, bool add_generation_prompt,
                                         const ordered_json& tools) const {
  if (tmpl_) {
    ChatTemplateInputs in;
    PAGODA_ASSIGN_OR_RETURN(in.messages, messages_for_template(messages, content_format()));
    if (!tools.is_null()) in.tools = tools;
    in.add_generation_prompt = add_generation_prompt;
    if (!source_.bos_token.empty()) in.bos_token = source_.bos_token;
    if (!source_.eos_token.empty()) in.eos_token = source_.eos_token;
    auto text = tmpl_->render(make_chat_context(in));
    if (!text) return invalid_argument(text.status().message());
    return text;
  }
  if (!source_.has_chatml_tokens)
    return unsupported(
        "chat needs a chat template; this model's vocabulary has no <|im_start|>/<|im_end|> "
        "tokens for ChatML (use /v1/completions)");
  if (!tools.is_null() && !tools.empty())
    return unsupported("tools need the model's Jinja chat template, not supported yet");
  std::string s;
  for (const ordered_json& m : messages) {
    PAGODA_ASSIGN_OR_RETURN(std::string text, message_text(m.value("content", ordered_json())));
    s += "<|im_start|>" + m["role"].get<std::string>() + "\n" + text + "<|im_end|>\n";
  }
  if (add_generation_prompt) s += "<|im_start|>assistant\n";
  return s;
}

}  // namespace pagoda::server
