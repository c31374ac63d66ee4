#include "server/server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "model/model_config.h"
#include "server/chat_render.h"
#include "server/connection_watch.h"
#include "server/generation.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::server {
namespace {

using nlohmann::json;
// Request bodies keep their key order (chat messages and tools reach the template as sent).
using ojson = nlohmann::ordered_json;

class ServerImpl;

// How often a non-streaming request checks that its client is still connected.
constexpr double kClientCheckInterval = 0.1;

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

// A streaming response's state, owned by httplib's content provider: destroyed when the
// response is done or the client has gone, which aborts an unfinished generation.
struct StreamState {
  std::unique_ptr<InflightGuard> guard;
  GenerationRequest request;
  std::unique_ptr<Generation> gen;
  std::unique_ptr<ResponseBuilder> builder;
  std::function<void()> on_destroy;
  Metrics* metrics = nullptr;
  bool started = false;
  double last_write = 0;
  ~StreamState() {
    builder.reset();
    gen.reset();  // aborts when unfinished
    if (on_destroy) on_destroy();
  }
};

class ServerImpl : public Server {
 public:
  ServerImpl(Engine& engine, ServerConfig config, ChatRenderer chat)
      : engine_(engine),
        config_(std::move(config)),
        chat_(std::move(chat)),
        metrics_(MetricsInfo{config_.served_model_name, config_.version, config_.revision}),
        rng_(std::random_device{}()) {
    setup();
  }

  Status bind() override {
    if (config_.port == 0) {
      port_ = http_.bind_to_any_port(config_.host);
      if (port_ <= 0) return io_error("cannot listen on " + config_.host);
    } else if (!http_.bind_to_port(config_.host, config_.port)) {
      return io_error(str_format("cannot listen on %s:%d (in use, or a bad address)",
                                 config_.host.c_str(), config_.port));
    } else {
      port_ = config_.port;
    }
    return Status::ok();
  }
  int port() const override { return port_; }
  void serve() override { http_.listen_after_bind(); }

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
      const double hard = Engine::now() + 10;
      while (inflight_ > 0 && Engine::now() < hard)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    http_.stop();
  }

