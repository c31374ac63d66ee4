#include "jinja/pystr.h"

#include <locale.h>
#include <wctype.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "jinja/alloc_budget.h"
#include "jinja/error.h"
#include "jinja/value.h"
#include "tokenizer/unicode.h"

namespace pagoda::jinja {

std::vector<uint32_t> to_code_points(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(unicode::decode_one(s, &i));
  return out;
}

std::string from_code_points(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end && i < cps.size(); ++i) unicode::append_utf8(&out, cps[i]);
  return out;
}

size_t code_point_count(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n;
  }
  return true;
}

bool py_isspace(uint32_t cp) {
  // str.isspace(): bidirectional class WS, B or S, or category Zs.
  if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace {

locale_t utf8_locale() {
  static locale_t loc = [] {
    locale_t l = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
    if (!l) l = newlocale(LC_CTYPE_MASK, "C", static_cast<locale_t>(0));
    return l;
  }();
  return loc;
}

}  // namespace

uint32_t py_lower(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  return static_cast<uint32_t>(towlower_l(static_cast<wint_t>(cp), utf8_locale()));
}

uint32_t py_upper(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  return static_cast<uint32_t>(towupper_l(static_cast<wint_t>(cp), utf8_locale()));
}

bool py_isalpha(uint32_t cp) {
  if (cp < 0x80) return (cp | 32) >= 'a' && (cp | 32) <= 'z';
  return unicode::flags(cp) & unicode::kLetter;
}

bool py_isdigit(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return unicode::flags(cp) & unicode::kNumber;
}

bool py_isprintable(uint32_t cp) {
  if (cp == ' ') return true;
  return !(unicode::flags(cp) & (unicode::kControl | unicode::kUndefined | unicode::kSeparator));
}

namespace {

bool is_cased(uint32_t cp) {
  return py_lower(cp) != cp || py_upper(cp) != cp;
}

template <typename F>
std::string map_cps(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) unicode::append_utf8(&out, f(unicode::decode_one(s, &i)));
  return out;
}

}  // namespace

// Python's full case mappings where one character becomes several (SpecialCasing.txt,
// the unconditional entries templates are likely to meet).
const char* special_upper(uint32_t c) {
  switch (c) {
    case 0xDF:
      return "SS";
    case 0x149:
      return "\u02BCN";
    case 0x587:
      return "\u0535\u0552";
    case 0xFB00:
      return "FF";
    case 0xFB01:
      return "FI";
    case 0xFB02:
      return "FL";
    case 0xFB03:
      return "FFI";
    case 0xFB04:
      return "FFL";
    case 0xFB05:
    case 0xFB06:
      return "ST";
    default:
      return nullptr;
  }
}

std::string str_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t c = unicode::decode_one(s, &i);
    if (c == 0x130) {
      out += "i\u0307";
      continue;
    }
    unicode::append_utf8(&out, py_lower(c));
  }
  return out;
}

std::string str_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t c = unicode::decode_one(s, &i);
    if (const char* sp = special_upper(c)) {
      out += sp;
      continue;
    }
    unicode::append_utf8(&out, py_upper(c));
  }
  return out;
}

std::string str_capitalize(std::string_view s) {
  bool first = true;
  return map_cps(s, [&](uint32_t c) {
    uint32_t r = first ? py_upper(c) : py_lower(c);
    first = false;
    return r;
  });
}

std::string str_title(std::string_view s) {
  bool prev_cased = false;
  return map_cps(s, [&](uint32_t c) {
    uint32_t r = prev_cased ? py_lower(c) : py_upper(c);
    prev_cased = is_cased(c);
    return r;
  });
}

std::string str_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<uint32_t> cps = to_code_points(s);
  std::vector<uint32_t> set;
  if (chars) set = to_code_points(*chars);
  auto strip_it = [&](uint32_t c) {
    if (!chars) return py_isspace(c);
    for (uint32_t x : set)
      if (x == c) return true;
    return false;
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return from_code_points(cps, b, e);
}

