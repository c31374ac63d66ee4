// Reads one HTTP/1.x request from bytes as they arrive, within HttpLimits. Beast's parser
// does the grammar; this adds the checks a server behind a proxy needs so that both read
// the same request boundaries (one Content-Length, plain digits; Transfer-Encoding only
// "chunked", never beside a Content-Length) and the header-count limit Beast lacks.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "server/http_types.h"

namespace pagoda::server {

class RequestReader {
 public:
  enum class State { kNeedMore, kDone, kError };

  explicit RequestReader(const HttpLimits& limits);
  ~RequestReader();
  RequestReader(const RequestReader&) = delete;
  RequestReader& operator=(const RequestReader&) = delete;

  // Parses from the front of `data`; returns how many bytes it consumed. After kDone or
  // kError it consumes nothing more.
  size_t feed(std::string_view data);
  State state() const { return state_; }
  bool headers_done() const { return headers_done_; }
  // The client sent `Expect: 100-continue` and waits for a 100 before sending the body.
  bool expects_continue() const { return expects_continue_; }
  // With kError: the status to answer (400, 408, 413, 431, 501, 505) and why.
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }
  // Body bytes read so far (held by the reader until take()).
  size_t body_bytes() const;
  // With kDone: the request (once).
  HttpRequest take();

 private:
  void fail(int status, std::string message);
  void check_headers();

  struct Impl;
  std::unique_ptr<Impl> impl_;
  const HttpLimits limits_;
  State state_ = State::kNeedMore;
  bool headers_done_ = false;
  bool expects_continue_ = false;
  int error_status_ = 0;
  std::string error_message_;
};

// Case-insensitive ASCII comparison, as HTTP field names and tokens compare.
bool iequals_ascii(std::string_view a, std::string_view b);

}  // namespace pagoda::server