 private:
  void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
    res.set_content(dump(e.to_json()), "application/json");
    metrics_.error_response(e.status);
  }

  ApiResult<ojson> parse_body(const httplib::Request& req) {
    ojson j = ojson::parse(req.body, nullptr, false);
    if (j.is_discarded()) return bad_request("the request body is not valid JSON");
    if (!j.is_object()) return bad_request("the request body must be a JSON object");
    return j;
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

  void handle_generate(const httplib::Request& hreq, httplib::Response& res, ApiKind kind) {
    auto body = parse_body(hreq);
    if (!body.ok()) return send_error(res, body.error());
    const ParseContext ctx = context();
    auto parsed = kind == ApiKind::kChat ? parse_chat_request(body.value(), ctx)
                                         : parse_completion_request(body.value(), ctx);
    if (!parsed.ok()) return send_error(res, parsed.error());
    GenerationRequest& r = parsed.value();
    if (!r.model.empty() && r.model != config_.served_model_name)
      return send_error(res,
                        not_found_error("the model '" + r.model + "' does not exist", "model"));
    if (auto e = admit()) return send_error(res, *e);

    auto st = std::make_shared<StreamState>();
    st->guard = std::make_unique<InflightGuard>(inflight_);
    st->metrics = &metrics_;
    st->request = std::move(r);
    const std::string id = new_id(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-");
    auto gen = Generation::start(engine_, metrics_, st->request, id);
    if (!gen.ok()) return send_error(res, gen.error());
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
    if (!st->request.stream) return wait_and_respond(hreq, res, *st);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [st](size_t, httplib::DataSink& sink) { return pump(*st, sink); });
  }

  // A non-streaming response: waits for the whole generation, checking now and then that
  // the client is still there; one that left aborts the generation (when `st` goes).
  void wait_and_respond(const httplib::Request& hreq, httplib::Response& res, StreamState& st) {
    ConnectionWatch watch(
        ConnectionAddress{hreq.local_addr, hreq.local_port, hreq.remote_addr, hreq.remote_port});
    double next_check = Engine::now() + kClientCheckInterval;
    while (!st.gen->done()) {
      if (auto e = st.gen->next(kClientCheckInterval)) st.builder->add(*e);
      if (Engine::now() < next_check) continue;
      next_check = Engine::now() + kClientCheckInterval;
      if (watch.client_gone()) {
        // Nobody reads this; a body keeps the error handler from answering (and counting).
        res.status = 499;  // as nginx logs a client that closed its request
        res.set_header("Connection", "close");
        res.set_content("client closed the connection", "text/plain");
        return;
      }
    }
    if (!st.builder->error().empty()) return send_error(res, internal(st.builder->error()));
    res.set_content(dump(st.builder->response()), "application/json");
  }

  // Writes what the generation has ready; false when the client is gone.
  static bool pump(StreamState& st, httplib::DataSink& sink) {
    std::string buf;
    if (!st.started) {
      st.started = true;
      buf = st.builder->stream_start();
    }
    bool failed = false;
    if (auto e = st.gen->next(buf.empty() ? 1.0 : 0.0)) {
      failed |= e->out.finish_reason == FinishReason::kError;
      buf += st.builder->stream_event(*e);
      // Send what else is ready in one write.
      while (!failed && buf.size() < (1 << 16))
        if (auto more = st.gen->next(0)) {
          failed |= more->out.finish_reason == FinishReason::kError;
          buf += st.builder->stream_event(*more);
        } else {
          break;
        }
    }
    if (failed && st.metrics) st.metrics->error_response(500);  // the error event's code
    const bool end = failed || st.gen->done();
    if (end) buf += failed ? std::string("data: [DONE]\n\n") : st.builder->stream_end();
    // A comment line now and then finds a client that left while its request waits.
    if (buf.empty() && Engine::now() - st.last_write > 2.0) buf = ": keep-alive\n\n";
    if (!buf.empty()) {
      if (!sink.write(buf.data(), buf.size())) return false;
      st.last_write = Engine::now();
    }
    if (end) sink.done();
    return true;
  }

  void handle_tokenize(const httplib::Request& hreq, httplib::Response& res) {
    auto body = parse_body(hreq);
    if (!body.ok()) return send_error(res, body.error());
    const ojson& b = body.value();
    const Tokenizer& tok = engine_.tokenizer();
    bool add_special = true;
    if (b.contains("add_special_tokens")) {
      if (!b["add_special_tokens"].is_boolean())
        return send_error(
            res, bad_request("'add_special_tokens' must be true or false", "add_special_tokens"));
      add_special = b["add_special_tokens"].get<bool>();
    }
    std::string text;
    if (b.contains("prompt") && b["prompt"].is_string()) {
      text = b["prompt"].get<std::string>();
    } else if (b.contains("messages")) {
      const ojson& m = b["messages"];
      if (!m.is_array() || m.empty())
        return send_error(res, bad_request("'messages' must be a non-empty list", "messages"));
      for (const ojson& x : m)
        if (!x.is_object() || !x.contains("role") || !x["role"].is_string())
          return send_error(
              res, bad_request("each message must be an object with a string 'role'", "messages"));
      bool agp = true;
      if (b.contains("add_generation_prompt") && b["add_generation_prompt"].is_boolean())
        agp = b["add_generation_prompt"].get<bool>();
      // As vLLM's /tokenize: the chat request's tools are rendered too.
      ojson tools;
      if (b.contains("tools") && !b["tools"].is_null()) {
        if (!b["tools"].is_array())
          return send_error(res, bad_request("'tools' must be a list", "tools"));
        tools = b["tools"];
      }
      auto t = chat_.render(m, agp, tools);
      if (!t) return send_error(res, bad_request(t.status().message(), "messages"));
      text = *t;
    } else {
      return send_error(res, bad_request("give 'prompt' (a string) or 'messages'", "prompt"));
    }
    const std::vector<int32_t> ids = tok.encode(text, add_special, true);
    json out = {
        {"count", ids.size()}, {"max_model_len", engine_.config().max_model_len}, {"tokens", ids}};
    res.set_content(dump(out), "application/json");
  }

  void handle_detokenize(const httplib::Request& hreq, httplib::Response& res) {
    auto body = parse_body(hreq);
    if (!body.ok()) return send_error(res, body.error());
    const ojson& b = body.value();
    const Tokenizer& tok = engine_.tokenizer();
    if (!b.contains("tokens") || !b["tokens"].is_array())
      return send_error(res, bad_request("'tokens' must be a list of token ids", "tokens"));
    std::vector<int32_t> ids;
    for (const ojson& x : b["tokens"]) {
      const bool valid = x.is_number_integer() &&
                         !(x.is_number_unsigned() && x.get<uint64_t>() > INT32_MAX) &&
                         x.get<int64_t>() >= 0 && x.get<int64_t>() < tok.n_vocab();
      if (!valid)
        return send_error(res, bad_request("token ids must be integers in 0.." +
                                               std::to_string(tok.n_vocab() - 1),
                                           "tokens"));
      ids.push_back(x.get<int32_t>());
    }
    res.set_content(dump(json{{"prompt", tok.decode(ids)}}), "application/json");
  }

  void setup() {
    http_.new_task_queue = [n = config_.http_threads] { return new httplib::ThreadPool(n); };
    http_.set_payload_max_length(static_cast<size_t>(config_.max_body_bytes));
    http_.set_keep_alive_timeout(2);
    http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (config_.api_key.empty() || req.path.rfind("/v1/", 0) != 0)
        return httplib::Server::HandlerResponse::Unhandled;
      if (req.get_header_value("Authorization") == "Bearer " + config_.api_key)
        return httplib::Server::HandlerResponse::Unhandled;
      send_error(res, unauthorized(req.has_header("Authorization") ? "the API key is wrong"
                                                                   : "an API key is required"));
      return httplib::Server::HandlerResponse::Handled;
    });
    // httplib's own errors (no route, body too large, unreadable request) get an OpenAI body.
    http_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      ApiError e;
      if (res.status == 404)
        e = not_found_error("no route " + req.method + " " + req.path);
      else if (res.status == 413)
        e = payload_too_large(str_format("the request body is over the limit of %lld bytes",
                                         static_cast<long long>(config_.max_body_bytes)));
      else if (res.status >= 500)
        e = internal("internal server error");
      else
        e = bad_request(str_format("the request could not be read (HTTP %d)", res.status));
      e.status = res.status;
      send_error(res, e);
    });
    http_.set_exception_handler(
        [this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "internal error";
          try {
            if (ep) std::rethrow_exception(ep);
          } catch (const std::exception& ex) {
            what = ex.what();
          } catch (...) {
          }
          send_error(res, internal(what));
        });

    http_.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& s) {
      handle_generate(q, s, ApiKind::kCompletion);
    });
    http_.Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& s) {
      handle_generate(q, s, ApiKind::kChat);
    });
    http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& s) {
      json m = {{"id", config_.served_model_name},
                {"object", "model"},
                {"created", static_cast<int64_t>(std::time(nullptr))},
                {"owned_by", "pagoda"},
                {"max_model_len", engine_.config().max_model_len}};
      s.set_content(dump(json{{"object", "list"}, {"data", json::array({m})}}), "application/json");
    });
    http_.Get("/health", [this](const httplib::Request&, httplib::Response& s) {
      if (draining_) return send_error(s, overloaded("the server is shutting down", 5));
      // Unhealthy while the engine's latest model run failed (a broken device stays so;
      // a passing fault clears with the next step that runs), as vLLM's 500 for a dead
      // engine. Not counted in request_errors_total: a probe is not a request.
      const EngineStats es = engine_.stats();
      if (es.last_step_failed) {
        const ApiError e = internal(
            str_format("the engine's latest step failed (%lld failed so far); see the server log",
                       static_cast<long long>(es.failed_steps)));
        s.status = e.status;
        s.set_content(dump(e.to_json()), "application/json");
        return;
      }
      s.set_content("", "text/plain");
    });
    http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& s) {
      s.set_content(metrics_.render(engine_.stats()), "text/plain; version=0.0.4; charset=utf-8");
    });
    http_.Post("/tokenize",
               [this](const httplib::Request& q, httplib::Response& s) { handle_tokenize(q, s); });
    http_.Post("/detokenize", [this](const httplib::Request& q, httplib::Response& s) {
      handle_detokenize(q, s);
    });
  }

  Engine& engine_;
  const ServerConfig config_;
  const ChatRenderer chat_;
  Metrics metrics_;
  httplib::Server http_;
  int port_ = 0;

  std::atomic<bool> draining_{false};
  std::atomic<int> inflight_{0};         // generation responses not yet finished
  std::atomic<int> engine_requests_{0};  // engine requests of those
  std::mutex live_mu_;
  std::set<std::string> live_;  // engine ids in flight, to abort at shutdown

  std::mutex rng_mu_;
  std::mt19937_64 rng_;
  uint64_t counter_ = 0;
};

}  // namespace

Result<std::unique_ptr<Server>> Server::create(Engine& engine, ServerConfig config) {
  if (config.served_model_name.empty()) return invalid_argument("the served model name is empty");
  PAGODA_ASSIGN_OR_RETURN(ChatRenderer chat, ChatRenderer::create(ChatRenderer::source_for(
                                                 engine.tokenizer(), config.chat_template)));
  return std::unique_ptr<Server>(new ServerImpl(engine, std::move(config), std::move(chat)));
}

}  // namespace pagoda::server