namespace {

// A part of a split, charged as the new string it becomes.
void add_part(std::vector<std::string>* out, std::string part) {
  charge_string(part.size());
  out->push_back(std::move(part));
}

}  // namespace

std::vector<std::string> str_split(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) render_error("empty separator");
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      add_part(&out, std::string(s.substr(pos, hit - pos)));
      pos = hit + sep->size();
    }
    add_part(&out, std::string(s.substr(pos)));
    return out;
  }
  std::vector<uint32_t> cps = to_code_points(s);
  size_t i = 0, n = cps.size();
  while (true) {
    while (i < n && py_isspace(cps[i])) ++i;
    if (i >= n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      size_t e = n;
      while (e > i && py_isspace(cps[e - 1])) --e;
      add_part(&out, from_code_points(cps, i, e));
      break;
    }
    size_t j = i;
    while (j < n && !py_isspace(cps[j])) ++j;
    add_part(&out, from_code_points(cps, i, j));
    i = j;
  }
  return out;
}

std::vector<std::string> str_rsplit(std::string_view s, const std::string* sep, int64_t maxsplit) {
  if (maxsplit < 0) return str_split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) render_error("empty separator");
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      add_part(&out, std::string(s.substr(hit + sep->size(), end - hit - sep->size())));
      end = hit;
    }
    add_part(&out, std::string(s.substr(0, end)));
  } else {
    std::vector<uint32_t> cps = to_code_points(s);
    size_t e = cps.size();
    while (true) {
      while (e > 0 && py_isspace(cps[e - 1])) --e;
      if (e == 0) break;
      if (static_cast<int64_t>(out.size()) >= maxsplit) {
        size_t b = 0;
        while (b < e && py_isspace(cps[b])) ++b;
        add_part(&out, from_code_points(cps, b, e));
        break;
      }
      size_t b = e;
      while (b > 0 && !py_isspace(cps[b - 1])) --b;
      add_part(&out, from_code_points(cps, b, e));
      e = b;
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::string str_replace(std::string_view s, std::string_view old, std::string_view repl,
                        int64_t count) {
  // The result's size first: replacing "" or a short string with a long one multiplies
  // the input, and the budget must refuse that before it is built.
  size_t hits = 0;
  if (old.empty()) {
    hits = code_point_count(s) + 1;  // before every character and at the end
  } else {
    for (size_t pos = s.find(old); pos != std::string_view::npos;
         pos = s.find(old, pos + old.size()))
      ++hits;
  }
  if (count >= 0) hits = std::min(hits, static_cast<size_t>(count));
  size_t size = s.size() - hits * old.size();
  if (__builtin_add_overflow(size, saturating_mul(hits, repl.size()), &size)) size = SIZE_MAX;
  charge_string(size);
  std::string out;
  out.reserve(size);
  if (old.empty()) {
    // Python inserts `repl` before every character and at the end.
    size_t done = 0;
    size_t i = 0;
    while (i <= s.size()) {
      if (done < hits) {
        out += repl;
        ++done;
      }
      if (i == s.size()) break;
      size_t j = i;
      unicode::decode_one(s, &j);
      out += s.substr(i, j - i);
      i = j;
    }
    return out;
  }
  size_t pos = 0;
  for (size_t done = 0; done < hits; ++done) {
    size_t hit = s.find(old, pos);
    out += s.substr(pos, hit - pos);
    out += repl;
    pos = hit + old.size();
  }
  out += s.substr(pos);
  return out;
}

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  int exp10 = std::atoi(sci.c_str() + e + 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int decpt = exp10 + 1;
  std::string out;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out = "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(decpt)) + "." +
            digits.substr(static_cast<size_t>(decpt));
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    int x = decpt - 1;
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
    out += eb;
  }
  return sign + out;
}

std::string string_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    uint32_t c = unicode::decode_one(s, &i);
    char buf[16];
    if (c == static_cast<uint32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else if (c < 0x80 || py_isprintable(c)) {
      unicode::append_utf8(&out, c);
    } else if (c < 0x100) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else if (c < 0x10000) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      std::snprintf(buf, sizeof(buf), "\\U%08x", c);
      out += buf;
    }
  }
  out += quote;
  return out;
}

