#include "server/openai_response.h"

#include <ctime>

#include "tokenizer/tokenizer.h"

namespace pagoda::server {

using nlohmann::json;

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse(const json& j) {
  return "data: " + dump(j) + "\n\n";
}

namespace {
json finish_reason_json(FinishReason r) {
  if (r == FinishReason::kNone) return nullptr;
  return finish_reason_name(r);
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}
}  // namespace

ResponseBuilder::ResponseBuilder(const GenerationRequest& req, const Tokenizer& tok, std::string id,
                                 std::string model, int num_choices)
    : req_(req),
      tok_(tok),
      id_(std::move(id)),
      model_(std::move(model)),
      created_(static_cast<int64_t>(std::time(nullptr))),
      choices_(static_cast<size_t>(num_choices)) {
  if (req_.echo && req_.kind == ApiKind::kCompletion)
    for (size_t i = 0; i < choices_.size(); ++i)
      choices_[i].text = req_.prompt_texts[i / static_cast<size_t>(req_.params.n)];
}

json ResponseBuilder::logprobs_json(Choice& c, const std::vector<TokenLogprob>& lps) const {
  if (req_.kind == ApiKind::kChat) {
    json content = json::array();
    for (const TokenLogprob& lp : lps) {
      const std::string piece(tok_.token_to_piece(lp.token));
      json top = json::array();
      for (const auto& [t, l] : lp.top) {
        if (static_cast<int>(top.size()) >= req_.top_logprobs) break;
        const std::string p(tok_.token_to_piece(t));
        top.push_back({{"token", p}, {"logprob", l}, {"bytes", bytes_of(p)}});
      }
      content.push_back({{"token", piece},
                         {"logprob", lp.logprob},
                         {"bytes", bytes_of(piece)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  for (const TokenLogprob& lp : lps) {
    const std::string piece(tok_.token_to_piece(lp.token));
    tokens.push_back(piece);
    token_logprobs.push_back(lp.logprob);
    json t = json::object();
    for (const auto& [id, l] : lp.top) {
      if (static_cast<int>(t.size()) >= req_.top_logprobs) break;
      t[std::string(tok_.token_to_piece(id))] = l;
    }
    top.push_back(t);
    offsets.push_back(c.text_offset);
    c.text_offset += piece.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

void ResponseBuilder::add(const GenerationEvent& e) {
  Choice& c = choices_.at(static_cast<size_t>(e.choice));
  c.text += e.out.text;
  c.tokens += static_cast<int64_t>(e.out.token_ids.size());
  c.logprobs.insert(c.logprobs.end(), e.out.logprobs.begin(), e.out.logprobs.end());
  if (e.out.finished) {
    c.reason = e.out.finish_reason;
    if (e.out.finish_reason == FinishReason::kError && error_.empty())
      error_ = e.out.error.empty() ? "the engine failed this request" : e.out.error;
  }
}

json ResponseBuilder::usage() const {
  int64_t prompt = 0, completion = 0;
  for (const auto& p : req_.prompts) prompt += static_cast<int64_t>(p.size());
  for (const Choice& c : choices_) completion += c.tokens;
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion}};
}

json ResponseBuilder::response() const {
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice c = choices_[i];
    json lp = nullptr;
    if (req_.logprobs) {
      c.text_offset =
          req_.echo ? req_.prompt_texts[i / static_cast<size_t>(req_.params.n)].size() : 0;
      lp = logprobs_json(c, c.logprobs);
    }
    json choice = {{"index", i}, {"logprobs", lp}, {"finish_reason", finish_reason_json(c.reason)}};
    if (req_.kind == ApiKind::kChat)
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    else
      choice["text"] = c.text;
    choices.push_back(choice);
  }
  const bool chat = req_.kind == ApiKind::kChat;
  return {{"id", id_},           {"object", chat ? "chat.completion" : "text_completion"},
          {"created", created_}, {"model", model_},
          {"choices", choices},  {"usage", usage()}};
}

json ResponseBuilder::chunk(json choices) const {
  const bool chat = req_.kind == ApiKind::kChat;
  json j = {{"id", id_},
            {"object", chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", model_},
            {"choices", std::move(choices)}};
  if (req_.include_usage) j["usage"] = nullptr;
  return j;
}

std::string ResponseBuilder::stream_start() {
  std::string s;
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (req_.kind == ApiKind::kChat) {
      s += sse(chunk(json::array({{{"index", i},
                                   {"delta", {{"role", "assistant"}, {"content", ""}}},
                                   {"logprobs", nullptr},
                                   {"finish_reason", nullptr}}})));
    } else if (req_.echo) {
      s += sse(chunk(json::array({{{"index", i},
                                   {"text", choices_[i].text},
                                   {"logprobs", nullptr},
                                   {"finish_reason", nullptr}}})));
      choices_[i].text_offset = choices_[i].text.size();
    }
  }
  return s;
}

std::string ResponseBuilder::stream_event(const GenerationEvent& e) {
  Choice& c = choices_.at(static_cast<size_t>(e.choice));
  c.tokens += static_cast<int64_t>(e.out.token_ids.size());
  if (e.out.finished) c.reason = e.out.finish_reason;
  if (e.out.finish_reason == FinishReason::kError) {
    ApiError err = internal(e.out.error.empty() ? "the engine failed this request" : e.out.error);
    return sse(err.to_json());
  }
  if (e.out.text.empty() && !e.out.finished && !(req_.logprobs && !e.out.logprobs.empty()))
    return "";
  json choice = {{"index", e.choice},
                 {"logprobs", req_.logprobs ? logprobs_json(c, e.out.logprobs) : json(nullptr)},
                 {"finish_reason", finish_reason_json(c.reason)}};
  if (req_.kind == ApiKind::kChat)
    choice["delta"] = e.out.text.empty() ? json::object() : json{{"content", e.out.text}};
  else
    choice["text"] = e.out.text;
  return sse(chunk(json::array({choice})));
}

std::string ResponseBuilder::stream_end() const {
  std::string s;
  if (req_.include_usage) {
    json j = chunk(json::array());
    j["usage"] = usage();
    s += sse(j);
  }
  return s + "data: [DONE]\n\n";
}

}  // namespace pagoda::server
