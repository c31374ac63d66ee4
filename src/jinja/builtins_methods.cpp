// Python methods of str, dict and list as templates call them, the global functions, and
// the argument binding the builtins share.
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "jinja/alloc_budget.h"
#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/interpreter.h"
#include "jinja/pystr.h"

namespace pagoda::jinja {

Params::Params(const std::string& function, CallArgs& args,
               std::initializer_list<const char*> names, bool allow_extra_positional)
    : values_(names.size()), set_(names.size(), false) {
  std::vector<const char*> n(names);
  for (size_t i = 0; i < args.pos.size(); ++i) {
    if (i < n.size()) {
      values_[i] = args.pos[i];
      set_[i] = true;
    } else if (allow_extra_positional) {
      extra_.push_back(args.pos[i]);
    } else {
      render_error(function + "() takes at most " + std::to_string(n.size()) + " argument(s) (" +
                   std::to_string(args.pos.size()) + " given)");
    }
  }
  for (auto& [k, v] : args.kw) {
    size_t i = 0;
    while (i < n.size() && k != n[i]) ++i;
    if (i == n.size()) render_error(function + "() got an unexpected keyword argument '" + k + "'");
    if (set_[i]) render_error(function + "() got multiple values for argument '" + k + "'");
    values_[i] = v;
    set_[i] = true;
  }
}

const Value& Params::get(size_t i) const {
  static const Value kUndefined = Value::undefined("missing argument");
  return has(i) ? values_[i] : kUndefined;
}

namespace {

class Function : public CallableObj {
 public:
  Function(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn)
      : CallableObj(std::move(name)), fn_(std::move(fn)) {}
  Value call(Interpreter& in, CallArgs& args) const override { return fn_(in, args); }

 private:
  std::function<Value(Interpreter&, CallArgs&)> fn_;
};

const std::string& str_arg(const Value& v, const char* method) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string())
    render_error(std::string(method) + "() argument must be str, not " + type_name(v));
  return v.str();
}

// Python slice bounds for the optional start/end of find/startswith/count.
std::string sub_range(const std::string& s, const Params& p, size_t first) {
  if (!p.has(first) && !p.has(first + 1)) return s;
  std::vector<uint32_t> cps = to_code_points(s);
  int64_t n = static_cast<int64_t>(cps.size());
  auto norm = [&](size_t i, int64_t def) {
    if (!p.has(i) || p.get(i).is_none()) return def;
    int64_t v = p.get(i).as_int();
    if (v < 0) v = std::max<int64_t>(0, v + n);
    return std::min(v, n);
  };
  int64_t b = norm(first, 0), e = norm(first + 1, n);
  if (e < b) return std::string();
  return from_code_points(cps, static_cast<size_t>(b), static_cast<size_t>(e));
}

int64_t cp_index(const std::string& s, size_t byte_pos) {
  return static_cast<int64_t>(code_point_count(std::string_view(s).substr(0, byte_pos)));
}

// One call of a str method: the string, its name, the interpreter and the arguments.
struct StrCall {
  const std::string& s;
  bool safe;
  const std::string& name;
  Interpreter& in;
  CallArgs& a;
  // A result already charged.
  Value str(std::string r) const { return Value::string(std::move(r), safe); }
  // A result at most a few times `s`, charged now.
  Value made(std::string r) const {
    charge_string(r.size());
    return Value::string(std::move(r), safe);
  }
};

Value str_strip_method(const StrCall& c) {
  Params p(c.name, c.a, {"chars"});
  std::string buf;
  const std::string* chars = nullptr;
  if (p.has(0) && !p.get(0).is_none()) {
    buf = str_arg(p.get(0), c.name.c_str());
    chars = &buf;
  }
  return c.made(str_strip(c.s, chars, c.name != "rstrip", c.name != "lstrip"));
}

Value str_split_method(const StrCall& c) {
  Params p(c.name, c.a, {"sep", "maxsplit"});
  std::string buf;
  const std::string* sep = nullptr;
  if (p.has(0) && !p.get(0).is_none()) {
    buf = str_arg(p.get(0), c.name.c_str());
    sep = &buf;
  }
  int64_t maxsplit = p.has(1) ? p.get(1).as_int() : -1;
  std::vector<std::string> parts =
      c.name == "split" ? str_split(c.s, sep, maxsplit) : str_rsplit(c.s, sep, maxsplit);
  charge_list(parts.size());
  std::vector<Value> out;
  for (auto& x : parts) out.push_back(c.str(std::move(x)));
  return Value::list(std::move(out));
}

