// jinja2's builtin filters (jinja2/filters.py semantics) and Hugging Face's tojson.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "jinja/alloc_budget.h"
#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/interpreter.h"
#include "jinja/json_io.h"
#include "jinja/pystr.h"

namespace pagoda::jinja {
namespace {

Value str_result(std::string s, const Value& like) {
  return Value::string(std::move(s), like.is_string() && like.is_safe());
}

// A string a filter made from its input, at most a few times that input's size (case
// mapping, strip): charged as it comes (alloc_budget.h).
Value made_str(std::string s, const Value& like) {
  charge_string(s.size());
  return str_result(std::move(s), like);
}

// soft_str(): keeps a Markup string's safety, converts anything else with str().
std::string soft(const Value& v) {
  return to_str(v);
}

std::vector<Value> seq_of(const Value& v) {
  if (v.is_undefined() && v.undef() && v.undef()->security) fail_undefined(v);
  return iterate(v);
}

Value ignore_case(const Value& v) {
  return v.is_string() ? Value::string(str_lower(v.str())) : v;
}

Value generator(std::vector<Value> items) {
  return Value::list(std::move(items), SeqKind::kGenerator);
}

// make_attrgetter: item -> item[part]... for "a.b.0" paths (None: the item itself).
Value attr_get(Interpreter& in, const Value& item, const Value& attribute,
               const Value* default_value = nullptr) {
  if (attribute.is_none() || attribute.is_undefined()) return item;
  Value cur = item;
  if (attribute.is_string()) {
    const std::string& p = attribute.str();
    size_t start = 0;
    while (true) {
      size_t dot = p.find('.', start);
      std::string part =
          p.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
      cur = digits ? in.getitem(cur, Value::integer(std::atoll(part.c_str())))
                   : in.getitem(cur, Value::string(part));
      if (default_value && !default_value->is_none() && cur.is_undefined()) cur = *default_value;
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    return cur;
  }
  cur = in.getitem(cur, attribute);
  if (default_value && !default_value->is_none() && cur.is_undefined()) cur = *default_value;
  return cur;
}

void sort_values(std::vector<Value>* v, const std::function<Value(const Value&)>& key,
                 bool reverse) {
  std::vector<std::pair<Value, size_t>> keyed;
  keyed.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) keyed.emplace_back(key((*v)[i]), i);
  // Python's sort is stable; reverse=True keeps equal items in their original order.
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? less_than(b.first, a.first) : less_than(a.first, b.first);
  });
  std::vector<Value> out;
  out.reserve(v->size());
  for (auto& [k, i] : keyed) out.push_back((*v)[i]);
  *v = std::move(out);
}

Value f_abs(Interpreter&, const Value& v, CallArgs& a) {
  Params p("abs", a, {});
  if (v.is_float()) return Value::number(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) render_error("integer overflow");
    return Value::integer(std::llabs(v.as_int()));
  }
  if (v.is_undefined()) fail_undefined(v);
  render_error(std::string("bad operand type for abs(): '") + type_name(v) + "'");
}

Value f_attr(Interpreter& in, const Value& v, CallArgs& a) {
  Params p("attr", a, {"name"});
  if (!p.get(0).is_string()) render_error("attribute name must be a string");
  // Attributes only: a dict's keys are not its attributes.
  if (v.is_dict() || v.is_list() || v.is_string()) {
    if (auto m = find_method(v, p.get(0).str())) return *m;
    return Value::undefined("'" + std::string(type_name(v)) + " object' has no attribute '" +
                            p.get(0).str() + "'");
  }
  return in.getattr(v, p.get(0).str());
}

Value f_batch(Interpreter&, const Value& v, CallArgs& a) {
  Params p("batch", a, {"linecount", "fill_with"});
  int64_t n = p.get(0).as_int();
  if (n <= 0) render_error("batch size must be positive");
  const size_t size = static_cast<size_t>(n);
  const bool fill = p.has(1) && !p.get(1).is_none();
  std::vector<Value> items = seq_of(v);
  charge_list(items.size() / size + (items.size() % size != 0));
  std::vector<Value> out;
  for (size_t i = 0; i < items.size(); i += size) {
    const size_t end = i + std::min(size, items.size() - i);
    // The last batch is filled up to `size`, which the template chooses: charged first.
    charge_list(fill ? size : end - i);
    std::vector<Value> cur(items.begin() + static_cast<long>(i),
                           items.begin() + static_cast<long>(end));
    if (fill) cur.resize(size, p.get(1));
    out.push_back(Value::list(std::move(cur)));
  }
  return generator(std::move(out));
}

