// An event-driven HTTP/1.1 server (Boost.Asio + Beast's parser): one event-loop thread
// holds every connection with its deadlines, so idle or slow clients cost a socket and a
// few KiB, not a thread; request handlers that parse, render and tokenize run on a small
// worker pool; handlers marked `on_loop` (health, metrics) answer on the loop itself and
// never wait behind that work. Responses can arrive later (PendingResponse) or stream
// (BodySource); a client that leaves drops them, which aborts their work.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "server/http_types.h"

namespace pagoda::server {

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

class HttpServer {
 public:
  HttpServer(HttpLimits limits, int worker_threads);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Set up before bind(). A path with no route is a 404; a route's path with another
  // method is a 405 naming the allowed ones.
  void route(const std::string& method, const std::string& path, HttpHandler handler,
             bool on_loop = false);
  // Runs on the loop before routing (authentication, say): a response answers the request.
  void set_guard(std::function<std::optional<HttpResponse>(const HttpRequest&)> guard);
  // Builds the body of the errors the server answers itself (limits, no route, 503).
  void set_error_response(std::function<HttpResponse(int status, const std::string& message)> f);

  Status bind(const std::string& host, int port);  // port 0: any free port
  int port() const;
  // Runs the event loop until stop(); returns at once if stop() came first.
  void run();
  // Closes the listener and every connection (their pending and streamed responses are
  // dropped), and makes run() return. Any thread, any time, more than once.
  void stop();
  int open_connections() const;

  struct Impl;  // opaque; named here so the source file's connection class can hold it

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace pagoda::server
