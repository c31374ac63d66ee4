// An error as the OpenAI API reports it: an HTTP status and {"error": {message, type,
// param, code}}. Request parsing and the routes return these; only the HTTP layer turns
// them into responses.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>

#include "core/status.h"

namespace pagoda::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "BadRequestError";
  std::string param;      // the offending request field, "" when none
  int retry_after_s = 0;  // > 0 adds a Retry-After header

  nlohmann::json to_json() const;
};

ApiError bad_request(std::string message, std::string param = "");
ApiError not_found_error(std::string message, std::string param = "");
ApiError unauthorized(std::string message);
ApiError payload_too_large(std::string message);
ApiError overloaded(std::string message, int retry_after_s);
ApiError internal(std::string message);
// A client's string for an error message, in single quotes: at most `max` bytes of it (cut
// at a character boundary, "..." marking the cut), so that a huge field is not echoed whole;
// control characters and bytes that are not UTF-8 become \xNN, so the message stays one
// readable line of valid UTF-8 (JSON output refuses invalid UTF-8).
std::string quote_for_error(std::string_view s, size_t max = 256);
// An engine Status for a request: its own faults (bad parameters, too long) are 400s.
ApiError from_status(const Status& s);

// A value or the ApiError that explains why there is none.
template <typename T>
class ApiResult {
 public:
  ApiResult(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  ApiResult(ApiError e) : v_(std::move(e)) {}   // NOLINT: implicit by design
  bool ok() const { return std::holds_alternative<T>(v_); }
  T& value() { return std::get<T>(v_); }
  const ApiError& error() const { return std::get<ApiError>(v_); }

 private:
  std::variant<T, ApiError> v_;
};

}  // namespace pagoda::server
