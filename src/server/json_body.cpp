#include "server/json_body.h"

#include <cstddef>
#include <string>

#include "core/status.h"

namespace pagoda::server {
namespace {

using ojson = nlohmann::ordered_json;
// nlohmann's own DOM builder, so values come out exactly as ordered_json::parse makes them;
// it keeps its open containers on a heap stack, so nothing here recurses per level.
using DomBuilder = nlohmann::detail::json_sax_dom_parser<ojson>;

// Forwards every SAX event to the DOM builder, counting open containers: the event that
// would open one too many stops the parse, so the document over the limit is never built.
class DepthLimitedBuilder {
 public:
  DepthLimitedBuilder(ojson* root, int max_depth) : dom_(*root, false), max_depth_(max_depth) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(ojson::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(ojson::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(ojson::number_float_t v, const ojson::string_t& s) {
    return dom_.number_float(v, s);
  }
  bool string(ojson::string_t& v) { return dom_.string(v); }
  bool binary(ojson::binary_t& v) { return dom_.binary(v); }
  bool key(ojson::string_t& v) { return dom_.key(v); }
  bool start_object(std::size_t n) { return open() && dom_.start_object(n); }
  bool end_object() { return close() && dom_.end_object(); }
  bool start_array(std::size_t n) { return open() && dom_.start_array(n); }
  bool end_array() { return close() && dom_.end_array(); }
  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& ex) {
    error_at_ = position;
    return dom_.parse_error(position, last_token, ex);
  }

  bool too_deep() const { return too_deep_; }
  std::size_t error_at() const { return error_at_; }

 private:
  bool open() {
    if (++depth_ <= max_depth_) return true;
    too_deep_ = true;
    return false;
  }
  bool close() {
    --depth_;
    return true;
  }

  DomBuilder dom_;
  const int max_depth_;
  int depth_ = 0;
  bool too_deep_ = false;
  std::size_t error_at_ = 0;
};

}  // namespace

ApiResult<ojson> parse_json_body(std::string_view body, int max_depth) {
  ojson root;
  DepthLimitedBuilder sax(&root, max_depth);
  const bool ok = ojson::sax_parse(body.begin(), body.end(), &sax);
  if (sax.too_deep())
    return bad_request(str_format("the request body nests deeper than %d levels", max_depth));
  if (!ok)
    return bad_request(
        str_format("the request body is not valid JSON (at byte %zu)", sax.error_at()));
  if (!root.is_object()) return bad_request("the request body must be a JSON object");
  return root;
}

}  // namespace pagoda::server
