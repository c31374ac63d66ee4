#include "server/api_error.h"

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
