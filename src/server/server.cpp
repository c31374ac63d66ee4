#include "server/server.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "model/model_config.h"
#include "server/auth.h"
#include "server/chat_render.h"
#include "server/generation.h"
#include "server/http_reader.h"
#include "server/http_server.h"
#include "server/json_body.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::server {
namespace {

using nlohmann::json;
// Request bodies keep their key order (chat messages and tools reach the template as sent).
using ojson = nlohmann::ordered_json;

// Counts a request in flight from its admission until its response is destroyed.
class InflightGuard {
 public:
  explicit InflightGuard(std::atomic<int>& n) : n_(n) { ++n_; }
  ~InflightGuard() { --n_; }
  InflightGuard(const InflightGuard&) = delete;
  InflightGuard& operator=(const InflightGuard&) = delete;

 private:
  std::atomic<int>& n_;
};

// One generation's response state, owned by the connection: destroyed when the response
// is out or the client has gone, which aborts an unfinished generation.
struct GenState {
  std::unique_ptr<InflightGuard> guard;
  GenerationRequest request;
  std::unique_ptr<Generation> gen;
  std::unique_ptr<ResponseBuilder> builder;
  std::function<void()> on_destroy;
  Metrics* metrics = nullptr;
  ~GenState() {
    builder.reset();
    gen.reset();  // aborts when unfinished
    if (on_destroy) on_destroy();
  }
};

HttpResponse json_response(const std::string& body, int status = 200) {
  HttpResponse r;
  r.status = status;
  r.body = body;
  return r;
}

HttpResponse error_response(const ApiError& e) {
  HttpResponse r = json_response(dump(e.to_json()), e.status);
  if (e.retry_after_s > 0) r.headers.emplace_back("Retry-After", std::to_string(e.retry_after_s));
  return r;
}

// Server-sent events of a streaming completion.
class EventStream : public BodySource {
 public:
  explicit EventStream(std::unique_ptr<GenState> st) : st_(std::move(st)) {}
  void set_waker(std::function<void()> wake) override { st_->gen->set_listener(wake); }
  bool pull(std::string* out) override {
    if (!started_) {
      started_ = true;
      *out = st_->builder->stream_start();
    }
    bool failed = false;
    while (!failed && out->size() < (1 << 16)) {  // the rest after this write
      auto e = st_->gen->poll();
      if (!e) break;
      failed |= e->out.finish_reason == FinishReason::kError;
      *out += st_->builder->stream_event(*e);
    }
    if (failed) st_->metrics->error_response(500);  // the error event's code
    const bool end = failed || st_->gen->done();
    if (end) *out += failed ? std::string("data: [DONE]\n\n") : st_->builder->stream_end();
    return end;
  }

 private:
  std::unique_ptr<GenState> st_;
  bool started_ = false;
};

// A non-streaming completion: the whole response once the generation ends.
class WholeResponse : public PendingResponse {
 public:
  WholeResponse(std::unique_ptr<GenState> st, Metrics& metrics)
      : st_(std::move(st)), metrics_(metrics) {}
  void set_waker(std::function<void()> wake) override { st_->gen->set_listener(wake); }
  std::optional<HttpResponse> poll() override {
    while (auto e = st_->gen->poll()) st_->builder->add(*e);
    if (!st_->gen->done()) return std::nullopt;
    if (!st_->builder->error().empty()) {
      metrics_.error_response(500);
      return error_response(internal(st_->builder->error()));
    }
    return json_response(dump(st_->builder->response()));
  }

 private:
  std::unique_ptr<GenState> st_;
  Metrics& metrics_;
};

class ServerImpl : public Server {
 public:
  ServerImpl(Engine& engine, ServerConfig config, ChatRenderer chat)
      : engine_(engine),
        config_(std::move(config)),
        chat_(std::move(chat)),
        metrics_(MetricsInfo{config_.served_model_name, config_.version, config_.revision}),
        rng_(std::random_device{}()),
        http_(config_.limits, config_.http_threads) {
    setup();
  }

