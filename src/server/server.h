// pagoda serve's HTTP server: the OpenAI routes, /health, /metrics, /tokenize and
// /detokenize over the event-driven HttpServer, in front of one Engine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "core/version.h"
#include "pagoda/engine.h"
#include "server/http_types.h"
#include "server/json_body.h"

namespace pagoda::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;      // 0: any free port
  std::string api_key;  // "" : no authentication
  std::string served_model_name;
  int max_waiting_requests = -1;  // < 0: unlimited
  HttpLimits limits;              // header, body, deadline and connection limits
  int max_json_depth =
      kDefaultMaxJsonDepth;          // request bodies nesting deeper are refused while parsed
  bool open_health_metrics = false;  // with api_key: /health and /metrics need no key
  int http_threads = 4;              // workers that parse, render templates and tokenize
  std::string chat_template;         // --chat-template, else the model's; "" when none
  std::string version = pagoda::version();        // for pagoda:build_info
  std::string revision = pagoda::git_describe();  // likewise
};

class Server {
 public:
  static Result<std::unique_ptr<Server>> create(Engine& engine, ServerConfig config);
  virtual ~Server() = default;

  virtual Status bind() = 0;  // after this, port() is the port in use
  virtual int port() const = 0;
  virtual void serve() = 0;  // blocks until shutdown() stops it
  // Stops taking requests (503), waits up to grace_s for those in flight, aborts what is
  // left, and makes serve() return.
  virtual void shutdown(double grace_s) = 0;
};

}  // namespace pagoda::server
