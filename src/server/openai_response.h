// OpenAI response bodies from generation events: the whole response at the end, or the
// server-sent-event chunks of a stream (chat.completion.chunk / text_completion).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/generation.h"
#include "server/openai_request.h"

namespace pagoda {
class Tokenizer;
}

namespace pagoda::server {

// Serialises JSON for the wire; text cut inside a UTF-8 character is replaced, not fatal.
std::string dump(const nlohmann::json& j);
std::string sse(const nlohmann::json& j);

class ResponseBuilder {
 public:
  ResponseBuilder(const GenerationRequest& req, const Tokenizer& tok, std::string id,
                  std::string model, int num_choices);

  // Non-streaming: every event, then response() (or the error of a failed completion).
  void add(const GenerationEvent& e);
  const std::string& error() const { return error_; }
  nlohmann::json response() const;

  // Streaming: what to send first, per event, and at the end (usage, [DONE]).
  std::string stream_start();
  std::string stream_event(const GenerationEvent& e);
  std::string stream_end() const;

 private:
  struct Choice {
    std::string text;
    int64_t tokens = 0;
    FinishReason reason = FinishReason::kNone;
    std::vector<TokenLogprob> logprobs;
    size_t text_offset = 0;  // completions logprobs: characters before the next token
  };
  nlohmann::json chunk(nlohmann::json choices) const;
  nlohmann::json logprobs_json(Choice& c, const std::vector<TokenLogprob>& lps) const;
  nlohmann::json usage() const;

  const GenerationRequest& req_;
  const Tokenizer& tok_;
  const std::string id_, model_;
  const int64_t created_;
  std::vector<Choice> choices_;
  std::string error_;
};

}  // namespace pagoda::server