Value f_capitalize(Interpreter&, const Value& v, CallArgs& a) {
  Params p("capitalize", a, {});
  return made_str(str_capitalize(soft(v)), v);
}

Value f_center(Interpreter& in, const Value& v, CallArgs& a) {
  Params p("center", a, {"width"});
  int64_t width = p.get_or(0, Value::integer(80)).as_int();
  std::string s = soft(v);
  int64_t len = static_cast<int64_t>(code_point_count(s));
  if (width <= len) return made_str(s, v);
  in.check_size(static_cast<size_t>(width));
  int64_t marg = width - len;
  charge_string(static_cast<size_t>(marg) + s.size());
  int64_t left = marg / 2 + (marg & width & 1);  // CPython's rule for odd margins
  return str_result(std::string(static_cast<size_t>(left), ' ') + s +
                        std::string(static_cast<size_t>(marg - left), ' '),
                    v);
}

Value f_default(Interpreter&, const Value& v, CallArgs& a) {
  Params p("default", a, {"default_value", "boolean"});
  Value def = p.get_or(0, Value::string(""));
  if (v.is_undefined() || (truthy(p.get_or(1, Value::boolean(false))) && !truthy(v))) return def;
  return v;
}

Value f_dictsort(Interpreter&, const Value& v, CallArgs& a) {
  Params p("dictsort", a, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) {
    if (v.is_undefined()) fail_undefined(v);
    render_error(std::string("'") + type_name(v) + "' object has no attribute 'items'");
  }
  bool cs = truthy(p.get_or(0, Value::boolean(false)));
  std::string by = p.has(1) ? to_str(p.get(1)) : "key";
  if (by != "key" && by != "value")
    render_error("You can only sort by either \"key\" or \"value\"");
  size_t pos = by == "key" ? 0 : 1;
  charge_pair_list(v.dict().items.size());
  std::vector<Value> items;
  for (const auto& [k, x] : v.dict().items) items.push_back(Value::list({k, x}, SeqKind::kTuple));
  sort_values(
      &items, [&](const Value& it) { return cs ? it.items()[pos] : ignore_case(it.items()[pos]); },
      truthy(p.get_or(2, Value::boolean(false))));
  return Value::list(std::move(items));
}

Value f_escape(Interpreter&, const Value& v, CallArgs& a) {
  Params p("escape", a, {});
  if (v.is_string() && v.is_safe()) return v;
  if (v.is_none() || v.is_undefined()) return Value::string(v.is_none() ? "None" : "", true);
  return Value::string(html_escape(to_str(v)), true);
}

Value f_forceescape(Interpreter&, const Value& v, CallArgs& a) {
  Params p("forceescape", a, {});
  return Value::string(html_escape(to_str(v)), true);
}

