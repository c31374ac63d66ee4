#include "server/http_reader.h"

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <limits>
#include <optional>

#include "core/status.h"
#include "server/chunked_body.h"

namespace pagoda::server {

namespace http = boost::beast::http;

bool iequals_ascii(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::optional<std::string> HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals_ascii(k, name)) return v;
  return std::nullopt;
}

namespace {

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The status for one of Beast's parse errors.
int status_for(const boost::system::error_code& ec) {
  if (ec == http::error::header_limit) return 431;
  if (ec == http::error::body_limit) return 413;
  if (ec == http::error::bad_version) return 505;
  return 400;
}

}  // namespace

struct RequestReader::Impl {
  // Beast reads the header only; the body's framing is ours (ChunkedBody, or a count).
  http::request_parser<http::empty_body> parser;
  std::optional<ChunkedBody> chunked;
  uint64_t length_left = 0;  // of a Content-Length body
  std::string body;
};

RequestReader::RequestReader(const HttpLimits& limits)
    : impl_(std::make_unique<Impl>()), limits_(limits) {
  // Beast counts the request line and every header line, CRLFs included.
  impl_->parser.header_limit(static_cast<std::uint32_t>(
      std::min<size_t>(limits.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
  // The message is complete, for Beast, once its header is: the body is read in body().
  impl_->parser.skip(true);
}

RequestReader::~RequestReader() = default;

void RequestReader::fail(int status, std::string message) {
  state_ = State::kError;
  error_status_ = status;
  error_message_ = std::move(message);
}

size_t RequestReader::header_prefix(std::string_view data) {
  // Beast judges a header on whatever it was handed, and once it has said "need more" it
  // looks again only when a blank line arrives; so the same bytes split differently could
  // read differently. It is handed the same prefixes however they arrived: up to each blank
  // line in turn, within the header limit, which is enforced here.
  const size_t room = limits_.max_header_bytes - std::min(header_used_, limits_.max_header_bytes);
  const std::string_view window = data.substr(0, room);
  const size_t from = header_scanned_ > 3 ? header_scanned_ - 3 : 0;
  const size_t blank = window.find("\r\n\r\n", from);
  if (blank != std::string_view::npos) {
    header_scanned_ = blank + 4;
    return blank + 4;
  }
  header_scanned_ = window.size();
  if (data.size() >= room)
    fail(431, str_format("the request header is larger than %zu bytes", limits_.max_header_bytes));
  return 0;
}

size_t RequestReader::feed(std::string_view data) {
  size_t used = 0;
  while (state_ == State::kNeedMore && !headers_done_) {
    const size_t end = header_prefix(data.substr(used));
    if (end == 0) return used;
    const size_t n = parse_header(data.substr(used, end));
    used += n;
    header_used_ += n;
    // What Beast consumed of a header it could not finish is gone from the caller's buffer.
    header_scanned_ -= std::min(header_scanned_, n);
    if (!headers_done_ && used + header_scanned_ == data.size()) return used;
  }
  if (state_ == State::kNeedMore) used += read_body(data.substr(used));
  return used;
}

size_t RequestReader::read_body(std::string_view data) {
  Impl& m = *impl_;
  if (m.chunked) {
    const size_t n = m.chunked->feed(data, m.body);
    if (m.chunked->state() == ChunkedBody::State::kError)
      fail(m.chunked->error_status(), m.chunked->error_message());
    else if (m.chunked->state() == ChunkedBody::State::kDone)
      state_ = State::kDone;
    return n;
  }
  const size_t n = static_cast<size_t>(std::min<uint64_t>(m.length_left, data.size()));
  m.body.append(data.substr(0, n));
  m.length_left -= n;
  if (m.length_left == 0) state_ = State::kDone;
  return n;
}

size_t RequestReader::parse_header(std::string_view data) {
  boost::system::error_code ec;
  const size_t n = impl_->parser.put(boost::asio::const_buffer(data.data(), data.size()), ec);
  if (ec == http::error::need_more) return n;
  if (ec) {
    fail(status_for(ec), "the request could not be read: " + ec.message());
    return n;
  }
  if (impl_->parser.is_header_done()) check_headers();
  return n;
}

void RequestReader::check_headers() {
  headers_done_ = true;
  const auto& h = impl_->parser.get();
  int count = 0, lengths = 0, encodings = 0;
  std::string_view encoding;
  for (const auto& f : h) {
    ++count;
    if (f.name() == http::field::content_length) {
      ++lengths;
      const std::string_view v = trim_ows(f.value());
      if (v.empty() || v.find_first_not_of("0123456789") != std::string_view::npos)
        return fail(400, "Content-Length must be one decimal number");
    } else if (f.name() == http::field::transfer_encoding) {
      ++encodings;
      encoding = trim_ows(f.value());
    } else if (f.name() == http::field::expect) {
      if (!iequals_ascii(trim_ows(f.value()), "100-continue"))
        return fail(417, "only 'Expect: 100-continue' is understood");
      expects_continue_ = h.version() >= 11;
    }
  }
  if (count > limits_.max_headers)
    return fail(431, str_format("the request has %d header fields; the limit is %d", count,
                                limits_.max_headers));
  if (lengths > 1) return fail(400, "the request has more than one Content-Length");
  if (encodings > 1) return fail(400, "the request has more than one Transfer-Encoding");
  if (encodings == 1) {
    if (h.version() < 11) return fail(400, "HTTP/1.0 requests cannot use Transfer-Encoding");
    if (lengths) return fail(400, "the request has both Content-Length and Transfer-Encoding");
    if (!iequals_ascii(encoding, "chunked"))
      return fail(501, "Transfer-Encoding '" + std::string(encoding.substr(0, 64)) +
                           "' is not supported (only chunked)");
  }
  if (h.version() >= 11 && h.find(http::field::host) == h.end())
    return fail(400, "an HTTP/1.1 request needs a Host header");
  const int64_t max_body = std::max<int64_t>(0, limits_.max_body_bytes);
  if (encodings == 1) {
    impl_->chunked.emplace(max_body, limits_.max_header_bytes);
    return;
  }
  if (lengths == 1) {
    const std::string_view v = trim_ows(h[http::field::content_length]);
    const std::string_view digits = v.substr(std::min(v.find_first_not_of('0'), v.size()));
    uint64_t length = 0;
    if (digits.size() > 18)
      length = UINT64_MAX;  // past any limit; no overflow below
    else
      for (char c : digits) length = length * 10 + static_cast<uint64_t>(c - '0');
    if (length > static_cast<uint64_t>(max_body))
      return fail(
          413, str_format("the body is larger than %lld bytes", static_cast<long long>(max_body)));
    impl_->length_left = length;
  }
  if (impl_->length_left == 0) state_ = State::kDone;
}

size_t RequestReader::body_bytes() const {
  return impl_->body.size();
}

HttpRequest RequestReader::take() {
  HttpRequest r;
  auto m = impl_->parser.release();
  r.method = std::string(m.method_string());
  r.target = std::string(m.target());
  r.path = r.target.substr(0, r.target.find('?'));
  r.version = static_cast<int>(m.version());
  for (const auto& f : m)
    r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  r.body = std::move(impl_->body);
  return r;
}

}  // namespace pagoda::server
