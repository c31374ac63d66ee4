// jinja2's builtin tests (jinja2/tests.py semantics).
#include <cmath>
#include <unordered_map>

#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/interpreter.h"
#include "jinja/pystr.h"

namespace pagoda::jinja {
namespace {

const Value& arg(const char* test, CallArgs& a) {
  if (a.pos.empty() && a.kw.empty())
    render_error(std::string("test '") + test + "' needs an argument");
  return a.pos.empty() ? a.kw[0].second : a.pos[0];
}

bool t_defined(Interpreter&, const Value& v, CallArgs&) {
  return !v.is_undefined();
}
bool t_undefined(Interpreter&, const Value& v, CallArgs&) {
  return v.is_undefined();
}
bool t_none(Interpreter&, const Value& v, CallArgs&) {
  return v.is_none();
}
bool t_boolean(Interpreter&, const Value& v, CallArgs&) {
  return v.is_bool();
}
bool t_true(Interpreter&, const Value& v, CallArgs&) {
  return v.is_bool() && v.as_bool();
}
bool t_false(Interpreter&, const Value& v, CallArgs&) {
  return v.is_bool() && !v.as_bool();
}
bool t_integer(Interpreter&, const Value& v, CallArgs&) {
  return v.is_int();
}
bool t_float(Interpreter&, const Value& v, CallArgs&) {
  return v.is_float();
}
bool t_number(Interpreter&, const Value& v, CallArgs&) {
  return v.is_number();
}
bool t_string(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string();
}
bool t_mapping(Interpreter&, const Value& v, CallArgs&) {
  return v.is_dict();
}
bool t_iterable(Interpreter&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}
bool t_sequence(Interpreter&, const Value& v, CallArgs&) {
  // len() and __getitem__: str, list, tuple, dict (and Undefined, which has both).
  if (v.is_list()) return v.seq_kind() == SeqKind::kList || v.seq_kind() == SeqKind::kTuple;
  return v.is_undefined() || v.is_string() || v.is_dict();
}
bool t_callable(Interpreter&, const Value& v, CallArgs&) {
  return v.is_callable() || v.is_undefined();  // Undefined has a __call__ (that raises)
}
bool t_escaped(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string() && v.is_safe();
}
bool t_lower(Interpreter&, const Value& v, CallArgs&) {
  std::string s = to_str(v);
  bool cased = false;
  for (uint32_t c : to_code_points(s)) {
    if (py_upper(c) != c) cased = true;
    if (py_lower(c) != c) return false;
  }
  return cased;
}
bool t_upper(Interpreter&, const Value& v, CallArgs&) {
  std::string s = to_str(v);
  bool cased = false;
  for (uint32_t c : to_code_points(s)) {
    if (py_lower(c) != c) cased = true;
    if (py_upper(c) != c) return false;
  }
  return cased;
}

int64_t int_of(const Value& v, const char* what) {
  if (v.is_undefined()) fail_undefined(v);
  if (!(v.is_int() || v.is_bool()))
    render_error(std::string("the '") + what + "' test needs an integer, not " + type_name(v));
  return v.as_int();
}

// Python's value % m (the sign of the divisor).
double mod_number(const Value& v, int64_t m) {
  double r = v.is_float() ? std::fmod(v.as_float(), static_cast<double>(m))
                          : static_cast<double>(v.as_int() % m);
  if (r != 0 && ((r < 0) != (m < 0))) r += static_cast<double>(m);
  return r;
}

bool t_odd(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number())
    render_error(std::string("not all arguments converted during string formatting"));
  return mod_number(v, 2) == 1;
}
bool t_even(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number())
    render_error(std::string("not all arguments converted during string formatting"));
  return mod_number(v, 2) == 0;
}
bool t_divisibleby(Interpreter&, const Value& v, CallArgs& a) {
  int64_t n = int_of(arg("divisibleby", a), "divisibleby");
  if (n == 0) render_error("integer division or modulo by zero");
  if (v.is_float()) return std::fmod(v.as_float(), static_cast<double>(n)) == 0;
  return int_of(v, "divisibleby") % n == 0;
}
bool t_eq(Interpreter&, const Value& v, CallArgs& a) {
  return equals(v, arg("eq", a));
}
bool t_ne(Interpreter&, const Value& v, CallArgs& a) {
  return !equals(v, arg("ne", a));
}
bool t_lt(Interpreter&, const Value& v, CallArgs& a) {
  return less_than(v, arg("lt", a));
}
bool t_le(Interpreter&, const Value& v, CallArgs& a) {
  return !less_than(arg("le", a), v);
}
bool t_gt(Interpreter&, const Value& v, CallArgs& a) {
  return less_than(arg("gt", a), v);
}
bool t_ge(Interpreter&, const Value& v, CallArgs& a) {
  return !less_than(v, arg("ge", a));
}
bool t_in(Interpreter&, const Value& v, CallArgs& a) {
  return contains(arg("in", a), v);
}
bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  const Value& o = arg("sameas", a);
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Kind::kNone:
      return true;
    case Kind::kBool:
      return v.as_bool() == o.as_bool();
    case Kind::kList:
      return &v.items() == &o.items();
    case Kind::kDict:
      return &v.dict() == &o.dict();
    case Kind::kNamespace:
      return &v.ns() == &o.ns();
    case Kind::kCallable:
      return &v.fn() == &o.fn();
    default:
      return equals(v, o);  // small ints and interned strings are identical in CPython
  }
}
bool t_filter(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string() && find_filter(v.str()) != nullptr;
}
bool t_test(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string() && find_test(v.str()) != nullptr;
}

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> kTests = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"callable", t_callable},
      {"escaped", t_escaped},
      {"lower", t_lower},
      {"upper", t_upper},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"sameas", t_sameas},
      {"filter", t_filter},
      {"test", t_test},
  };
  return kTests;
}

}  // namespace

TestFn find_test(const std::string& name) {
  auto it = tests().find(name);
  return it == tests().end() ? nullptr : it->second;
}

int test_arity(const std::string& name) {
  static const char* kOneArg[] = {
      "divisibleby", "eq", "equalto", "==",          "ne", "!=", "lt", "lessthan", "<",
      "le",          "<=", "gt",      "greaterthan", ">",  "ge", ">=", "in",       "sameas"};
  for (const char* n : kOneArg)
    if (name == n) return 1;
  return 0;
}

bool is_unsupported_test(const std::string&) {
  return false;
}

}  // namespace pagoda::jinja
