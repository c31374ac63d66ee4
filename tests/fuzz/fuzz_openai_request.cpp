// libFuzzer target: arbitrary bytes as an OpenAI request body, parsed with the nesting limit
// and then as both a chat and a completion request, against a real vocabulary and chat
// template (PAGODA_FUZZ_VOCAB names the GGUF file; its own chat template is used when it has
// one). A 400 is the expected outcome for most inputs; a crash, a sanitizer report, an
// escaped exception, a hang or a runaway allocation is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "model/gguf.h"
#include "server/chat_render.h"
#include "server/json_body.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace pagoda;
using namespace pagoda::server;

// For a vocabulary without a template: roles, text, tool calls and tools all reach the
// output, as they do through real templates.
constexpr const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% elif m['content'] is sequence %}{% for p in m['content'] %}{{ p['text'] }}{% endfor %}"
    "{% endif %}"
    "{% if m['tool_calls'] is defined %}{{ m['tool_calls'] | tojson }}{% endif %}"
    "{{ eos_token }}\n{% endfor %}{% if tools %}{{ tools | tojson }}{% endif %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}";

struct Target {
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<ChatRenderer> chat;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "fuzz_openai_request: %s\n", what.c_str());
  std::abort();
}

// Loaded once, at the first input.
const Target& target() {
  static const Target t = [] {
    const char* env = std::getenv("PAGODA_FUZZ_VOCAB");
    const std::string path = env && *env ? env : "../shared/models/stories260K.gguf";
    auto file = GgufFile::open(path);
    if (!file.is_ok()) die(path + ": " + file.status().message());
    auto tok = Tokenizer::from_gguf(**file);
    if (!tok.is_ok()) die(path + ": " + tok.status().message());
    std::string tmpl = kTemplate;
    if (auto own = (*file)->get_string("tokenizer.chat_template")) tmpl = std::string(*own);
    auto chat = ChatRenderer::create(ChatRenderer::source_for(**tok, tmpl));
    if (!chat.is_ok()) die("the chat template: " + chat.status().message());
    Target out;
    out.tok = std::move(tok).value();
    out.chat = std::make_unique<ChatRenderer>(std::move(chat).value());
    return out;
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Target& t = target();
  auto body = parse_json_body(std::string_view(reinterpret_cast<const char*>(data), size),
                              kDefaultMaxJsonDepth);
  if (!body.ok()) return 0;
  // A small context, so that long prompts reach the length check.
  const ParseContext ctx{*t.tok, *t.chat, /*max_model_len=*/512, /*kv_capacity_tokens=*/8192};
  (void)parse_chat_request(body.value(), ctx);
  (void)parse_completion_request(body.value(), ctx);
  return 0;
}