std::string html_escape(std::string_view s) {
  size_t size = s.size();
  for (char c : s) size += c == '&' || c == '<' || c == '>' ? 3 : c == '"' || c == '\'' ? 4 : 0;
  charge_string(size);
  std::string out;
  out.reserve(size);
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

// One conversion of printf-style formatting, for '%' and the format filter.
struct Spec {
  std::string flags;
  int width = -1;
  int precision = -1;
  char type = 's';
};

int64_t to_int_for_format(const Value& v, char type) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  if (v.is_float()) {
    if (type == 'x' || type == 'X' || type == 'o' || type == 'c')
      render_error(std::string("%") + type + " format: an integer is required, not float");
    double f = v.as_float();
    if (!std::isfinite(f)) render_error("cannot convert float to integer");
    return static_cast<int64_t>(f);
  }
  render_error(std::string("%") + type + " format: a real number is required, not " + type_name(v));
}

std::string pad(std::string body, const Spec& s, bool numeric) {
  size_t len = code_point_count(body);
  if (s.width < 0 || len >= static_cast<size_t>(s.width)) return body;
  size_t fill = static_cast<size_t>(s.width) - len;
  if (s.flags.find('-') != std::string::npos) return body + std::string(fill, ' ');
  if (numeric && s.flags.find('0') != std::string::npos) {
    size_t sign = (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) ? 1 : 0;
    return body.substr(0, sign) + std::string(fill, '0') + body.substr(sign);
  }
  return std::string(fill, ' ') + body;
}

std::string format_one(const Spec& s, const Value& v) {
  char buf[512];
  std::string cflags;
  for (char f : s.flags)
    if (f == '+' || f == ' ' || f == '#') cflags += f;
  switch (s.type) {
    case 's':
    case 'r':
    case 'a': {
      std::string body = s.type == 's' ? to_str(v) : repr(v);
      if (s.precision >= 0) {
        std::vector<uint32_t> cps = to_code_points(body);
        body = from_code_points(cps, 0, static_cast<size_t>(s.precision));
      }
      return pad(body, s, false);
    }
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
    case 'o': {
      int64_t i = to_int_for_format(v, s.type);
      std::string f = "%" + cflags + "ll" + (s.type == 'i' || s.type == 'u' ? 'd' : s.type);
      if (s.type == 'o' && cflags.find('#') != std::string::npos) {
        std::snprintf(buf, sizeof(buf), "%llo", static_cast<long long>(i < 0 ? -i : i));
        std::string body = std::string(i < 0 ? "-" : "") + "0o" + buf;
        return pad(body, s, true);
      }
      std::snprintf(buf, sizeof(buf), f.c_str(), static_cast<long long>(i));
      return pad(buf, s, true);
    }
    case 'c': {
      if (v.is_string()) return pad(v.str(), s, false);
      std::string out;
      unicode::append_utf8(&out, static_cast<uint32_t>(to_int_for_format(v, 'c')));
      return pad(out, s, false);
    }
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G': {
      if (!v.is_number()) render_error(std::string("must be real number, not ") + type_name(v));
      std::string f =
          "%" + cflags + "." + std::to_string(s.precision < 0 ? 6 : s.precision) + s.type;
      std::snprintf(buf, sizeof(buf), f.c_str(), v.as_float());
      return pad(buf, s, true);
    }
    default:
      unsupported_error(std::string("unsupported format character '") + s.type + "'");
  }
}

}  // namespace

