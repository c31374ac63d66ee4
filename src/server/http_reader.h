// Reads one HTTP/1.x request from bytes as they arrive, within HttpLimits. Beast's parser
// reads the header; the body's framing is ours (a count, or ChunkedBody), as are the checks
// a server behind a proxy needs so that both read the same request boundaries (one
// Content-Length, plain digits; Transfer-Encoding only "chunked", never beside a
// Content-Length) and the header-count limit Beast lacks. The same bytes read the same
// however they are split; the HTTP fuzzer holds it to that.
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

  // Parses from the front of `data`; returns how many bytes it consumed. The caller keeps
  // what was not consumed and passes it again, with more, at the front of the next call.
  // The header is held, unparsed, until its blank line or the header limit arrives, so that
  // a request reads the same (and fails the same) however its bytes were split. After kDone
  // or kError it consumes nothing more.
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
  size_t header_prefix(std::string_view data);
  size_t parse_header(std::string_view data);
  size_t read_body(std::string_view data);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  const HttpLimits limits_;
  State state_ = State::kNeedMore;
  bool headers_done_ = false;
  size_t header_scanned_ = 0;  // bytes of the header already searched for a blank line
  size_t header_used_ = 0;     // bytes of the header Beast has consumed
  bool expects_continue_ = false;
  int error_status_ = 0;
  std::string error_message_;
};

// Case-insensitive ASCII comparison, as HTTP field names and tokens compare.
bool iequals_ascii(std::string_view a, std::string_view b);

}  // namespace pagoda::server
