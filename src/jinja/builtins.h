// jinja2's builtin filters, tests and globals, Hugging Face's additions (tojson,
// raise_exception, strftime_now), and the Python methods of str, dict and list that
// templates call.
#pragma once

#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "jinja/value.h"

namespace pagoda::jinja {

using FilterFn = Value (*)(Interpreter&, const Value&, CallArgs&);
using TestFn = bool (*)(Interpreter&, const Value&, CallArgs&);

FilterFn find_filter(const std::string& name);
TestFn find_test(const std::string& name);
// How many arguments a test takes besides the value (jinja2 raises on any other count).
int test_arity(const std::string& name);
// Names jinja2 has that Pagoda does not implement (so the error can say "unsupported"
// rather than "no such filter").
bool is_unsupported_filter(const std::string& name);
bool is_unsupported_test(const std::string& name);

// The global functions: range, dict, namespace, cycler, joiner, raise_exception,
// strftime_now. Returns false when `name` is none of them.
bool find_global(const std::string& name, Value* out);

// Python's attribute `name` on a str, dict or list: a bound method, or an undefined that
// raises jinja2's SecurityError when used (methods that mutate). nullopt: not a method.
std::optional<Value> find_method(const Value& obj, const std::string& name);

Value make_function(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn);

// Binds call arguments to parameter names as a Python signature would.
class Params {
 public:
  Params(const std::string& function, CallArgs& args, std::initializer_list<const char*> names,
         bool allow_extra_positional = false);
  bool has(size_t i) const { return i < values_.size() && set_[i]; }
  const Value& get(size_t i) const;  // undefined when not given
  Value get_or(size_t i, Value def) const { return has(i) ? values_[i] : def; }
  const std::vector<Value>& extra() const { return extra_; }

 private:
  std::vector<Value> values_;
  std::vector<bool> set_;
  std::vector<Value> extra_;
};

}  // namespace pagoda::jinja
