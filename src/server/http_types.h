// The HTTP layer's vocabulary: limits, a parsed request, a response, and a body that is
// produced later (a non-streaming generation) or in pieces (a stream). No Boost here:
// only http_server.cpp and http_reader.cpp see Beast/Asio.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pagoda::server {

// Every limit a client could otherwise push past; `pagoda serve` flags set each one
// (src/server/README.md lists them).
struct HttpLimits {
  size_t max_header_bytes = 64 << 10;  // request line + headers (431)
  int max_headers = 128;               // header fields (431)
  int64_t max_body_bytes = 16 << 20;   // whatever the transfer encoding (413)
  double header_timeout_s = 10;        // from the request's first byte to its last header (408)
  double body_timeout_s = 60;          // from the headers to the body's last byte (408)
  double idle_timeout_s = 5;           // a kept-alive connection with no new request: closed
  double write_timeout_s = 30;         // a response write that makes no progress: closed
  int max_connections = 4096;          // open at once; past it a new one gets 503 and close
  // Request bytes held at once over all connections (bodies being read or handled): a
  // new read past it gets 503, so many large bodies at once cannot exhaust memory.
  int64_t max_buffered_bytes = int64_t{1} << 30;
};

struct HttpRequest {
  std::string method;
  std::string target;                                        // as sent
  std::string path;                                          // target without the query
  int version = 11;                                          // 10 or 11
  std::vector<std::pair<std::string, std::string>> headers;  // names as sent
  std::string body;
  // The value of the first header with this name (case-insensitive), or nullopt.
  std::optional<std::string> header(std::string_view name) const;
};

// A body written as it is produced (server-sent events). The connection calls pull()
// whenever it can write and after each wake(); it never calls two methods at once.
class BodySource {
 public:
  virtual ~BodySource() = default;
  // Appends what is ready to *out; true once the body is complete (nothing follows).
  virtual bool pull(std::string* out) = 0;
  // Called once, before the first pull(): `wake` may be called from any thread, any
  // number of times, whenever pull() may have something new.
  virtual void set_waker(std::function<void()> wake) = 0;
};

class PendingResponse;

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // When set, the body is this stream instead: chunked to HTTP/1.1 clients, up to the
  // connection's close for HTTP/1.0 ones.
  std::shared_ptr<BodySource> stream;
  // When set, the whole response comes from this later.
  std::shared_ptr<PendingResponse> pending;
  bool close = false;  // close the connection after this response
};

// A whole response that is known only later (a non-streaming generation); destroying it
// before it is ready means the client left.
class PendingResponse {
 public:
  virtual ~PendingResponse() = default;
  // The response once ready, else nullopt.
  virtual std::optional<HttpResponse> poll() = 0;
  virtual void set_waker(std::function<void()> wake) = 0;
};

}  // namespace pagoda::server