Value str_splitlines(const StrCall& c) {
  Params p(c.name, c.a, {"keepends"});
  bool keep = truthy(p.get_or(0, Value::boolean(false)));
  std::vector<uint32_t> cps = to_code_points(c.s);
  charge_list(0);  // and each line
  std::vector<Value> out;
  size_t start = 0, i = 0;
  while (i < cps.size()) {
    uint32_t ch = cps[i];
    bool brk = ch == '\n' || ch == '\r' || ch == 0x0B || ch == 0x0C || ch == 0x1C || ch == 0x1D ||
               ch == 0x1E || ch == 0x85 || ch == 0x2028 || ch == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    size_t end = i;
    if (ch == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    ++i;
    charge_bytes(kItemBytes);
    out.push_back(c.made(from_code_points(cps, start, keep ? i : end)));
    start = i;
  }
  if (start < cps.size()) {
    charge_bytes(kItemBytes);
    out.push_back(c.made(from_code_points(cps, start, cps.size())));
  }
  return Value::list(std::move(out));
}

Value str_starts_or_ends(const StrCall& c) {
  Params p(c.name, c.a, {"prefix", "start", "end"});
  std::string hay = sub_range(c.s, p, 1);
  auto check = [&](const std::string& x) {
    if (c.name == "startswith") return hay.compare(0, x.size(), x) == 0;
    return hay.size() >= x.size() && hay.compare(hay.size() - x.size(), x.size(), x) == 0;
  };
  const Value& what = p.get(0);
  if (what.is_list() && what.seq_kind() == SeqKind::kTuple) {
    for (const Value& x : what.items())
      if (check(str_arg(x, c.name.c_str()))) return Value::boolean(true);
    return Value::boolean(false);
  }
  if (!what.is_string())
    render_error(c.name + " first arg must be str or a tuple of str, not " + type_name(what));
  return Value::boolean(check(what.str()));
}

Value str_swapcase(const StrCall& c) {
  Params p(c.name, c.a, {});
  std::string out;
  for (uint32_t ch : to_code_points(c.s)) {
    uint32_t l = py_lower(ch), u = py_upper(ch);
    std::vector<uint32_t> one{ch != l ? l : u};
    out += from_code_points(one, 0, 1);
  }
  return c.made(out);
}

// find, rfind, index, rindex, count.
Value str_find(const StrCall& c) {
  Params p(c.name, c.a, {"sub", "start", "end"});
  const std::string& sub = str_arg(p.get(0), c.name.c_str());
  std::string hay = sub_range(c.s, p, 1);
  int64_t offset = 0;
  if (p.has(1) && !p.get(1).is_none()) {
    int64_t n = static_cast<int64_t>(code_point_count(c.s));
    int64_t b = p.get(1).as_int();
    if (b < 0) b = std::max<int64_t>(0, b + n);
    offset = std::min(b, n);
  }
  if (c.name == "count") {
    if (sub.empty()) return Value::integer(static_cast<int64_t>(code_point_count(hay)) + 1);
    int64_t n = 0;
    for (size_t pos = hay.find(sub); pos != std::string::npos;
         pos = hay.find(sub, pos + sub.size()))
      ++n;
    return Value::integer(n);
  }
  size_t pos = (c.name == "find" || c.name == "index") ? hay.find(sub) : hay.rfind(sub);
  if (pos == std::string::npos) {
    if (c.name == "index" || c.name == "rindex") render_error("substring not found");
    return Value::integer(-1);
  }
  return Value::integer(offset + cp_index(hay, pos));
}

Value str_join(const StrCall& c) {
  Params p(c.name, c.a, {"iterable"});
  charge_string(0);  // and each piece before it is appended
  std::string out;
  size_t i = 0;
  for (const Value& x : iterate(p.get(0))) {
    if (!x.is_string())
      render_error("sequence item " + std::to_string(i) + ": expected str instance, " +
                   type_name(x) + " found");
    c.in.check_size(out.size() + (i ? c.s.size() : 0) + x.str().size());
    if (i++) append_charged(&out, c.s);
    append_charged(&out, x.str());
  }
  return c.str(std::move(out));
}

// isalnum, isalpha, isdigit, isnumeric, isdecimal, isspace, islower, isupper.
Value str_is(const StrCall& c) {
  Params p(c.name, c.a, {});
  if (c.name == "islower" || c.name == "isupper") {
    bool cased = false;
    for (uint32_t ch : to_code_points(c.s)) {
      uint32_t l = py_lower(ch), u = py_upper(ch);
      if (l == u) continue;
      cased = true;
      if (c.name == "islower" ? ch != l : ch != u) return Value::boolean(false);
    }
    return Value::boolean(cased);
  }
  std::vector<uint32_t> cps = to_code_points(c.s);
  if (cps.empty()) return Value::boolean(false);
  for (uint32_t ch : cps) {
    bool ok = c.name == "isalpha"   ? py_isalpha(ch)
              : c.name == "isspace" ? py_isspace(ch)
              : c.name == "isalnum" ? (py_isalpha(ch) || py_isdigit(ch))
                                    : py_isdigit(ch);
    if (!ok) return Value::boolean(false);
  }
  return Value::boolean(true);
}

// center, ljust, rjust.
Value str_justify(const StrCall& c) {
  Params p(c.name, c.a, {"width", "fillchar"});
  int64_t width = p.get(0).as_int();
  std::string fill = p.has(1) ? str_arg(p.get(1), c.name.c_str()) : " ";
  if (code_point_count(fill) != 1)
    render_error("The fill character must be exactly one character long");
  int64_t len = static_cast<int64_t>(code_point_count(c.s));
  if (width <= len) return c.made(c.s);
  const size_t fill_bytes = saturating_mul(static_cast<size_t>(width - len), fill.size());
  c.in.check_size(fill_bytes);
  charge_string(fill_bytes + c.s.size());
  int64_t marg = width - len;
  int64_t left = c.name == "ljust" ? 0 : c.name == "rjust" ? marg : marg / 2 + (marg & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += c.s;
  for (int64_t i = 0; i < marg - left; ++i) out += fill;
  return c.str(std::move(out));
}

Value str_zfill(const StrCall& c) {
  Params p(c.name, c.a, {"width"});
  int64_t width = p.get(0).as_int();
  int64_t len = static_cast<int64_t>(code_point_count(c.s));
  if (width <= len) return c.made(c.s);
  c.in.check_size(static_cast<size_t>(width));
  charge_string(static_cast<size_t>(width - len) + c.s.size());
  size_t sign = !c.s.empty() && (c.s[0] == '+' || c.s[0] == '-') ? 1 : 0;
  return c.str(c.s.substr(0, sign) + std::string(static_cast<size_t>(width - len), '0') +
               c.s.substr(sign));
}

Value str_partition(const StrCall& c) {
  Params p(c.name, c.a, {"sep"});
  const std::string& sep = str_arg(p.get(0), c.name.c_str());
  if (sep.empty()) render_error("empty separator");
  charge_list(3);
  charge_bytes(3 * kObjectBytes + c.s.size() + sep.size());
  size_t pos = c.name == "partition" ? c.s.find(sep) : c.s.rfind(sep);
  if (pos == std::string::npos) {
    if (c.name == "partition")
      return Value::list({c.str(c.s), c.str(""), c.str("")}, SeqKind::kTuple);
    return Value::list({c.str(""), c.str(""), c.str(c.s)}, SeqKind::kTuple);
  }
  return Value::list({c.str(c.s.substr(0, pos)), c.str(sep), c.str(c.s.substr(pos + sep.size()))},
                     SeqKind::kTuple);
}

Value str_remove_affix(const StrCall& c) {
  Params p(c.name, c.a, {"affix"});
  const std::string& x = str_arg(p.get(0), c.name.c_str());
  if (c.name == "removeprefix")
    return c.made(c.s.compare(0, x.size(), x) == 0 ? c.s.substr(x.size()) : c.s);
  bool ends = c.s.size() >= x.size() && c.s.compare(c.s.size() - x.size(), x.size(), x) == 0;
  return c.made(ends && !x.empty() ? c.s.substr(0, c.s.size() - x.size()) : c.s);
}

Value str_method(const Value& self, const std::string& name, Interpreter& in, CallArgs& a) {
  const StrCall c{self.str(), self.is_safe(), name, in, a};
  const std::string& s = c.s;
  using Fn = Value (*)(const StrCall&);
  static const std::pair<const char*, Fn> kMethods[] = {{"strip", str_strip_method},
                                                        {"lstrip", str_strip_method},
                                                        {"rstrip", str_strip_method},
                                                        {"split", str_split_method},
                                                        {"rsplit", str_split_method},
                                                        {"splitlines", str_splitlines},
                                                        {"startswith", str_starts_or_ends},
                                                        {"endswith", str_starts_or_ends},
                                                        {"swapcase", str_swapcase},
                                                        {"find", str_find},
                                                        {"rfind", str_find},
                                                        {"index", str_find},
                                                        {"rindex", str_find},
                                                        {"count", str_find},
                                                        {"join", str_join},
                                                        {"isalnum", str_is},
                                                        {"isalpha", str_is},
                                                        {"isdigit", str_is},
                                                        {"isnumeric", str_is},
                                                        {"isdecimal", str_is},
                                                        {"isspace", str_is},
                                                        {"islower", str_is},
                                                        {"isupper", str_is},
                                                        {"center", str_justify},
                                                        {"ljust", str_justify},
                                                        {"rjust", str_justify},
                                                        {"zfill", str_zfill},
                                                        {"partition", str_partition},
                                                        {"rpartition", str_partition},
                                                        {"removeprefix", str_remove_affix},
                                                        {"removesuffix", str_remove_affix}};
  for (const auto& [n, fn] : kMethods)
    if (name == n) return fn(c);
  if (name == "upper") return Params(name, a, {}), c.made(str_upper(s));
  if (name == "lower" || name == "casefold") return Params(name, a, {}), c.made(str_lower(s));
  if (name == "title") return Params(name, a, {}), c.made(str_title(s));
  if (name == "capitalize") return Params(name, a, {}), c.made(str_capitalize(s));
  if (name == "replace") {
    Params p(name, a, {"old", "new", "count"});
    int64_t count = p.has(2) ? p.get(2).as_int() : -1;
    std::string r =
        str_replace(s, str_arg(p.get(0), "replace"), str_arg(p.get(1), "replace"), count);
    in.check_size(r.size());
    return c.str(std::move(r));
  }
  if (name == "format") {
    std::string r = brace_format(s, a.pos, a.kw);
    in.check_size(r.size());
    return c.str(std::move(r));
  }
  unsupported_error("the str method '" + name + "' is not supported");
}

Value dict_method(const Value& self, const std::string& name, CallArgs& a) {
  const DictObj& d = self.dict();
  if (name == "items" || name == "keys" || name == "values") {
    Params p(name, a, {});
    if (name == "items")
      charge_pair_list(d.items.size());
    else
      charge_list(d.items.size());
    std::vector<Value> out;
    for (const auto& [k, v] : d.items) {
      if (name == "items")
        out.push_back(Value::list({k, v}, SeqKind::kTuple));
      else
        out.push_back(name == "keys" ? k : v);
    }
    return Value::list(std::move(out), name == "items"  ? SeqKind::kDictItems
                                       : name == "keys" ? SeqKind::kDictKeys
                                                        : SeqKind::kDictValues);
  }
  if (name == "get") {
    if (!a.kw.empty()) render_error("get() takes no keyword arguments");
    if (a.pos.empty() || a.pos.size() > 2)
      render_error("get expected 1 or 2 arguments, got " + std::to_string(a.pos.size()));
    if (const Value* v = d.find(a.pos[0])) return *v;
    return a.pos.size() > 1 ? a.pos[1] : Value::none();
  }
  if (name == "copy") {
    Params p(name, a, {});
    charge_bytes(d.copy_bytes());
    return Value::dict(std::make_shared<DictObj>(d));
  }
  unsupported_error("the dict method '" + name + "' is not supported");
}

Value list_method(const Value& self, const std::string& name, CallArgs& a) {
  const auto& items = self.items();
  if (name == "index") {
    if (a.pos.empty()) render_error("index expected at least 1 argument, got 0");
    for (size_t i = 0; i < items.size(); ++i)
      if (equals(items[i], a.pos[0])) return Value::integer(static_cast<int64_t>(i));
    render_error(repr(a.pos[0]) + " is not in list");
  }
  if (name == "count") {
    Params p(name, a, {"value"});
    int64_t n = 0;
    for (const Value& x : items) n += equals(x, p.get(0));
    return Value::integer(n);
  }
  if (name == "copy") {
    Params p(name, a, {});
    charge_list(items.size());
    return Value::list(items);
  }
  unsupported_error("the list method '" + name + "' is not supported");
}

bool in_list(const std::string& name, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined(
      "access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.", true);
}

Value bound(const Value& obj, const std::string& name,
            Value (*fn)(const Value&, const std::string&, CallArgs&)) {
  return make_function(name,
                       [obj, name, fn](Interpreter&, CallArgs& a) { return fn(obj, name, a); });
}

Value unsupported_method(const Value& obj, const std::string& name) {
  std::string type = type_name(obj);
  return make_function(name, [type, name](Interpreter&, CallArgs&) -> Value {
    unsupported_error("the " + type + " method '" + name + "' is not supported");
  });
}

}  // namespace

Value make_function(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn) {
  return Value::callable(std::make_shared<Function>(std::move(name), std::move(fn)));
}

std::optional<Value> find_method(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::kString:
      if (in_list(name,
                  {"strip",        "lstrip",      "rstrip",    "split",   "rsplit",    "splitlines",
                   "startswith",   "endswith",    "upper",     "lower",   "casefold",  "title",
                   "capitalize",   "swapcase",    "replace",   "find",    "rfind",     "index",
                   "rindex",       "count",       "join",      "format",  "isalnum",   "isalpha",
                   "isdigit",      "isnumeric",   "isdecimal", "isspace", "islower",   "isupper",
                   "center",       "ljust",       "rjust",     "zfill",   "partition", "rpartition",
                   "removeprefix", "removesuffix"})) {
        return make_function(name, [obj, name](Interpreter& in, CallArgs& a) {
          return str_method(obj, name, in, a);
        });
      }
      if (in_list(name, {"encode", "expandtabs", "format_map", "isascii", "isidentifier",
                         "isprintable", "istitle", "maketrans", "translate"}))
        return unsupported_method(obj, name);
      return std::nullopt;
    case Kind::kDict:
      if (in_list(name, {"items", "keys", "values", "get", "copy"}))
        return bound(obj, name, dict_method);
      if (in_list(name, {"pop", "popitem", "setdefault", "update", "clear"}))
        return unsafe(obj, name);
      if (name == "fromkeys") return unsupported_method(obj, name);
      return std::nullopt;
    case Kind::kList:
      if (obj.seq_kind() == SeqKind::kList || obj.seq_kind() == SeqKind::kTuple) {
        if (in_list(name, {"index", "count"}) ||
            (name == "copy" && obj.seq_kind() == SeqKind::kList))
          return bound(obj, name, list_method);
        if (obj.seq_kind() == SeqKind::kList &&
            in_list(name,
                    {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"}))
          return unsafe(obj, name);
      }
      return std::nullopt;
    case Kind::kInt:
    case Kind::kBool:
    case Kind::kFloat:
      if (in_list(name, {"real", "imag", "numerator", "denominator", "conjugate", "bit_length",
                         "bit_count", "to_bytes", "from_bytes", "as_integer_ratio", "is_integer",
                         "hex", "fromhex"}))
        return unsupported_method(obj, name);
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

namespace {

Value g_range(Interpreter&, CallArgs& a) {
  if (!a.kw.empty()) render_error("range() takes no keyword arguments");
  if (a.pos.empty() || a.pos.size() > 3)
    render_error("range expected 1 to 3 arguments, got " + std::to_string(a.pos.size()));
  for (const Value& v : a.pos) {
    if (v.is_undefined()) fail_undefined(v);
    if (!(v.is_int() || v.is_bool()))
      render_error(std::string("'") + type_name(v) +
                   "' object cannot be interpreted as an integer");
  }
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = a.pos[0].as_int();
  } else {
    start = a.pos[0].as_int();
    stop = a.pos[1].as_int();
    if (a.pos.size() == 3) step = a.pos[2].as_int();
  }
  if (step == 0) render_error("range() arg 3 must not be zero");
  double count = std::max(0.0, std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                                         static_cast<double>(step)));
  // jinja2's sandbox refuses ranges longer than MAX_RANGE.
  if (count > 100000)
    render_error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  charge_list(static_cast<size_t>(count));
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
    out.push_back(Value::integer(i));
  return Value::list(std::move(out));
}

Value g_dict(Interpreter&, CallArgs& a) {
  charge_dict(0);  // and each entry as it is set
  DictObj d;
  if (a.pos.size() > 1) render_error("dict expected at most 1 argument");
  if (!a.pos.empty()) {
    const Value& src = a.pos[0];
    if (src.is_dict()) {
      charge_bytes(src.dict().copy_bytes());
      d = src.dict();
    } else {
      for (const Value& pair : iterate(src)) {
        std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2) render_error("dictionary update sequence element has wrong length");
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : a.kw) d.set(Value::string(k), v);
  return Value::dict(std::move(d));
}

Value g_namespace(Interpreter&, CallArgs& a) {
  charge_dict(0);  // and each attribute as it is set
  auto ns = std::make_shared<NamespaceObj>();
  for (const Value& m : a.pos) {
    if (!m.is_dict()) render_error("namespace() positional arguments must be mappings");
    for (const auto& [k, v] : m.dict().items) ns->attrs.set(k, v);
  }
  for (auto& [k, v] : a.kw) ns->attrs.set(Value::string(k), v);
  return Value::ns(ns);
}

Value g_joiner(Interpreter&, CallArgs& a) {
  Params p("joiner", a, {"sep"});
  std::string sep = p.has(0) ? to_str(p.get(0)) : ", ";
  charge_string(sep.size());
  auto used = std::make_shared<bool>(false);
  return make_function("joiner", [sep, used](Interpreter&, CallArgs&) {
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    charge_string(sep.size());
    return Value::string(sep);
  });
}

Value g_raise_exception(Interpreter&, CallArgs& a) {
  std::string message = a.pos.empty() ? "" : to_str(a.pos[0]);
  throw TemplateError(ErrorKind::kRaised, message);
}

Value g_strftime_now(Interpreter&, CallArgs& a) {
  Params p("strftime_now", a, {"format"});
  const std::string& fmt = str_arg(p.get(0), "strftime_now");
  time_t now = time(nullptr);
  struct tm tm_now;
  localtime_r(&now, &tm_now);
  charge_string(256 + saturating_mul(fmt.size(), 8));
  std::string out(256 + fmt.size() * 8, '\0');
  size_t n = strftime(out.data(), out.size(), fmt.c_str(), &tm_now);
  out.resize(n);
  return Value::string(out);
}

Value g_unsupported(const std::string& name) {
  return make_function(name, [name](Interpreter&, CallArgs&) -> Value {
    unsupported_error("the global function '" + name + "' is not supported");
  });
}

}  // namespace

bool find_global(const std::string& name, Value* out) {
  static const std::vector<std::pair<std::string, Value>> kGlobals = [] {
    std::vector<std::pair<std::string, Value>> g;
    g.emplace_back("range", make_function("range", g_range));
    g.emplace_back("dict", make_function("dict", g_dict));
    g.emplace_back("namespace", make_function("namespace", g_namespace));
    g.emplace_back("joiner", make_function("joiner", g_joiner));
    g.emplace_back("raise_exception", make_function("raise_exception", g_raise_exception));
    g.emplace_back("strftime_now", make_function("strftime_now", g_strftime_now));
    g.emplace_back("cycler", g_unsupported("cycler"));
    g.emplace_back("lipsum", g_unsupported("lipsum"));
    return g;
  }();
  for (const auto& [n, v] : kGlobals)
    if (n == name) {
      *out = v;
      return true;
    }
  return false;
}

}  // namespace pagoda::jinja