std::string percent_format(const std::string& fmt, const Value& args) {
  std::vector<Value> pos;
  const DictObj* mapping = nullptr;
  // Python takes anything with __getitem__ (but a tuple or str) as a mapping: unused
  // arguments are then no error.
  bool mapping_like = args.is_dict() || args.is_undefined() ||
                      (args.is_list() && args.seq_kind() != SeqKind::kTuple &&
                       args.seq_kind() != SeqKind::kGenerator);
  if (args.is_list() && args.seq_kind() == SeqKind::kTuple)
    pos = args.items();
  else if (args.is_dict())
    mapping = &args.dict();
  else
    pos.push_back(args);
  size_t next = 0;
  bool used_mapping = false;
  // Charged piece by piece: a conversion's text can be far longer than the format.
  charge_string(0);
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      append_charged(&out, fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) render_error("incomplete format");
    if (fmt[i] == '%') {
      append_charged(&out, '%');
      continue;
    }
    const Value* arg = nullptr;
    Value keyed;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string::npos) render_error("incomplete format key");
      if (args.is_undefined()) fail_undefined(args);
      if (!mapping) render_error("format requires a mapping");
      const Value* found = mapping->find(Value::string(fmt.substr(i + 1, close - i - 1)));
      if (!found) render_error("'" + fmt.substr(i + 1, close - i - 1) + "'");
      keyed = *found;
      arg = &keyed;
      used_mapping = true;
      i = close + 1;
    }
    Spec s;
    while (i < fmt.size() && std::strchr("-+ #0", fmt[i])) s.flags += fmt[i++];
    auto read_num = [&](int* dst) {
      if (i < fmt.size() && fmt[i] == '*') {
        if (next >= pos.size()) render_error("not enough arguments for format string");
        // Capped as a written width is: '%*s' % (10**9, x) would pad a gigabyte.
        int64_t n = pos[next++].as_int();
        if (n > 100000) render_error("width too big");
        *dst = static_cast<int>(std::max<int64_t>(n, -1));
        ++i;
        return;
      }
      int n = 0;
      bool any = false;
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') {
        n = n * 10 + (fmt[i++] - '0');
        any = true;
        if (n > 100000) render_error("width too big");
      }
      if (any) *dst = n;
    };
    read_num(&s.width);
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      s.precision = 0;
      read_num(&s.precision);
    }
    while (i < fmt.size() && (fmt[i] == 'l' || fmt[i] == 'h' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) render_error("incomplete format");
    s.type = fmt[i];
    if (!arg) {
      if (mapping) {
        keyed = args;
        arg = &keyed;
      } else {
        if (next >= pos.size()) render_error("not enough arguments for format string");
        arg = &pos[next++];
      }
    }
    append_charged(&out, format_one(s, *arg));
  }
  if (!mapping_like && next < pos.size())
    render_error("not all arguments converted during string formatting");
  (void)used_mapping;
  return out;
}

