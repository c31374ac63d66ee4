#include "server/api_error.h"

#include <algorithm>

#include "core/status.h"

namespace pagoda::server {

nlohmann::json ApiError::to_json() const {
  nlohmann::json e = {{"message", message},
                      {"type", type},
                      {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                      {"code", status}};
  return {{"error", e}};
}

namespace {
ApiError make(int status, const char* type, std::string message, std::string param = "") {
  ApiError e;
  e.status = status;
  e.type = type;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}
}  // namespace

ApiError bad_request(std::string message, std::string param) {
  return make(400, "BadRequestError", std::move(message), std::move(param));
}
ApiError not_found_error(std::string message, std::string param) {
  return make(404, "NotFoundError", std::move(message), std::move(param));
}
ApiError unauthorized(std::string message) {
  return make(401, "AuthenticationError", std::move(message));
}
ApiError payload_too_large(std::string message) {
  return make(413, "RequestTooLargeError", std::move(message));
}
ApiError overloaded(std::string message, int retry_after_s) {
  ApiError e = make(503, "ServiceUnavailableError", std::move(message));
  e.retry_after_s = retry_after_s;
  return e;
}
ApiError internal(std::string message) {
  return make(500, "InternalServerError", std::move(message));
}

namespace {
// Length of the valid UTF-8 sequence at the start of `s`, 0 when there is none (overlong
// forms, surrogates and code points past U+10FFFF count as invalid).
size_t utf8_sequence(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto cont = [&](size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if ((c == 0xE0 && b(1) < 0xA0) || (c == 0xED && b(1) >= 0xA0)) return 0;
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if ((c == 0xF0 && b(1) < 0x90) || (c == 0xF4 && b(1) >= 0x90)) return 0;
    return 4;
  }
  return 0;
}
}  // namespace

std::string quote_for_error(std::string_view s, size_t max) {
  std::string out = "'";
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = utf8_sequence(s.substr(i));
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (i + std::max<size_t>(n, 1) > max) break;
    if (n == 0 || c < 0x20 || c == 0x7F) {
      out += str_format("\\x%02X", c);
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  if (i < s.size()) out += "...";
  out += "'";
  return out;
}

ApiError from_status(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kResourceExhausted:
    case StatusCode::kUnsupported:
      return bad_request(s.message());
    case StatusCode::kNotFound:
      return not_found_error(s.message());
    default:
      return internal(s.message());
  }
}

}  // namespace pagoda::server