Value f_first(Interpreter&, const Value& v, CallArgs& a) {
  Params p("first", a, {});
  std::vector<Value> items = seq_of(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interpreter&, const Value& v, CallArgs& a) {
  Params p("last", a, {});
  if (v.is_list() && v.seq_kind() == SeqKind::kGenerator)
    render_error("'generator' object is not reversible");
  std::vector<Value> items = seq_of(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

bool parse_float(const std::string& text, double* out) {
  std::string s = str_strip(text, nullptr, true, true);
  std::string t;
  for (char c : s)
    if (c != '_') t += c;
  if (t.empty()) return false;
  std::string low = str_lower(t);
  const char* b = low.c_str();
  if (*b == '+' || *b == '-') ++b;
  if (!std::strcmp(b, "inf") || !std::strcmp(b, "infinity") || !std::strcmp(b, "nan")) {
    double x = std::strtod(low.c_str(), nullptr);
    *out = x;
    return true;
  }
  for (char c : t)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' ||
          c == '+' || c == '-'))
      return false;
  char* end = nullptr;
  *out = std::strtod(t.c_str(), &end);
  return end && *end == 0;
}

Value f_float(Interpreter&, const Value& v, CallArgs& a) {
  Params p("float", a, {"default"});
  Value def = p.get_or(0, Value::number(0.0));
  if (v.is_undefined()) fail_undefined(v);  // float(Undefined) raises
  if (v.is_number()) return Value::number(v.as_float());
  if (v.is_string()) {
    double x;
    if (parse_float(v.str(), &x)) return Value::number(x);
  }
  return def;
}

Value f_format(Interpreter& in, const Value& v, CallArgs& a) {
  if (!a.pos.empty() && !a.kw.empty())
    render_error("can't handle positional and keyword arguments at the same time");
  Value args;
  if (!a.kw.empty()) {
    DictObj d;
    for (auto& [k, x] : a.kw) d.set(Value::string(k), x);
    args = Value::dict(std::move(d));
  } else {
    charge_list(a.pos.size());
    args = Value::list(a.pos, SeqKind::kTuple);
  }
  std::string r = percent_format(soft(v), args);
  in.check_size(r.size());
  return str_result(std::move(r), v);
}

Value f_groupby(Interpreter& in, const Value& v, CallArgs& a) {
  Params p("groupby", a, {"attribute", "default", "case_sensitive"});
  Value def = p.get_or(1, Value::none());
  bool cs = truthy(p.get_or(2, Value::boolean(false)));
  std::vector<Value> items = seq_of(v);
  auto key = [&](const Value& x) {
    Value k = attr_get(in, x, p.get(0), &def);
    return cs ? k : ignore_case(k);
  };
  sort_values(&items, key, false);
  charge_list(0);  // and a tuple and a list per group
  std::vector<Value> out;
  for (size_t i = 0; i < items.size();) {
    Value k = key(items[i]);
    std::vector<Value> group;
    size_t j = i;
    while (j < items.size() && equals(key(items[j]), k)) group.push_back(items[j++]);
    charge_list(group.size());
    charge_list(2);
    charge_bytes(kItemBytes);
    Value shown = cs ? k : attr_get(in, items[i], p.get(0), &def);
    out.push_back(Value::list({shown, Value::list(std::move(group))}, SeqKind::kTuple));
    i = j;
  }
  return Value::list(std::move(out));
}

// str.splitlines() (no keepends).
std::vector<std::string> splitlines(const std::string& s) {
  std::vector<std::string> out;
  std::vector<uint32_t> cps = to_code_points(s);
  size_t start = 0, i = 0;
  while (i < cps.size()) {
    uint32_t c = cps[i];
    bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
               c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    out.push_back(from_code_points(cps, start, i));
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    start = ++i;
  }
  if (start < cps.size()) out.push_back(from_code_points(cps, start, cps.size()));
  return out;
}

Value f_indent(Interpreter& in, const Value& v, CallArgs& a) {
  Params p("indent", a, {"width", "first", "blank"});
  std::string ind;
  Value w = p.get_or(0, Value::integer(4));
  if (w.is_string()) {
    ind = w.str();
  } else {
    int64_t n = std::max<int64_t>(0, w.as_int());
    in.check_size(static_cast<size_t>(n));
    charge_string(static_cast<size_t>(n));
    ind = std::string(static_cast<size_t>(n), ' ');
  }
  bool first = truthy(p.get_or(1, Value::boolean(false)));
  bool blank = truthy(p.get_or(2, Value::boolean(false)));
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string())
    render_error(std::string("unsupported operand type(s) for +=: '") + type_name(v) +
                 "' and 'str'");
  std::vector<std::string> lines = splitlines(v.str() + "\n");
  // Every line gets the indent, so the result can be many times the input: charged and
  // checked as it grows.
  charge_string(0);
  std::string rv;
  auto put = [&](std::string_view piece) {
    in.check_size(rv.size() + piece.size());
    append_charged(&rv, piece);
  };
  if (first) put(ind);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) put("\n");
    if (i && (blank || !lines[i].empty())) put(ind);
    put(lines[i]);
  }
  return str_result(std::move(rv), v);
}