namespace {

// The format-spec mini-language of str.format: [[fill]align][sign][#][0][width][,][.prec][type]
std::string apply_format_spec(const Value& v, const std::string& spec) {
  if (spec.empty()) return to_str(v);
  size_t i = 0;
  std::string fill = " ";
  char align = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (spec.size() >= 2 && is_align(spec[1])) {
    fill = spec.substr(0, 1);
    align = spec[1];
    i = 2;
  } else if (is_align(spec[0])) {
    align = spec[0];
    i = 1;
  }
  char sign = 0;
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  bool alt = false;
  if (i < spec.size() && spec[i] == '#') {
    alt = true;
    ++i;
  }
  if (i < spec.size() && spec[i] == '0') {
    if (!align) {
      fill = "0";
      align = '=';
    }
    ++i;
  }
  int width = 0;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])))
    width = std::min(width * 10 + (spec[i++] - '0'), 100000);
  bool comma = false;
  if (i < spec.size() && (spec[i] == ',' || spec[i] == '_')) {
    comma = spec[i] == ',';
    ++i;
  }
  int precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    precision = 0;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])))
      precision = std::min(precision * 10 + (spec[i++] - '0'), 1000);
  }
  char type = i < spec.size() ? spec[i++] : 0;
  if (i != spec.size() || comma || alt) unsupported_error("unsupported format spec '" + spec + "'");
  std::string body;
  bool numeric = false;
  if (v.is_string() || (!v.is_number() && !type)) {
    if (type && type != 's') render_error("Unknown format code '" + std::string(1, type) + "'");
    body = to_str(v);
    if (precision >= 0) body = from_code_points(to_code_points(body), 0, precision);
    if (!align) align = '<';
  } else if (v.is_number()) {
    numeric = true;
    char buf[512];
    std::string sg = sign && sign != '-' ? std::string(1, sign) : "";
    if (!type && !v.is_float()) type = 'd';
    if (type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b') {
      if (v.is_float()) render_error("Unknown format code 'd' for object of type 'float'");
      int64_t x = v.as_int();
      if (type == 'b') {
        uint64_t u = x < 0 ? static_cast<uint64_t>(-x) : static_cast<uint64_t>(x);
        std::string bits;
        do {
          bits.insert(bits.begin(), static_cast<char>('0' + (u & 1)));
          u >>= 1;
        } while (u);
        body = (x < 0 ? "-" : sg) + bits;
      } else {
        std::string f = "%" + sg + "ll" + (type == 'd' ? 'd' : type);
        std::snprintf(buf, sizeof(buf), f.c_str(), static_cast<long long>(x));
        body = buf;
      }
    } else if (!type) {
      body = float_repr(v.as_float());
      if (sg.size() && v.as_float() >= 0) body = sg + body;
    } else if (std::strchr("fFeEgG%", type)) {
      double x = v.as_float();
      std::string suffix;
      if (type == '%') {
        x *= 100;
        type = 'f';
        suffix = "%";
      }
      std::string f = "%" + sg + "." + std::to_string(precision < 0 ? 6 : precision) + type;
      std::snprintf(buf, sizeof(buf), f.c_str(), x);
      body = buf + suffix;
    } else {
      render_error("Unknown format code '" + std::string(1, type) + "'");
    }
    if (!align) align = '>';
  } else {
    render_error("unsupported format string passed to " + std::string(type_name(v)) +
                 ".__format__");
  }
  size_t len = code_point_count(body);
  if (width <= 0 || len >= static_cast<size_t>(width)) return body;
  size_t n = static_cast<size_t>(width) - len;
  auto fills = [&](size_t k) {
    std::string s;
    for (size_t j = 0; j < k; ++j) s += fill;
    return s;
  };
  switch (align) {
    case '<':
      return body + fills(n);
    case '^':
      return fills(n / 2) + body + fills(n - n / 2);
    case '=':
      if (numeric && !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' '))
        return body.substr(0, 1) + fills(n) + body.substr(1);
      return fills(n) + body;
    default:
      return fills(n) + body;
  }
}

}  // namespace

std::string brace_format(const std::string& fmt, const std::vector<Value>& pos,
                         const std::vector<std::pair<std::string, Value>>& kw) {
  charge_string(0);  // and each piece as it comes: see percent_format
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        append_charged(&out, '}');
        ++i;
        continue;
      }
      render_error("Single '}' encountered in format string");
    }
    if (c != '{') {
      append_charged(&out, c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      append_charged(&out, '{');
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) render_error("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    std::string spec, conv;
    size_t colon = field.find(':');
    if (colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    size_t bang = field.find('!');
    if (bang != std::string::npos) {
      conv = field.substr(bang + 1);
      field = field.substr(0, bang);
    }
    if (field.find_first_of(".[") != std::string::npos)
      unsupported_error("attribute or index lookups in str.format fields ('" + field + "')");
    Value v;
    if (field.empty()) {
      if (auto_index >= pos.size())
        render_error("Replacement index " + std::to_string(auto_index) +
                     " out of range for positional args tuple");
      v = pos[auto_index++];
    } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
      size_t k = static_cast<size_t>(std::atoll(field.c_str()));
      if (k >= pos.size())
        render_error("Replacement index " + field + " out of range for positional args tuple");
      v = pos[k];
    } else {
      bool found = false;
      for (const auto& [name, val] : kw)
        if (name == field) {
          v = val;
          found = true;
        }
      if (!found) render_error("'" + field + "'");
    }
    if (conv == "r")
      v = Value::string(repr(v));
    else if (conv == "s")
      v = Value::string(to_str(v));
    else if (!conv.empty())
      render_error("Unknown conversion specifier " + conv);
    append_charged(&out, apply_format_spec(v, spec));
  }
  return out;
}

}  // namespace pagoda::jinja
