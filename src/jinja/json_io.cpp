#include "jinja/json_io.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "jinja/alloc_budget.h"
#include "jinja/error.h"
#include "jinja/pystr.h"
#include "tokenizer/unicode.h"

namespace pagoda::jinja {

namespace {

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  using T = nlohmann::ordered_json::value_t;
  if (depth > 512) render_error("the input JSON nests deeper than 512 levels");
  switch (j.type()) {
    case T::null:
      return Value::none();
    case T::boolean:
      return Value::boolean(j.get<bool>());
    case T::number_integer:
      return Value::integer(j.get<int64_t>());
    case T::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX))
        throw TemplateError(ErrorKind::kUnsupported,
                            "integers beyond 64 bits in the input are not supported");
      return Value::integer(static_cast<int64_t>(u));
    }
    case T::number_float:
      return Value::number(j.get<double>());
    case T::string:
      return Value::string(j.get<std::string>());
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json_at(x, depth + 1));
      return Value::list(std::move(items));
    }
    case T::object: {
      auto d = std::make_shared<DictObj>();
      for (const auto& [k, x] : j.items()) d->set(Value::string(k), from_json_at(x, depth + 1));
      return Value::dict(std::move(d));
    }
    default:
      throw TemplateError(ErrorKind::kUnsupported, "binary JSON values are not supported");
  }
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j) {
  return from_json_at(j, 0);
}

namespace {

// Charged at its unescaped size before, and for what the escapes add after: at most six
// times a string that already exists.
void escape_string(std::string_view s, bool ensure_ascii, std::string* out) {
  charge_bytes(s.size() + 2);
  const size_t before = out->size();
  *out += '"';
  for (size_t i = 0; i < s.size();) {
    unsigned char b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      switch (b) {
        case '"':
          *out += "\\\"";
          break;
        case '\\':
          *out += "\\\\";
          break;
        case '\n':
          *out += "\\n";
          break;
        case '\r':
          *out += "\\r";
          break;
        case '\t':
          *out += "\\t";
          break;
        case '\b':
          *out += "\\b";
          break;
        case '\f':
          *out += "\\f";
          break;
        default:
          if (b < 0x20 || (ensure_ascii && b == 0x7F)) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", b);
            *out += buf;
          } else {
            *out += static_cast<char>(b);
          }
      }
      continue;
    }
    size_t start = i;
    uint32_t cp = unicode::decode_one(s, &i);
    if (!ensure_ascii) {
      out->append(s.substr(start, i - start));
      continue;
    }
    char buf[16];
    if (cp >= 0x10000) {
      uint32_t v = cp - 0x10000;
      std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
    } else {
      std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
    }
    *out += buf;
  }
  *out += '"';
  charge_bytes(out->size() - before - (s.size() + 2));
}

std::string float_json(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f < 0 ? "-Infinity" : "Infinity";
  return float_repr(f);
}

std::string key_json(const Value& k, bool ensure_ascii) {
  std::string out;
  switch (k.kind()) {
    case Kind::kString:
      escape_string(k.str(), ensure_ascii, &out);
      return out;
    case Kind::kBool:
      return k.as_bool() ? "\"true\"" : "\"false\"";
    case Kind::kInt:
      return "\"" + std::to_string(k.as_int()) + "\"";
    case Kind::kFloat:
      return "\"" + float_json(k.as_float()) + "\"";
    case Kind::kNone:
      return "\"null\"";
    default:
      render_error(std::string("keys must be str, int, float, bool or None, not ") + type_name(k));
  }
}

void dump(const Value& v, const JsonDumpOptions& o, int level, std::string* out) {
  if (level > 500) render_error("maximum recursion depth exceeded while encoding a JSON object");
  auto newline = [&](int lvl) {
    append_charged(out, '\n');
    for (int i = 0; i < lvl; ++i) append_charged(out, *o.indent);
  };
  // Python picks "," over ", " when indenting; the caller already chose (JsonDumpOptions).
  const std::string& item_sep = o.item_separator;
  switch (v.kind()) {
    case Kind::kNone:
      append_charged(out, "null");
      return;
    case Kind::kBool:
      append_charged(out, v.as_bool() ? "true" : "false");
      return;
    case Kind::kInt:
      append_charged(out, std::to_string(v.as_int()));
      return;
    case Kind::kFloat:
      append_charged(out, float_json(v.as_float()));
      return;
    case Kind::kString:
      escape_string(v.str(), o.ensure_ascii, out);
      return;
    case Kind::kList: {
      if (v.seq_kind() != SeqKind::kList && v.seq_kind() != SeqKind::kTuple) break;
      const auto& items = v.items();
      if (items.empty()) {
        append_charged(out, "[]");
        return;
      }
      append_charged(out, '[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) append_charged(out, item_sep);
        if (o.indent) newline(level + 1);
        dump(items[i], o, level + 1, out);
      }
      if (o.indent) newline(level);
      append_charged(out, ']');
      return;
    }
    case Kind::kDict: {
      const auto& items = v.dict().items;
      if (items.empty()) {
        append_charged(out, "{}");
        return;
      }
      std::vector<size_t> order(items.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      if (o.sort_keys)
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
          return less_than(items[a].first, items[b].first);
        });
      append_charged(out, '{');
      for (size_t n = 0; n < order.size(); ++n) {
        const auto& [k, x] = items[order[n]];
        if (n) append_charged(out, item_sep);
        if (o.indent) newline(level + 1);
        if (k.is_string())
          escape_string(k.str(), o.ensure_ascii, out);
        else
          append_charged(out, key_json(k, o.ensure_ascii));
        append_charged(out, o.key_separator);
        dump(x, o, level + 1, out);
      }
      if (o.indent) newline(level);
      append_charged(out, '}');
      return;
    }
    default:
      break;
  }
  render_error(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
}

}  // namespace

std::string to_json(const Value& v, const JsonDumpOptions& options) {
  charge_string(0);
  std::string out;
  dump(v, options, 0, &out);
  return out;
}

}  // namespace pagoda::jinja