Value f_int(Interpreter&, const Value& v, CallArgs& a) {
  Params p("int", a, {"default", "base"});
  Value def = p.get_or(0, Value::integer(0));
  int base = static_cast<int>(p.get_or(1, Value::integer(10)).as_int());
  if (v.is_undefined()) fail_undefined(v);  // int(Undefined) raises
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    double f = v.as_float();
    if (!std::isfinite(f)) return def;
    if (std::fabs(f) >= 9.2e18) render_error("integer overflow");
    return Value::integer(static_cast<int64_t>(f));
  }
  if (v.is_string()) {
    std::string s;
    for (char c : str_strip(v.str(), nullptr, true, true))
      if (c != '_') s += c;
    std::string body = s;
    bool neg = false;
    if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
      neg = body[0] == '-';
      body = body.substr(1);
    }
    int b = base;
    if ((b == 16 || b == 0) && body.size() > 2 &&
        (body.substr(0, 2) == "0x" || body.substr(0, 2) == "0X")) {
      body = body.substr(2);
      b = 16;
    } else if ((b == 8 || b == 0) && body.size() > 2 && (body[1] == 'o' || body[1] == 'O') &&
               body[0] == '0') {
      body = body.substr(2);
      b = 8;
    } else if ((b == 2 || b == 0) && body.size() > 2 && (body[1] == 'b' || body[1] == 'B') &&
               body[0] == '0') {
      body = body.substr(2);
      b = 2;
    }
    if (b == 0) b = 10;
    bool ok = !body.empty() && b >= 2 && b <= 36;
    for (char c : body) {
      int d = std::isdigit(static_cast<unsigned char>(c))   ? c - '0'
              : std::isalpha(static_cast<unsigned char>(c)) ? (c | 32) - 'a' + 10
                                                            : 99;
      if (d >= b) ok = false;
    }
    if (ok) {
      errno = 0;
      unsigned long long x = std::strtoull(body.c_str(), nullptr, b);
      if (errno == ERANGE || x > static_cast<unsigned long long>(INT64_MAX))
        render_error("integer overflow");
      return Value::integer(neg ? -static_cast<int64_t>(x) : static_cast<int64_t>(x));
    }
    double f;
    if (parse_float(v.str(), &f) && std::isfinite(f))
      return Value::integer(static_cast<int64_t>(f));
  }
  return def;
}

Value f_items(Interpreter&, const Value& v, CallArgs& a) {
  Params p("items", a, {});
  if (v.is_undefined()) return generator({});
  if (!v.is_dict()) render_error("Can only get item pairs from a mapping.");
  charge_pair_list(v.dict().items.size());
  std::vector<Value> out;
  for (const auto& [k, x] : v.dict().items) out.push_back(Value::list({k, x}, SeqKind::kTuple));
  return generator(std::move(out));
}

Value f_join(Interpreter& in, const Value& v, CallArgs& a) {
  Params p("join", a, {"d", "attribute"});
  std::string d = p.has(0) ? to_str(p.get(0)) : "";
  charge_string(0);  // and each piece before it is appended
  std::string out;
  bool first = true;
  for (const Value& x : seq_of(v)) {
    std::string piece = to_str(p.has(1) && !p.get(1).is_none() ? attr_get(in, x, p.get(1)) : x);
    in.check_size(out.size() + (first ? 0 : d.size()) + piece.size());
    if (!first) append_charged(&out, d);
    first = false;
    append_charged(&out, piece);
  }
  return Value::string(std::move(out));
}

Value f_length(Interpreter&, const Value& v, CallArgs& a) {
  Params p("length", a, {});
  return Value::integer(length(v));
}

Value f_list(Interpreter&, const Value& v, CallArgs& a) {
  Params p("list", a, {});
  std::vector<Value> items = seq_of(v);
  charge_list(items.size());
  return Value::list(std::move(items));
}

