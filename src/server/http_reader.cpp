#include "server/http_reader.h"

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <limits>
#include <optional>

#include "core/status.h"

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
  http::request_parser<http::string_body> parser;
};

RequestReader::RequestReader(const HttpLimits& limits)
    : impl_(std::make_unique<Impl>()), limits_(limits) {
  // Beast counts the request line and every header line, CRLFs included.
  impl_->parser.header_limit(static_cast<std::uint32_t>(
      std::min<size_t>(limits.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
  impl_->parser.body_limit(static_cast<std::uint64_t>(std::max<int64_t>(0, limits.max_body_bytes)));
  impl_->parser.eager(true);
}

RequestReader::~RequestReader() = default;

void RequestReader::fail(int status, std::string message) {
  state_ = State::kError;
  error_status_ = status;
  error_message_ = std::move(message);
}

size_t RequestReader::feed(std::string_view data) {
  size_t used = 0;
  while (state_ == State::kNeedMore) {
    boost::system::error_code ec;
    const size_t n =
        impl_->parser.put(boost::asio::const_buffer(data.data() + used, data.size() - used), ec);
    used += n;
    if (ec == http::error::need_more) {
      // A whole header with nothing after it reads as need_more too; check it now, so a
      // bad header is refused before its body is waited for.
      if (!headers_done_ && impl_->parser.is_header_done()) check_headers();
      break;
    }
    if (ec) {
      fail(status_for(ec), "the request could not be read: " + ec.message());
      break;
    }
    if (!headers_done_ && impl_->parser.is_header_done()) check_headers();
    if (state_ != State::kNeedMore) break;
    if (impl_->parser.is_done()) {
      state_ = State::kDone;
      break;
    }
    if (n == 0 && used == data.size()) break;
  }
  return used;
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
}

size_t RequestReader::body_bytes() const {
  return impl_->parser.get().body().size();
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
  r.body = std::move(m.body());
  return r;
}

}  // namespace pagoda::server
