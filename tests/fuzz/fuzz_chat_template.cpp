// libFuzzer target: arbitrary bytes as a chat template, rendered with a small conversation
// under tight limits. Errors are the expected outcome for most inputs; a crash, a sanitizer
// report, a hang or a runaway allocation is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "pagoda/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json kContext = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": "Hi <b>&'x' Grüße 🎉"},
                 {"role": "assistant", "content": "", "tool_calls": [{"id": "call12345",
                   "type": "function", "function": {"name": "f", "arguments": {"a": [1, 2.5]}}}]},
                 {"role": "tool", "content": "42"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
               "properties": {"a": {"type": "array"}}}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "documents": null})");
  pagoda::ChatTemplateLimits limits;
  limits.max_steps = 200000;
  limits.max_output = 1 << 20;
  // Well under libFuzzer's RSS limit: a template that allocates past it is a finding only
  // if the budget failed to stop it.
  limits.max_alloc = 16 << 20;
  auto t = pagoda::ChatTemplate::parse(std::string(reinterpret_cast<const char*>(data), size));
  if (t.is_ok()) (void)t->render(kContext, limits);
  return 0;
}