Value f_lower(Interpreter&, const Value& v, CallArgs& a) {
  Params p("lower", a, {});
  return made_str(str_lower(soft(v)), v);
}

Value f_upper(Interpreter&, const Value& v, CallArgs& a) {
  Params p("upper", a, {});
  return made_str(str_upper(soft(v)), v);
}

Value f_map(Interpreter& in, const Value& v, CallArgs& a) {
  std::vector<Value> out;
  if (!truthy(v)) return generator({});
  if (a.pos.empty()) {
    Value attribute, def = Value::none();
    bool has_attr = false;
    for (auto& [k, x] : a.kw) {
      if (k == "attribute") {
        attribute = x;
        has_attr = true;
      } else if (k == "default") {
        def = x;
      } else {
        render_error("Unexpected keyword argument '" + k + "'");
      }
    }
    if (!has_attr) render_error("map requires a filter argument");
    std::vector<Value> xs = seq_of(v);
    charge_list(xs.size());
    for (const Value& x : xs) out.push_back(attr_get(in, x, attribute, &def));
    return generator(std::move(out));
  }
  if (!a.pos[0].is_string()) render_error("map requires a filter name");
  std::string name = a.pos[0].str();
  std::vector<Value> xs = seq_of(v);
  charge_list(xs.size());
  for (const Value& x : xs) {
    CallArgs rest;
    rest.pos.assign(a.pos.begin() + 1, a.pos.end());
    rest.kw = a.kw;
    out.push_back(in.filter(name, x, rest));
  }
  return generator(std::move(out));
}

Value min_max(Interpreter& in, const Value& v, CallArgs& a, bool want_max) {
  Params p(want_max ? "max" : "min", a, {"case_sensitive", "attribute"});
  bool cs = truthy(p.get_or(0, Value::boolean(false)));
  std::vector<Value> items = seq_of(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& x) {
    Value k = attr_get(in, x, p.get_or(1, Value::none()));
    return cs ? k : ignore_case(k);
  };
  size_t best = 0;
  Value bk = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (want_max ? less_than(bk, k) : less_than(k, bk)) {
      best = i;
      bk = k;
    }
  }
  return items[best];
}
Value f_max(Interpreter& in, const Value& v, CallArgs& a) {
  return min_max(in, v, a, true);
}
Value f_min(Interpreter& in, const Value& v, CallArgs& a) {
  return min_max(in, v, a, false);
}

Value select_reject(Interpreter& in, const Value& v, CallArgs& a, bool select, bool attr,
                    const char* name) {
  if (!truthy(v)) return generator({});
  size_t off = 0;
  Value attribute;
  if (attr) {
    if (a.pos.empty()) render_error("Missing parameter for attribute name");
    attribute = a.pos[0];
    off = 1;
  }
  bool has_test = a.pos.size() > off;
  std::string test_name;
  if (has_test) {
    if (!a.pos[off].is_string()) render_error(std::string(name) + ": the test must be a name");
    test_name = a.pos[off].str();
  }
  charge_list(0);  // and each item kept
  std::vector<Value> out;
  for (const Value& x : seq_of(v)) {
    Value item = attr ? attr_get(in, x, attribute) : x;
    bool r;
    if (has_test) {
      CallArgs rest;
      rest.pos.assign(a.pos.begin() + static_cast<long>(off) + 1, a.pos.end());
      rest.kw = a.kw;
      r = in.test(test_name, item, rest);
    } else {
      r = truthy(item);
    }
    if (r == select) {
      charge_bytes(kItemBytes);
      out.push_back(x);
    }
  }
  return generator(std::move(out));
}
Value f_select(Interpreter& in, const Value& v, CallArgs& a) {
  return select_reject(in, v, a, true, false, "select");
}
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) {
  return select_reject(in, v, a, false, false, "reject");
}
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) {
  return select_reject(in, v, a, true, true, "selectattr");
}
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) {
  return select_reject(in, v, a, false, true, "rejectattr");
}

Value f_replace(Interpreter& in, const Value& v, CallArgs& a) {
  Params p("replace", a, {"old", "new", "count"});
  int64_t count = p.has(2) && !p.get(2).is_none() ? p.get(2).as_int() : -1;
  std::string r = str_replace(to_str(v), to_str(p.get(0)), to_str(p.get(1)), count);
  in.check_size(r.size());
  return Value::string(std::move(r));
}

