// Chat templates: Pagoda's own interpreter for the Jinja subset Hugging Face chat
// templates use, rendering byte-for-byte what transformers' apply_chat_template renders
// (jinja2 in an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, plus
// raise_exception, strftime_now, HF's tojson and the loop controls).
//
// Parse once, render many times; a ChatTemplate is immutable and safe to share between
// threads. Pass JSON as nlohmann::ordered_json: key order matters (tojson keeps it).
// The interpreter itself is src/jinja/ (namespace pagoda::jinja), library pagoda_jinja.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "pagoda/status.h"

namespace pagoda {

// Bounds on one rendering, so a hostile template cannot hang or exhaust the process.
struct ChatTemplateLimits {
  int64_t max_steps = 5'000'000;  // expressions, statements and loop iterations
  size_t max_output = 64u << 20;  // bytes of output, and of any one string
  int max_depth = 1500;           // nested evaluation (macro recursion included)
  // Bytes of strings, lists and dicts one rendering may create, all told (see
  // src/jinja/alloc_budget.h). Real templates create a few times their prompt: 64 MiB
  // renders prompts of millions of tokens, and 64 renderings at once still fit in 4 GiB.
  size_t max_alloc = 64u << 20;
};

// How a template takes a message's content (vLLM's "content format"): kOpenAI templates
// loop over it as OpenAI's list of parts ({"type": "text", "text": ...}), kString ones
// use it as text.
enum class ChatContentFormat { kString, kOpenAI };

class ChatTemplate {
 public:
  // A syntax error or an unsupported construct comes back as a Status naming the line.
  static Result<ChatTemplate> parse(const std::string& source);

  // Renders with `context` (a JSON object) as the template's variables.
  Result<std::string> render(const nlohmann::ordered_json& context) const;
  Result<std::string> render(const nlohmann::ordered_json& context,
                             const ChatTemplateLimits& limits) const;

  // Decided once, when parsing (src/jinja/content_format.h).
  ChatContentFormat content_format() const;

 private:
  struct Parsed;
  explicit ChatTemplate(std::shared_ptr<const Parsed> parsed) : parsed_(std::move(parsed)) {}
  std::shared_ptr<const Parsed> parsed_;
};

// The variables transformers' apply_chat_template gives a template. The layout is Hugging
// Face's, not a request's: the server (src/server/chat_render) and `pagoda template` turn
// their inputs into these fields, and make_chat_context lays them out.
struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  std::optional<nlohmann::ordered_json> tools;  // none: the template sees tools = None
  bool add_generation_prompt = false;
  std::optional<std::string> bos_token;  // none: undefined in the template
  std::optional<std::string> eos_token;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // chat_template_kwargs
};

// {messages, tools, documents: None, add_generation_prompt, bos_token, eos_token, ...extra}
nlohmann::ordered_json make_chat_context(const ChatTemplateInputs& inputs);

// One-shot convenience: parse and render.
Result<std::string> render_chat_template(const std::string& source,
                                         const nlohmann::ordered_json& context);

}  // namespace pagoda
