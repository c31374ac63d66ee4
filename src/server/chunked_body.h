// Decodes a chunked request body (RFC 9112 section 7.1) as its bytes arrive. A byte-wise
// state machine, so the same bytes read the same however they were split; strict, so that
// a proxy in front and this server cannot disagree on where the body ends: CRLF only,
// hex sizes of at most 16 digits, extensions and trailers kept to bounded lengths and
// otherwise ignored (they carry nothing this server uses).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda::server {

class ChunkedBody {
 public:
  enum class State { kNeedMore, kDone, kError };

  // `max_body`: decoded bytes allowed (413 past it); `max_line`: bytes allowed in one
  // chunk line's extensions and in all trailer lines together (431 past it).
  ChunkedBody(int64_t max_body, size_t max_line) : max_body_(max_body), max_line_(max_line) {}

  // Decodes from the front of `data` into `body`; returns the bytes consumed (all of
  // `data`, unless the body ended or failed within it).
  size_t feed(std::string_view data, std::string& body);
  State state() const { return state_; }
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }

 private:
  enum class Step {
    kSize,
    kExt,
    kSizeLf,
    kData,
    kDataCr,
    kDataLf,
    kTrailerStart,
    kTrailer,
    kTrailerLf,
    kEndLf
  };
  bool fail(int status, std::string message);
  bool step(char c);

  const int64_t max_body_;
  const size_t max_line_;
  State state_ = State::kNeedMore;
  Step step_ = Step::kSize;
  uint64_t size_ = 0;  // of the chunk being read
  int digits_ = 0;     // of its size so far
  size_t line_ = 0;    // extension or trailer bytes so far
  int64_t total_ = 0;  // decoded so far
  int error_status_ = 0;
  std::string error_message_;
};

}  // namespace pagoda::server