Value f_reverse(Interpreter&, const Value& v, CallArgs& a) {
  Params p("reverse", a, {});
  if (v.is_string()) {
    charge_string(v.str().size());
    std::vector<uint32_t> cps = to_code_points(v.str());
    std::reverse(cps.begin(), cps.end());
    return str_result(from_code_points(cps, 0, cps.size()), v);
  }
  if (v.is_undefined()) return generator({});  // reversed(Undefined): len 0, nothing to yield
  std::vector<Value> items = seq_of(v);
  charge_list(items.size());
  std::reverse(items.begin(), items.end());
  // reversed() of a list or dict is an iterator; of a generator, a new list.
  bool iterator = (v.is_list() && v.seq_kind() != SeqKind::kGenerator) || v.is_dict();
  return Value::list(std::move(items), iterator ? SeqKind::kGenerator : SeqKind::kList);
}

double round_half_even(double x, int64_t digits) {
  if (!std::isfinite(x)) return x;
  if (digits > 300) return x;
  char buf[512];
  if (digits >= 0) {
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(digits), x);
    return std::strtod(buf, nullptr);
  }
  double scale = std::pow(10.0, static_cast<double>(-digits));
  return std::nearbyint(x / scale) * scale;
}

Value f_round(Interpreter&, const Value& v, CallArgs& a) {
  Params p("round", a, {"precision", "method"});
  int64_t precision = p.get_or(0, Value::integer(0)).as_int();
  std::string method = p.has(1) ? to_str(p.get(1)) : "common";
  if (method != "common" && method != "ceil" && method != "floor")
    render_error("method must be common, ceil or floor");
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number())
    render_error(std::string("type ") + type_name(v) + " doesn't define __round__ method");
  if (method == "common") {
    if (!v.is_float()) return Value::integer(v.as_int());  // round(int, n) stays an int
    return Value::number(round_half_even(v.as_float(), precision));
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_float() * scale;
  return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_safe(Interpreter&, const Value& v, CallArgs& a) {
  Params p("safe", a, {});
  if (v.is_string()) charge_string(v.str().size());  // a copy; other values' repr is charged
  return Value::string(to_str(v), true);
}

Value f_slice(Interpreter&, const Value& v, CallArgs& a) {
  Params p("slice", a, {"slices", "fill_with"});
  int64_t slices = p.get(0).as_int();
  if (slices <= 0) render_error("slice count must be positive");
  if (slices > 100000) render_error("slice count too large");
  std::vector<Value> seq = seq_of(v);
  int64_t n = static_cast<int64_t>(seq.size());
  int64_t per = n / slices, extra = n % slices, offset = 0;
  charge_list(static_cast<size_t>(slices));
  charge_list(seq.size());  // the parts' items
  charge_bytes(saturating_mul(static_cast<size_t>(slices), kObjectBytes + kItemBytes));
  std::vector<Value> out;
  for (int64_t k = 0; k < slices; ++k) {
    int64_t start = offset + k * per;
    if (k < extra) ++offset;
    int64_t end = offset + (k + 1) * per;
    std::vector<Value> part(seq.begin() + start, seq.begin() + end);
    if (p.has(1) && !p.get(1).is_none() && k >= extra) part.push_back(p.get(1));
    out.push_back(Value::list(std::move(part)));
  }
  return generator(std::move(out));
}

Value f_sort(Interpreter& in, const Value& v, CallArgs& a) {
  Params p("sort", a, {"reverse", "case_sensitive", "attribute"});
  bool cs = truthy(p.get_or(1, Value::boolean(false)));
  Value attribute = p.get_or(2, Value::none());
  std::vector<Value> items = seq_of(v);
  auto key = [&](const Value& x) -> Value {
    if (attribute.is_string() && attribute.str().find(',') != std::string::npos) {
      std::vector<Value> parts;
      const std::string comma = ",";
      for (const std::string& part : str_split(attribute.str(), &comma, -1)) {
        Value k = attr_get(in, x, Value::string(str_strip(part, nullptr, true, true)));
        parts.push_back(cs ? k : ignore_case(k));
      }
      return Value::list(std::move(parts));
    }
    Value k = attr_get(in, x, attribute);
    return cs ? k : ignore_case(k);
  };
  charge_list(items.size());
  sort_values(&items, key, truthy(p.get_or(0, Value::boolean(false))));
  return Value::list(std::move(items));
}

Value f_string(Interpreter&, const Value& v, CallArgs& a) {
  Params p("string", a, {});
  if (v.is_string()) return v;
  return Value::string(to_str(v));
}

Value f_sum(Interpreter& in, const Value& v, CallArgs& a) {
  Params p("sum", a, {"attribute", "start"});
  Value total = p.get_or(1, Value::integer(0));
  for (const Value& x : seq_of(v)) {
    Value item = p.has(0) && !p.get(0).is_none() ? attr_get(in, x, p.get(0)) : x;
    if (!(total.is_number() && item.is_number()))
      render_error(std::string("unsupported operand type(s) for +: '") + type_name(total) +
                   "' and '" + type_name(item) + "'");
    if (total.is_float() || item.is_float())
      total = Value::number(total.as_float() + item.as_float());
    else
      total = Value::integer(total.as_int() + item.as_int());
  }
  return total;
}

Value f_title(Interpreter&, const Value& v, CallArgs& a) {
  Params p("title", a, {});
  // jinja2 splits on [-\s({\[<]+ and capitalises each piece.
  std::string s = soft(v);
  std::vector<uint32_t> cps = to_code_points(s);
  std::string out;
  size_t i = 0;
  auto is_sep = [](uint32_t c) {
    return py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  while (i < cps.size()) {
    size_t j = i;
    bool sep = is_sep(cps[i]);
    while (j < cps.size() && is_sep(cps[j]) == sep) ++j;
    std::string piece = from_code_points(cps, i, j);
    if (sep) {
      out += piece;
    } else {
      std::vector<uint32_t> pc = to_code_points(piece);
      out += str_upper(from_code_points(pc, 0, 1)) + str_lower(from_code_points(pc, 1, pc.size()));
    }
    i = j;
  }
  return made_str(std::move(out), v);
}

Value f_tojson(Interpreter& in, const Value& v, CallArgs& a) {
  Params p("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions o;
  o.ensure_ascii = truthy(p.get_or(0, Value::boolean(false)));
  Value indent = p.get_or(1, Value::none());
  if (indent.is_string()) {
    o.indent = indent.str();
  } else if (indent.is_int() || indent.is_bool()) {
    int64_t n = std::max<int64_t>(0, indent.as_int());
    if (n > 1000) render_error("tojson indent too large");
    o.indent = std::string(static_cast<size_t>(n), ' ');
  } else if (!indent.is_none()) {
    render_error("tojson: indent must be an int or a string");
  }
  if (o.indent) o.item_separator = ",";
  Value seps = p.get_or(2, Value::none());
  if (!seps.is_none()) {
    if (!seps.is_list() || seps.items().size() != 2 || !seps.items()[0].is_string() ||
        !seps.items()[1].is_string())
      render_error("tojson: separators must be a pair of strings");
    o.item_separator = seps.items()[0].str();
    o.key_separator = seps.items()[1].str();
  }
  o.sort_keys = truthy(p.get_or(3, Value::boolean(false)));
  std::string r = to_json(v, o);
  in.check_size(r.size());
  return Value::string(std::move(r));
}

Value f_trim(Interpreter&, const Value& v, CallArgs& a) {
  Params p("trim", a, {"chars"});
  std::string chars;
  const std::string* cp = nullptr;
  if (p.has(0) && !p.get(0).is_none()) {
    if (!p.get(0).is_string()) render_error("strip arg must be None or str");
    chars = p.get(0).str();
    cp = &chars;
  }
  return made_str(str_strip(soft(v), cp, true, true), v);
}

Value f_truncate(Interpreter&, const Value& v, CallArgs& a) {
  Params p("truncate", a, {"length", "killwords", "end", "leeway"});
  int64_t len = p.get_or(0, Value::integer(255)).as_int();
  bool killwords = truthy(p.get_or(1, Value::boolean(false)));
  std::string end = p.has(2) ? to_str(p.get(2)) : "...";
  int64_t leeway = p.has(3) && !p.get(3).is_none() ? p.get(3).as_int() : 5;
  int64_t end_len = static_cast<int64_t>(code_point_count(end));
  if (len < end_len) render_error("expected length >= " + std::to_string(end_len));
  if (!v.is_string()) {
    // len(s) first: numbers and None raise; a short list comes back unchanged.
    if (length(v) <= len + leeway || v.is_undefined()) return v;
    render_error(std::string("can only concatenate ") + type_name(v) + " (not \"str\")");
  }
  std::string s = soft(v);
  std::vector<uint32_t> cps = to_code_points(s);
  if (static_cast<int64_t>(cps.size()) <= len + leeway) return made_str(s, v);
  std::string head = from_code_points(cps, 0, static_cast<size_t>(len - end_len));
  charge_string(head.size() + end.size());
  if (killwords) return Value::string(head + end);
  std::string sp = " ";
  return Value::string(str_rsplit(head, &sp, 1)[0] + end);
}

Value f_unique(Interpreter& in, const Value& v, CallArgs& a) {
  Params p("unique", a, {"case_sensitive", "attribute"});
  bool cs = truthy(p.get_or(0, Value::boolean(false)));
  charge_list(0);  // and each item kept
  std::vector<Value> out;
  std::unordered_map<std::string, bool> seen;
  for (const Value& x : seq_of(v)) {
    Value k = attr_get(in, x, p.get_or(1, Value::none()));
    if (!cs) k = ignore_case(k);
    if (seen.emplace(hash_key(k), true).second) {
      charge_bytes(kItemBytes);
      out.push_back(x);
    }
  }
  return generator(std::move(out));
}

Value f_wordcount(Interpreter&, const Value& v, CallArgs& a) {
  Params p("wordcount", a, {});
  // len(re.findall(r"\w+", s)): runs of letters, digits and underscores.
  int64_t n = 0;
  bool in_word = false;
  for (uint32_t c : to_code_points(soft(v))) {
    bool w = c == '_' || py_isalpha(c) || py_isdigit(c);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

// jinja2's generator filters run lazily: an error in one surfaces only when the result is
// iterated, and never if it is only tested for truth or dropped.
template <FilterFn F>
Value lazy(Interpreter& in, const Value& v, CallArgs& a) {
  try {
    return F(in, v, a);
  } catch (const TemplateError& e) {
    if (e.kind() != ErrorKind::kRender) throw;
    return Value::failed_generator(e.what());
  }
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> kFilters = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"batch", lazy<f_batch>},
      {"capitalize", f_capitalize},
      {"center", f_center},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"forceescape", f_forceescape},
      {"format", f_format},
      {"groupby", f_groupby},
      {"indent", f_indent},
      {"int", f_int},
      {"items", lazy<f_items>},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", lazy<f_map>},
      {"max", f_max},
      {"min", f_min},
      {"reject", lazy<f_reject>},
      {"rejectattr", lazy<f_rejectattr>},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_safe},
      {"select", lazy<f_select>},
      {"selectattr", lazy<f_selectattr>},
      {"slice", lazy<f_slice>},
      {"sort", f_sort},
      {"string", f_string},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"truncate", f_truncate},
      {"unique", lazy<f_unique>},
      {"upper", f_upper},
      {"wordcount", f_wordcount},
  };
  return kFilters;
}

}  // namespace

FilterFn find_filter(const std::string& name) {
  auto it = filters().find(name);
  return it == filters().end() ? nullptr : it->second;
}

bool is_unsupported_filter(const std::string& name) {
  static const char* kNames[] = {"filesizeformat", "pprint", "random",   "striptags",
                                 "urlencode",      "urlize", "wordwrap", "xmlattr"};
  for (const char* n : kNames)
    if (name == n) return true;
  return false;
}

}  // namespace pagoda::jinja
