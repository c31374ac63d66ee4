#include "server/chunked_body.h"

#include <algorithm>

#include "core/status.h"

namespace pagoda::server {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Bytes RFC 9110 allows in a field value or a chunk extension: visible, space, tab, obs-text.
bool is_line_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u == '\t' || (u >= 0x20 && u != 0x7f);
}

}  // namespace

bool ChunkedBody::fail(int status, std::string message) {
  state_ = State::kError;
  error_status_ = status;
  error_message_ = "the chunked body could not be read: " + std::move(message);
  return false;
}

// One byte outside a chunk's data. Returns false once the body failed.
bool ChunkedBody::step(char c) {
  switch (step_) {
    case Step::kSize: {
      const int v = hex_value(c);
      if (v >= 0) {
        if (++digits_ > 16) return fail(413, "a chunk size has more than 16 hex digits");
        size_ = size_ * 16 + static_cast<uint64_t>(v);
        return true;
      }
      if (digits_ == 0) return fail(400, "a chunk line does not start with a hex size");
      if (size_ > static_cast<uint64_t>(max_body_ - total_))
        return fail(413, str_format("the body is larger than %lld bytes",
                                    static_cast<long long>(max_body_)));
      if (c == '\r') {
        step_ = Step::kSizeLf;
        return true;
      }
      if (c == ';' || c == ' ' || c == '\t') {
        step_ = Step::kExt;
        line_ = 1;
        return true;
      }
      return fail(400, "a chunk size is followed by something other than ';' or CRLF");
    }
    case Step::kExt:
      if (c == '\r') {
        step_ = Step::kSizeLf;
        return true;
      }
      if (!is_line_byte(c)) return fail(400, "a chunk extension holds a control byte");
      if (++line_ > max_line_) return fail(431, "a chunk extension is too long");
      return true;
    case Step::kSizeLf:
      if (c != '\n') return fail(400, "a chunk line ends in CR without LF");
      total_ += static_cast<int64_t>(size_);
      step_ = size_ == 0 ? Step::kTrailerStart : Step::kData;
      line_ = 0;
      return true;
    case Step::kDataCr:
      if (c != '\r') return fail(400, "a chunk's data is longer than its size");
      step_ = Step::kDataLf;
      return true;
    case Step::kDataLf:
      if (c != '\n') return fail(400, "a chunk's data ends in CR without LF");
      step_ = Step::kSize;
      size_ = 0;
      digits_ = 0;
      return true;
    case Step::kTrailerStart:
      if (c == '\r') {
        step_ = Step::kEndLf;
        return true;
      }
      step_ = Step::kTrailer;
      [[fallthrough]];
    case Step::kTrailer:
      if (c == '\r') {
        step_ = Step::kTrailerLf;
        return true;
      }
      if (!is_line_byte(c)) return fail(400, "a trailer line holds a control byte");
      if (++line_ > max_line_) return fail(431, "the trailer lines are too long");
      return true;
    case Step::kTrailerLf:
      if (c != '\n') return fail(400, "a trailer line ends in CR without LF");
      step_ = Step::kTrailerStart;
      return true;
    case Step::kEndLf:
      if (c != '\n') return fail(400, "the chunked body ends in CR without LF");
      state_ = State::kDone;
      return true;
    case Step::kData:
      break;  // handled in feed()
  }
  return true;
}

size_t ChunkedBody::feed(std::string_view data, std::string& body) {
  size_t used = 0;
  while (state_ == State::kNeedMore && used < data.size()) {
    if (step_ == Step::kData) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(size_, data.size() - used));
      body.append(data.substr(used, n));
      used += n;
      size_ -= n;
      if (size_ == 0) step_ = Step::kDataCr;
      continue;
    }
    if (!step(data[used++])) break;
  }
  return used;
}

}  // namespace pagoda::server
