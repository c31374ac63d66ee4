#include "server/chat_render.h"

#include "tokenizer/tokenizer.h"

namespace pagoda::server {

using nlohmann::ordered_json;

Result<std::string> message_text(const ordered_json& content) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return invalid_argument("message content must be a string or a list");
  std::string s;
  for (const ordered_json& part : content) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
        !part.contains("text") || !part["text"].is_string())
      return invalid_argument("only text content parts ({\"type\": \"text\", ...}) are supported");
    s += part["text"].get<std::string>();
  }
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

// OpenAI clients send a tool call's arguments as a JSON string; templates (Qwen2.5's,
// Llama 3.1's) expect the object and `tojson` it, as vLLM hands it to them. A string
// that is not a JSON object stays as it is.
ordered_json with_parsed_tool_arguments(const ordered_json& messages) {
  ordered_json out = messages;
  if (!out.is_array()) return out;
  for (ordered_json& m : out) {
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
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
    in.messages = with_parsed_tool_arguments(messages);
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
