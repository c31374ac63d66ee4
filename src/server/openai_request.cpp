#include "server/openai_request.h"

#include <algorithm>
#include <optional>

#include "server/chat_render.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::server {
namespace {

using json = nlohmann::ordered_json;

// Reads optional fields of one body, keeping the first error.
class Fields {
 public:
  explicit Fields(const json& body) : body_(body) {}

  const json* get(const char* name) {
    auto it = body_.find(name);
    if (it == body_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  std::optional<double> number(const char* name, double lo, double hi) {
    const json* v = get(name);
    if (!v || err_) return std::nullopt;
    if (!v->is_number()) return fail(name, "must be a number");
    const double x = v->get<double>();
    if (!(x >= lo && x <= hi))
      return fail(name, str_format("must be between %g and %g, got %g", lo, hi, x));
    return x;
  }
  std::optional<int64_t> integer(const char* name, int64_t lo, int64_t hi) {
    const json* v = get(name);
    if (!v || err_) return std::nullopt;
    if (!v->is_number_integer()) return fail(name, "must be an integer");
    // Above INT64_MAX only unsigned JSON numbers go; they are out of any range asked here.
    const bool huge = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX};
    const int64_t x = huge ? 0 : v->get<int64_t>();
    if (huge || x < lo || x > hi)
      return fail(name,
                  str_format("must be between %lld and %lld, got %s", static_cast<long long>(lo),
                             static_cast<long long>(hi), v->dump().c_str()));
    return x;
  }
  // Any 64-bit integer: 0..2^64-1 as given, negatives as their two's complement.
  std::optional<uint64_t> bits64(const char* name) {
    const json* v = get(name);
    if (!v || err_) return std::nullopt;
    if (!v->is_number_integer()) return fail(name, "must be an integer");
    if (v->is_number_unsigned()) return v->get<uint64_t>();
    return static_cast<uint64_t>(v->get<int64_t>());
  }
  std::optional<bool> boolean(const char* name) {
    const json* v = get(name);
    if (!v || err_) return std::nullopt;
    if (!v->is_boolean()) return fail(name, "must be true or false");
    return v->get<bool>();
  }
  void error(const char* name, const std::string& message) {
    if (!err_) err_ = bad_request(std::string("'") + name + "' " + message, name);
  }
  const std::optional<ApiError>& err() const { return err_; }

 private:
  std::nullopt_t fail(const char* name, const std::string& message) {
    error(name, message);
    return std::nullopt;
  }
  const json& body_;
  std::optional<ApiError> err_;
};

// A JSON integer as a token id of the vocabulary, or nullopt when it is none.
std::optional<int32_t> token_id(const json& x, int32_t n_vocab) {
  if (x.is_number_unsigned()) {
    const uint64_t v = x.get<uint64_t>();
    if (v < static_cast<uint64_t>(n_vocab)) return static_cast<int32_t>(v);
  } else if (x.is_number_integer()) {
    const int64_t v = x.get<int64_t>();
    if (v >= 0 && v < n_vocab) return static_cast<int32_t>(v);
  }
  return std::nullopt;
}

std::string outside_vocab(const json& x, int32_t n_vocab) {
  return str_format("%s is outside the vocabulary (0..%d)", x.dump().c_str(), n_vocab - 1);
}

// The fields both APIs share. max_tokens is left to the caller (defaults differ).
void read_common(Fields& f, const ParseContext& ctx, GenerationRequest* r) {
  SamplingParams& p = r->params;
  if (auto v = f.number("temperature", 0, 2)) p.temperature = static_cast<float>(*v);
  if (auto v = f.number("top_p", 0, 1)) {
    if (*v <= 0)
      f.error("top_p", "must be in (0, 1]");
    else
      p.top_p = static_cast<float>(*v);
  }
  if (auto v = f.integer("top_k", -1, 1 << 30)) p.top_k = *v < 0 ? 0 : static_cast<int>(*v);
  if (auto v = f.number("min_p", 0, 1)) p.min_p = static_cast<float>(*v);
  if (auto v = f.integer("n", 1, 128)) p.n = static_cast<int>(*v);
  if (auto v = f.bits64("seed")) p.seed = *v;
  if (auto v = f.number("presence_penalty", -2, 2)) p.presence_penalty = static_cast<float>(*v);
  if (auto v = f.number("frequency_penalty", -2, 2)) p.frequency_penalty = static_cast<float>(*v);
  if (auto v = f.number("repetition_penalty", 0, 100)) {
    if (*v <= 0)
      f.error("repetition_penalty", "must be positive");
    else
      p.repetition_penalty = static_cast<float>(*v);
  }
  if (auto v = f.boolean("ignore_eos")) p.ignore_eos = *v;
  if (auto v = f.boolean("include_stop_str_in_output")) p.include_stop_str_in_output = *v;
  if (auto v = f.integer("priority", INT32_MIN, INT32_MAX)) r->priority = static_cast<int>(*v);
  if (auto v = f.boolean("stream")) r->stream = *v;
  if (const json* so = f.get("stream_options")) {
    if (!so->is_object())
      f.error("stream_options", "must be an object");
    else if (so->contains("include_usage") && !(*so)["include_usage"].is_null()) {
      if (!(*so)["include_usage"].is_boolean())
        f.error("stream_options", "include_usage must be true or false");
      else
        r->include_usage = (*so)["include_usage"].get<bool>();
    }
  }
  if (const json* stop = f.get("stop")) {
    if (stop->is_string()) {
      p.stop = {stop->get<std::string>()};
    } else if (stop->is_array() && std::all_of(stop->begin(), stop->end(),
                                               [](const json& s) { return s.is_string(); })) {
      for (const json& s : *stop) p.stop.push_back(s.get<std::string>());
    } else {
      f.error("stop", "must be a string or a list of strings");
    }
    for (const std::string& s : p.stop)
      if (s.empty()) f.error("stop", "must not contain empty strings");
  }
  if (const json* ids = f.get("stop_token_ids")) {
    if (!ids->is_array() ||
        !std::all_of(ids->begin(), ids->end(), [](const json& x) { return x.is_number_integer(); }))
      f.error("stop_token_ids", "must be a list of token ids");
    else
      for (const json& x : *ids) {
        const std::optional<int32_t> id = token_id(x, ctx.tok.n_vocab());
        if (!id) {
          f.error("stop_token_ids", "holds token id " + outside_vocab(x, ctx.tok.n_vocab()));
          break;
        }
        p.stop_token_ids.push_back(*id);
      }
  }
  if (const json* user = f.get("user"); user && !user->is_string())
    f.error("user", "must be a string");
  if (const json* m = f.get("model")) {
    if (!m->is_string())
      f.error("model", "must be a string");
    else
      r->model = m->get<std::string>();
  }
}

const char* prompt_param(const GenerationRequest& r) {
  return r.kind == ApiKind::kChat ? "messages" : "prompt";
}

// max_tokens (or max_completion_tokens) and the checks that need the prompt lengths.
std::optional<ApiError> finish(Fields& f, const ParseContext& ctx, int default_max_tokens,
                               GenerationRequest* r) {
  std::optional<int64_t> max_tokens = f.integer("max_completion_tokens", 1, 1 << 30);
  if (auto v = f.integer("max_tokens", 1, 1 << 30)) max_tokens = v;
  if (f.err()) return f.err();
  size_t longest = 0;
  for (const auto& p : r->prompts) {
    if (p.empty()) return bad_request("the prompt has no tokens", "prompt");
    longest = std::max(longest, p.size());
  }
  if (static_cast<int64_t>(longest) >= ctx.max_model_len)
    return bad_request(str_format("the prompt has %zu tokens and the model's context is %lld; "
                                  "shorten it",
                                  longest, static_cast<long long>(ctx.max_model_len)),
                       prompt_param(*r));
  if (max_tokens) {
    r->params.max_tokens = static_cast<int>(*max_tokens);
  } else if (default_max_tokens > 0) {
    r->params.max_tokens = default_max_tokens;
  } else {
    // The rest of the context, as vLLM does, within what one request can hold of the pool.
    const int64_t room = std::min(ctx.max_model_len, ctx.kv_capacity_tokens / r->params.n);
    r->params.max_tokens = static_cast<int>(std::max<int64_t>(1, room - longest));
  }
  return std::nullopt;
}

// Prompt text to ids. The prompt must leave the context room for one generated token, and
// encoding stops as soon as it cannot: a 10 MB prompt is refused after its first few
// thousand tokens, not after all of them.
std::optional<ApiError> add_text_prompt(std::string text, const ParseContext& ctx,
                                        GenerationRequest* r) {
  const size_t limit = static_cast<size_t>(std::max<int64_t>(ctx.max_model_len - 1, 0));
  BoundedEncoding e = ctx.tok.encode_bounded(text, true, true, limit);
  if (e.over_limit)
    return bad_request(
        str_format("the prompt has %lld or more tokens and the model's context "
                   "is %lld; shorten it",
                   static_cast<long long>(limit + 1), static_cast<long long>(ctx.max_model_len)),
        prompt_param(*r));
  r->prompt_texts.push_back(std::move(text));
  r->prompts.push_back(std::move(e.ids));
  return std::nullopt;
}

bool is_token_list(const json& j) {
  return j.is_array() && !j.empty() &&
         std::all_of(j.begin(), j.end(), [](const json& x) { return x.is_number_integer(); });
}

std::optional<ApiError> add_token_prompt(const json& j, const Tokenizer& tok,
                                         GenerationRequest* r) {
  std::vector<int32_t> ids;
  for (const json& x : j) {
    const std::optional<int32_t> id = token_id(x, tok.n_vocab());
    if (!id) return bad_request("token id " + outside_vocab(x, tok.n_vocab()), "prompt");
    ids.push_back(*id);
  }
  r->prompt_texts.push_back(tok.decode(ids));
  r->prompts.push_back(std::move(ids));
  return std::nullopt;
}

}  // namespace

ApiResult<GenerationRequest> parse_completion_request(const json& body, const ParseContext& ctx) {
  if (!body.is_object()) return bad_request("the request body must be a JSON object");
  GenerationRequest r;
  r.kind = ApiKind::kCompletion;
  Fields f(body);
  read_common(f, ctx, &r);
  if (auto v = f.boolean("echo")) r.echo = *v;
  if (auto v = f.integer("logprobs", 0, 20)) {
    r.logprobs = true;
    r.top_logprobs = static_cast<int>(*v);
  }
  if (f.err()) return *f.err();
  if (r.echo && r.logprobs)
    return bad_request("echo with logprobs (prompt log-probabilities) is not supported", "echo");
  const json* prompt = f.get("prompt");
  if (!prompt) return bad_request("'prompt' is required", "prompt");
  if (prompt->is_string()) {
    if (auto e = add_text_prompt(prompt->get<std::string>(), ctx, &r)) return *e;
  } else if (is_token_list(*prompt)) {
    if (auto e = add_token_prompt(*prompt, ctx.tok, &r)) return *e;
  } else if (prompt->is_array() && !prompt->empty()) {
    for (const json& p : *prompt) {
      if (p.is_string()) {
        if (auto e = add_text_prompt(p.get<std::string>(), ctx, &r)) return *e;
      } else if (is_token_list(p)) {
        if (auto e = add_token_prompt(p, ctx.tok, &r)) return *e;
      } else {
        return bad_request("a list 'prompt' must hold strings or lists of token ids", "prompt");
      }
    }
  } else {
    return bad_request(
        "'prompt' must be a string, a list of strings, token ids or a list of token-id lists",
        "prompt");
  }
  if (r.prompts.size() * static_cast<size_t>(r.params.n) > 256)
    return bad_request("too many completions in one request (prompts x n over 256)", "n");
  if (r.logprobs) r.params.logprobs = r.top_logprobs;
  if (auto e = finish(f, ctx, 16, &r)) return *e;
  return r;
}

ApiResult<GenerationRequest> parse_chat_request(const json& body, const ParseContext& ctx) {
  if (!body.is_object()) return bad_request("the request body must be a JSON object");
  GenerationRequest r;
  r.kind = ApiKind::kChat;
  Fields f(body);
  read_common(f, ctx, &r);
  if (auto v = f.boolean("logprobs")) r.logprobs = *v;
  if (auto v = f.integer("top_logprobs", 0, 20)) {
    if (!r.logprobs) f.error("top_logprobs", "needs 'logprobs': true");
    r.top_logprobs = static_cast<int>(*v);
  }
  if (f.err()) return *f.err();
  if (r.logprobs) r.params.logprobs = r.top_logprobs;
  const json* messages = f.get("messages");
  if (!messages || !messages->is_array() || messages->empty())
    return bad_request("'messages' must be a non-empty list", "messages");
  for (const json& m : *messages) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return bad_request("each message must be an object with a string 'role'", "messages");
    if (auto t = message_text(m.value("content", json())); !t)
      return bad_request(t.status().message(), "messages");
  }
  bool add_generation_prompt = true;
  if (auto v = f.boolean("add_generation_prompt")) add_generation_prompt = *v;
  const json* tools = f.get("tools");
  if (tools && !tools->is_array()) f.error("tools", "must be a list");
  if (f.err()) return *f.err();
  auto text = ctx.chat.render(*messages, add_generation_prompt, tools ? *tools : json());
  if (!text) return bad_request(text.status().message(), "messages");
  if (auto e = add_text_prompt(std::move(text).value(), ctx, &r)) return *e;
  if (auto e = finish(f, ctx, 0, &r)) return *e;
  return r;
}

}  // namespace pagoda::server
