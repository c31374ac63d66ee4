// OpenAI request bodies (/v1/completions, /v1/chat/completions) to what the engine runs:
// prompts as token ids and SamplingParams. Every field is checked here, so a bad request
// is a 400 that names the field.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pagoda/sampling_params.h"
#include "server/api_error.h"

namespace pagoda {
class Tokenizer;
}

namespace pagoda::server {

class ChatRenderer;

enum class ApiKind { kCompletion, kChat };

struct GenerationRequest {
  ApiKind kind = ApiKind::kCompletion;
  std::string model;
  std::vector<std::vector<int32_t>> prompts;  // token ids, one request each
  std::vector<std::string> prompt_texts;      // their text, for echo
  SamplingParams params;
  int priority = 0;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;
  bool logprobs = false;  // per-token log-probabilities asked for
  int top_logprobs = 0;
};

struct ParseContext {
  const Tokenizer& tok;
  const ChatRenderer& chat;
  int64_t max_model_len = 0;
  int64_t kv_capacity_tokens = 0;  // the whole KV pool, for the default max_tokens
};

// Bodies are ordered JSON so that chat messages and tools keep the request's key order
// on their way to the chat template.
ApiResult<GenerationRequest> parse_completion_request(const nlohmann::ordered_json& body,
                                                      const ParseContext& ctx);
ApiResult<GenerationRequest> parse_chat_request(const nlohmann::ordered_json& body,
                                                const ParseContext& ctx);

}  // namespace pagoda::server
