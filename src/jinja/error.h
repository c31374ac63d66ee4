// Errors inside the template engine. The engine throws TemplateError internally (deep
// recursion makes threading Status through every evaluation step costly and noisy);
// ChatTemplate turns it into a Status at the module boundary, so nothing escapes it.
#pragma once

#include <stdexcept>
#include <string>

namespace pagoda::jinja {

enum class ErrorKind {
  kSyntax,       // the template does not parse
  kUnsupported,  // a construct Pagoda's interpreter does not implement
  kRender,       // an error while rendering (type errors, undefined values, limits)
  kRaised,       // the template called raise_exception(message)
  kLimit,        // the rendering ran out of its allocation budget; no filter defers it
};

class TemplateError : public std::runtime_error {
 public:
  TemplateError(ErrorKind kind, const std::string& message, int line = 0)
      : std::runtime_error(message), kind_(kind), line_(line) {}
  ErrorKind kind() const { return kind_; }
  int line() const { return line_; }
  void set_line(int line) { line_ = line; }

 private:
  ErrorKind kind_;
  int line_;
};

[[noreturn]] inline void render_error(const std::string& message) {
  throw TemplateError(ErrorKind::kRender, message);
}
[[noreturn]] inline void unsupported_error(const std::string& message) {
  throw TemplateError(ErrorKind::kUnsupported, message);
}

}  // namespace pagoda::jinja