  Status bind() override { return http_.bind(config_.host, config_.port); }
  int port() const override { return http_.port(); }
  void serve() override { http_.run(); }

  void shutdown(double grace_s) override {
    draining_ = true;
    const double deadline = Engine::now() + grace_s;
    while (inflight_ > 0 && Engine::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (inflight_ > 0) {
      std::vector<std::string> ids;
      {
        std::lock_guard<std::mutex> l(live_mu_);
        ids.assign(live_.begin(), live_.end());
      }
      for (const std::string& id : ids) engine_.abort(id);
      // Time for the aborted streams to send their last event; a client that does not
      // read by then is cut off, so shutdown never waits on a slow reader.
      const double hard = Engine::now() + 0.5;
      while (inflight_ > 0 && Engine::now() < hard)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    http_.stop();
  }

 private:
  HttpResponse send_error(const ApiError& e) {
    metrics_.error_response(e.status);
    return error_response(e);
  }

  ParseContext context() const {
    const EngineStats s = engine_.stats();
    return ParseContext{engine_.tokenizer(), chat_, engine_.config().max_model_len,
                        static_cast<int64_t>(s.kv_blocks_total) * engine_.config().block_size};
  }

  std::string new_id(const char* prefix) {
    std::lock_guard<std::mutex> l(rng_mu_);
    return str_format("%s%llx%llx", prefix, static_cast<unsigned long long>(rng_()),
                      static_cast<unsigned long long>(++counter_));
  }

  // Whether the queue has room, as --max-waiting-requests allows.
  std::optional<ApiError> admit() {
    if (draining_) return overloaded("the server is shutting down", 5);
    if (config_.max_waiting_requests < 0) return std::nullopt;
    const EngineStats s = engine_.stats();
    const int waiting = std::max(s.num_waiting, engine_requests_.load() - s.num_running);
    if (waiting >= config_.max_waiting_requests)
      return overloaded(str_format("%d requests are waiting (--max-waiting-requests %d); retry "
                                   "later",
                                   waiting, config_.max_waiting_requests),
                        1);
    return std::nullopt;
  }

  void track(const Generation& g) {
    std::lock_guard<std::mutex> l(live_mu_);
    for (const std::string& id : g.ids()) live_.insert(id);
  }
  void untrack(const std::vector<std::string>& ids) {
    std::lock_guard<std::mutex> l(live_mu_);
    for (const std::string& id : ids) live_.erase(id);
  }

  ApiResult<ojson> body_of(const HttpRequest& req) const {
    return parse_json_body(req.body, config_.max_json_depth);
  }

  HttpResponse handle_generate(const HttpRequest& hreq, ApiKind kind) {
    if (draining_) return send_error(overloaded("the server is shutting down", 5));
    auto body = body_of(hreq);
    if (!body.ok()) return send_error(body.error());
    const ParseContext ctx = context();
    auto parsed = kind == ApiKind::kChat ? parse_chat_request(body.value(), ctx)
                                         : parse_completion_request(body.value(), ctx);
    if (!parsed.ok()) return send_error(parsed.error());
    GenerationRequest& r = parsed.value();
    if (!r.model.empty() && r.model != config_.served_model_name)
      return send_error(
          not_found_error("the model " + quote_for_error(r.model) + " does not exist", "model"));
    if (auto e = admit()) return send_error(*e);

    auto st = std::make_unique<GenState>();
    st->guard = std::make_unique<InflightGuard>(inflight_);
    st->metrics = &metrics_;
    st->request = std::move(r);
    const std::string id = new_id(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-");
    auto gen = Generation::start(engine_, metrics_, st->request, id);
    if (!gen.ok()) return send_error(gen.error());
    st->gen = std::move(gen.value());
    track(*st->gen);
    const int n_engine = static_cast<int>(st->gen->ids().size());
    engine_requests_ += n_engine;
    st->on_destroy = [this, ids = st->gen->ids(), n_engine] {
      untrack(ids);
      engine_requests_ -= n_engine;
    };
    st->builder = std::make_unique<ResponseBuilder>(
        st->request, engine_.tokenizer(), id, config_.served_model_name, st->gen->num_choices());
    HttpResponse res;
    if (!st->request.stream) {
      res.pending = std::make_shared<WholeResponse>(std::move(st), metrics_);
      return res;
    }
    res.content_type = "text/event-stream";
    res.headers.emplace_back("Cache-Control", "no-cache");
    res.stream = std::make_shared<EventStream>(std::move(st));
    return res;
  }

  HttpResponse handle_tokenize(const HttpRequest& hreq) {
    auto body = body_of(hreq);
    if (!body.ok()) return send_error(body.error());
    const ojson& b = body.value();
    const Tokenizer& tok = engine_.tokenizer();
    bool add_special = true;
    if (b.contains("add_special_tokens")) {
      if (!b["add_special_tokens"].is_boolean())
        return send_error(
            bad_request("'add_special_tokens' must be true or false", "add_special_tokens"));
      add_special = b["add_special_tokens"].get<bool>();
    }
    std::string text;
    if (b.contains("prompt") && b["prompt"].is_string()) {
      text = b["prompt"].get<std::string>();
    } else if (b.contains("messages")) {
      const ojson& m = b["messages"];
      if (!m.is_array() || m.empty())
        return send_error(bad_request("'messages' must be a non-empty list", "messages"));
      for (const ojson& x : m)
        if (!x.is_object() || !x.contains("role") || !x["role"].is_string())
          return send_error(
              bad_request("each message must be an object with a string 'role'", "messages"));
      bool agp = true;
      if (b.contains("add_generation_prompt") && b["add_generation_prompt"].is_boolean())
        agp = b["add_generation_prompt"].get<bool>();
      // As vLLM's /tokenize: the chat request's tools are rendered too.
      ojson tools;
      if (b.contains("tools") && !b["tools"].is_null()) {
        if (!b["tools"].is_array())
          return send_error(bad_request("'tools' must be a list", "tools"));
        tools = b["tools"];
      }
      auto t = chat_.render(m, agp, tools);
      if (!t) return send_error(bad_request(t.status().message(), "messages"));
      text = *t;
    } else {
      return send_error(bad_request("give 'prompt' (a string) or 'messages'", "prompt"));
    }
    const std::vector<int32_t> ids = tok.encode(text, add_special, true);
    json out = {
        {"count", ids.size()}, {"max_model_len", engine_.config().max_model_len}, {"tokens", ids}};
    return json_response(dump(out));
  }

  HttpResponse handle_detokenize(const HttpRequest& hreq) {
    auto body = body_of(hreq);
    if (!body.ok()) return send_error(body.error());
    const ojson& b = body.value();
    const Tokenizer& tok = engine_.tokenizer();
    if (!b.contains("tokens") || !b["tokens"].is_array())
      return send_error(bad_request("'tokens' must be a list of token ids", "tokens"));
    std::vector<int32_t> ids;
    for (const ojson& x : b["tokens"]) {
      const bool valid = x.is_number_integer() &&
                         !(x.is_number_unsigned() && x.get<uint64_t>() > INT32_MAX) &&
                         x.get<int64_t>() >= 0 && x.get<int64_t>() < tok.n_vocab();
      if (!valid)
        return send_error(bad_request(
            "token ids must be integers in 0.." + std::to_string(tok.n_vocab() - 1), "tokens"));
      ids.push_back(x.get<int32_t>());
    }
    return json_response(dump(json{{"prompt", tok.decode(ids)}}));
  }

  HttpResponse handle_health() {
    if (draining_) return send_error(overloaded("the server is shutting down", 5));
    // Unhealthy while the engine's latest model run failed (a broken device stays so;
    // a passing fault clears with the next step that runs), as vLLM's 500 for a dead
    // engine. Not counted in request_errors_total: a probe is not a request.
    const EngineStats es = engine_.stats();
    if (es.last_step_failed)
      return error_response(internal(
          str_format("the engine's latest step failed (%lld failed so far); see the server log",
                     static_cast<long long>(es.failed_steps))));
    HttpResponse r;
    r.content_type = "text/plain";
    return r;
  }

  // With --api-key every route needs the key; --open-health-metrics exempts the probes.
  std::optional<HttpResponse> authenticate(const HttpRequest& req) {
    if (config_.api_key.empty()) return std::nullopt;
    if (config_.open_health_metrics && (req.path == "/health" || req.path == "/metrics"))
      return std::nullopt;
    const auto h = req.header("Authorization");
    if (h)
      if (auto t = bearer_token(*h); t && same_key(*t, config_.api_key)) return std::nullopt;
    HttpResponse r = send_error(unauthorized(h ? "the API key is wrong"
                                               : "an API key is required (Authorization: "
                                                 "Bearer KEY)"));
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
  }

  void setup() {
    http_.set_error_response([this](int status, const std::string& message) {
      ApiError e;
      if (status == 404)
        e = not_found_error(message);
      else if (status == 413)
        e = payload_too_large(
            str_format("the request body is over the limit of %lld bytes (--max-request-body)",
                       static_cast<long long>(config_.limits.max_body_bytes)));
      else if (status == 503)
        e = overloaded(message, 1);
      else if (status >= 500 && status != 501 && status != 505)
        e = internal(message);
      else
        e = bad_request(message);
      e.status = status;
      return send_error(e);
    });
    http_.set_guard([this](const HttpRequest& req) { return authenticate(req); });

    http_.route("POST", "/v1/completions",
                [this](const HttpRequest& q) { return handle_generate(q, ApiKind::kCompletion); });
    http_.route("POST", "/v1/chat/completions",
                [this](const HttpRequest& q) { return handle_generate(q, ApiKind::kChat); });
    http_.route(
        "GET", "/v1/models",
        [this](const HttpRequest&) {
          json m = {{"id", config_.served_model_name},
                    {"object", "model"},
                    {"created", static_cast<int64_t>(std::time(nullptr))},
                    {"owned_by", "pagoda"},
                    {"max_model_len", engine_.config().max_model_len}};
          return json_response(dump(json{{"object", "list"}, {"data", json::array({m})}}));
        },
        true);
    // Liveness and metrics answer on the event loop: they never wait behind generation,
    // template or tokenizer work.
    http_.route(
        "GET", "/health", [this](const HttpRequest&) { return handle_health(); }, true);
    http_.route(
        "GET", "/metrics",
        [this](const HttpRequest&) {
          HttpResponse r;
          r.content_type = "text/plain; version=0.0.4; charset=utf-8";
          r.body = metrics_.render(engine_.stats());
          return r;
        },
        true);
    http_.route("POST", "/tokenize", [this](const HttpRequest& q) { return handle_tokenize(q); });
    http_.route("POST", "/detokenize",
                [this](const HttpRequest& q) { return handle_detokenize(q); });
  }

  Engine& engine_;
  const ServerConfig config_;
  const ChatRenderer chat_;
  Metrics metrics_;

  std::atomic<bool> draining_{false};
  std::atomic<int> inflight_{0};         // generation responses not yet finished
  std::atomic<int> engine_requests_{0};  // engine requests of those
  std::mutex live_mu_;
  std::set<std::string> live_;  // engine ids in flight, to abort at shutdown

  std::mutex rng_mu_;
  std::mt19937_64 rng_;
  uint64_t counter_ = 0;
  // Last, so it goes first: its connections' responses still reach the members above.
  HttpServer http_;
};

}  // namespace

Result<std::unique_ptr<Server>> Server::create(Engine& engine, ServerConfig config) {
  if (config.served_model_name.empty()) return invalid_argument("the served model name is empty");
  PAGODA_ASSIGN_OR_RETURN(ChatRenderer chat, ChatRenderer::create(ChatRenderer::source_for(
                                                 engine.tokenizer(), config.chat_template)));
  return std::unique_ptr<Server>(new ServerImpl(engine, std::move(config), std::move(chat)));
}

}  // namespace pagoda::server
