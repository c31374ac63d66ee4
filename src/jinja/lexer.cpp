#include "jinja/lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "jinja/error.h"
#include "jinja/pystr.h"
#include "tokenizer/unicode.h"

namespace pagoda::jinja {
namespace {

[[noreturn]] void syntax_error(const std::string& message, int line) {
  throw TemplateError(ErrorKind::kSyntax, message, line);
}

// Python's \s at `pos`: the byte length of the whitespace character there, or 0.
size_t space_at(const std::string& s, size_t pos) {
  if (pos >= s.size()) return 0;
  unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) return py_isspace(c) ? 1 : 0;
  size_t p = pos;
  uint32_t cp = unicode::decode_one(s, &p);
  return py_isspace(cp) ? p - pos : 0;
}

size_t skip_spaces(const std::string& s, size_t pos) {
  while (size_t n = space_at(s, pos)) pos += n;
  return pos;
}

int count_newlines(const std::string& s, size_t begin, size_t end) {
  int n = 0;
  for (size_t i = begin; i < end && i < s.size(); ++i) n += s[i] == '\n';
  return n;
}

// Removes trailing Python whitespace (str.rstrip()).
std::string rstrip_ws(const std::string& text) {
  std::vector<uint32_t> cps = to_code_points(text);
  size_t e = cps.size();
  while (e > 0 && py_isspace(cps[e - 1])) --e;
  return from_code_points(cps, 0, e);
}

bool all_space(const std::string& s, size_t from) {
  if (from >= s.size()) return false;  // \s+ needs at least one character
  size_t p = from;
  while (p < s.size()) {
    size_t n = space_at(s, p);
    if (!n) return false;
    p += n;
  }
  return true;
}

bool is_name_start(unsigned char c) {
  return c == '_' || ((c | 32) >= 'a' && (c | 32) <= 'z') || c >= 0x80;
}
bool is_name_char(unsigned char c) {
  return is_name_start(c) || (c >= '0' && c <= '9');
}

// Python's "unicode-escape" decoding of a string literal's body.
std::string unescape(const std::string& body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out += c;
      continue;
    }
    char e = body[++i];
    auto hex = [&](int digits) {
      uint32_t v = 0;
      for (int k = 1; k <= digits; ++k) {
        if (i + k >= body.size() || !std::isxdigit(static_cast<unsigned char>(body[i + k])))
          syntax_error(std::string("truncated \\") + e + " escape in a string literal", line);
        char h = body[i + k];
        v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 32) - 'a' + 10);
      }
      i += static_cast<size_t>(digits);
      return v;
    };
    switch (e) {
      case '\n':
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
        unicode::append_utf8(&out, hex(2));
        break;
      case 'u':
        unicode::append_utf8(&out, hex(4));
        break;
      case 'U': {
        uint32_t v = hex(8);
        if (v > 0x10FFFF) syntax_error("illegal Unicode character in a string literal", line);
        unicode::append_utf8(&out, v);
        break;
      }
      case 'N':
        throw TemplateError(ErrorKind::kUnsupported,
                            "\\N{...} escapes in string literals are not supported", line);
      default:
        if (e >= '0' && e <= '7') {
          uint32_t v = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k)
            v = v * 8 + static_cast<uint32_t>(body[++i] - '0');
          unicode::append_utf8(&out, v);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) root();
    push(Tok::kEof, "", line_);
    return std::move(out_);
  }

 private:
  void push(Tok t, std::string text, int line) {
    Token tok;
    tok.type = t;
    tok.text = std::move(text);
    tok.line = line;
    out_.push_back(std::move(tok));
  }

  // Text up to the next tag, then the tag.
  void root() {
    size_t tag = pos_;
    while (true) {
      tag = s_.find('{', tag);
      if (tag == std::string::npos || tag + 1 >= s_.size()) {
        tag = std::string::npos;
        break;
      }
      char c = s_[tag + 1];
      if (c == '{' || c == '%' || c == '#') break;
      ++tag;
    }
    if (tag == std::string::npos) {
      push(Tok::kData, s_.substr(pos_), line_);
      line_ += count_newlines(s_, pos_, s_.size());
      pos_ = s_.size();
      return;
    }
    char kind = s_[tag + 1];
    size_t after = tag + 2;
    char sign = 0;
    if (after < s_.size() && (s_[after] == '-' || s_[after] == '+')) sign = s_[after++];
    // {% raw %} is recognised as a whole at the tag's start.
    size_t raw_end = 0;
    if (kind == '%') raw_end = match_raw_begin(tag);
    std::string text = s_.substr(pos_, tag - pos_);
    int text_lines = count_newlines(text, 0, text.size());
    text = strip_before_tag(text, sign, kind != '{');
    if (!text.empty()) push(Tok::kData, text, line_);
    line_ += text_lines;
    if (raw_end) {
      line_ += count_newlines(s_, tag, raw_end);
      line_starting_ = s_[raw_end - 1] == '\n';
      pos_ = raw_end;
      raw_body();
      return;
    }
    pos_ = after;
    if (kind == '#') {
      comment();
    } else {
      push(kind == '%' ? Tok::kBlockBegin : Tok::kVarBegin, "", line_);
      line_starting_ = false;
      tag_body(kind == '%');
    }
  }

  std::string strip_before_tag(const std::string& text, char sign, bool lstrip_allowed) {
    if (sign == '-') return rstrip_ws(text);
    if (sign != '+' && lstrip_allowed) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && all_space(text, l_pos)) return text.substr(0, l_pos);
    }
    return text;
  }

  // Length through the end of "{%[-+] raw [-]%}" at `tag`, or 0.
  size_t match_raw_begin(size_t tag) {
    size_t p = tag + 2;
    if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) ++p;
    p = skip_spaces(s_, p);
    if (s_.compare(p, 3, "raw") != 0) return 0;
    p = skip_spaces(s_, p + 3);
    if (s_.compare(p, 3, "-%}") == 0) return skip_spaces(s_, p + 3);
    if (s_.compare(p, 2, "%}") == 0) return p + 2;
    return 0;
  }

  void raw_body() {
    int start_line = line_;
    size_t p = pos_;
    while (true) {
      p = s_.find("{%", p);
      if (p == std::string::npos) syntax_error("Missing end of raw directive", start_line);
      size_t q = p + 2;
      char sign = 0;
      if (q < s_.size() && (s_[q] == '-' || s_[q] == '+')) sign = s_[q++];
      q = skip_spaces(s_, q);
      if (s_.compare(q, 6, "endraw") == 0) {
        q = skip_spaces(s_, q + 6);
        size_t end = 0;
        if (s_.compare(q, 3, "+%}") == 0)
          end = q + 3;
        else if (s_.compare(q, 3, "-%}") == 0)
          end = skip_spaces(s_, q + 3);
        else if (s_.compare(q, 2, "%}") == 0)
          end = q + 2 + (q + 2 < s_.size() && s_[q + 2] == '\n' ? 1 : 0);
        if (end) {
          std::string text = strip_before_tag(s_.substr(pos_, p - pos_), sign, true);
          if (!text.empty()) push(Tok::kData, text, line_);
          line_ += count_newlines(s_, pos_, end);
          line_starting_ = s_[end - 1] == '\n';
          pos_ = end;
          return;
        }
      }
      p += 2;
    }
  }

  void comment() {
    size_t p = pos_;
    while (true) {
      if (p >= s_.size()) syntax_error("Missing end of comment tag", line_);
      size_t end = 0;
      if (s_.compare(p, 3, "+#}") == 0)
        end = p + 3;
      else if (s_.compare(p, 3, "-#}") == 0)
        end = skip_spaces(s_, p + 3);
      else if (s_.compare(p, 2, "#}") == 0)
        end = p + 2 + (p + 2 < s_.size() && s_[p + 2] == '\n' ? 1 : 0);
      if (end) {
        line_ += count_newlines(s_, pos_, end);
        line_starting_ = s_[end - 1] == '\n';
        pos_ = end;
        return;
      }
      ++p;
    }
  }

  // Tokens inside {% %} or {{ }} through the closing delimiter.
  void tag_body(bool block) {
    std::vector<char> balance;
    while (pos_ < s_.size()) {
      if (balance.empty()) {
        size_t end = 0;
        if (block) {
          if (s_.compare(pos_, 3, "+%}") == 0)
            end = pos_ + 3;
          else if (s_.compare(pos_, 3, "-%}") == 0)
            end = skip_spaces(s_, pos_ + 3);
          else if (s_.compare(pos_, 2, "%}") == 0)
            end = pos_ + 2 + (pos_ + 2 < s_.size() && s_[pos_ + 2] == '\n' ? 1 : 0);
        } else {
          if (s_.compare(pos_, 3, "-}}") == 0)
            end = skip_spaces(s_, pos_ + 3);
          else if (s_.compare(pos_, 2, "}}") == 0)
            end = pos_ + 2;
        }
        if (end) {
          push(block ? Tok::kBlockEnd : Tok::kVarEnd, "", line_);
          line_ += count_newlines(s_, pos_, end);
          line_starting_ = s_[end - 1] == '\n';
          pos_ = end;
          return;
        }
      }
      if (size_t n = space_at(s_, pos_)) {
        line_ += s_[pos_] == '\n';
        pos_ += n;
        continue;
      }
      unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (std::isdigit(c)) {
        number();
      } else if (is_name_start(c)) {
        size_t b = pos_;
        while (pos_ < s_.size() && is_name_char(static_cast<unsigned char>(s_[pos_]))) ++pos_;
        std::string name = s_.substr(b, pos_ - b);
        for (uint32_t cp : to_code_points(name))
          if (cp >= 0x80 && !py_isalpha(cp) && !py_isdigit(cp))
            syntax_error("Invalid character in identifier", line_);
        push(Tok::kName, name, line_);
      } else if (c == '\'' || c == '"') {
        string_literal(static_cast<char>(c));
      } else {
        op(balance);
      }
    }
    // Source ended inside the tag; the parser reports the missing end.
  }

  void number() {
    size_t b = pos_;
    auto digits = [&](size_t p, bool (*ok)(char)) {
      // (\d+_)*\d+ style: digits with single underscores between them.
      size_t q = p;
      if (q >= s_.size() || !ok(s_[q])) return p;
      while (q < s_.size()) {
        if (ok(s_[q])) {
          ++q;
        } else if (s_[q] == '_' && q + 1 < s_.size() && ok(s_[q + 1])) {
          ++q;
        } else {
          break;
        }
      }
      return q;
    };
    auto dec = [](char ch) { return ch >= '0' && ch <= '9'; };
    bool after_dot = b > 0 && s_[b - 1] == '.';
    if (!after_dot) {
      size_t p = digits(b, dec);
      size_t q = p;
      bool frac = false;
      if (q < s_.size() && s_[q] == '.' && q + 1 < s_.size() && dec(s_[q + 1])) {
        q = digits(q + 1, dec);
        frac = true;
      }
      size_t e = q;
      bool expo = false;
      if (e < s_.size() && (s_[e] | 32) == 'e') {
        size_t f = e + 1;
        if (f < s_.size() && (s_[f] == '+' || s_[f] == '-')) ++f;
        size_t g = digits(f, dec);
        if (g > f) {
          e = g;
          expo = true;
        }
      }
      if (frac || expo) {
        std::string text;
        for (size_t i = b; i < (expo ? e : q); ++i)
          if (s_[i] != '_') text += s_[i];
        Token t;
        t.type = Tok::kFloat;
        t.text = text;
        t.line = line_;
        t.float_value = std::strtod(text.c_str(), nullptr);
        out_.push_back(t);
        pos_ = expo ? e : q;
        return;
      }
    }
    int base = 10;
    size_t p = b;
    if (s_[b] == '0' && b + 1 < s_.size()) {
      char x = static_cast<char>(s_[b + 1] | 32);
      auto bin = [](char ch) { return ch == '0' || ch == '1'; };
      auto oct = [](char ch) { return ch >= '0' && ch <= '7'; };
      auto hx = [](char ch) { return std::isxdigit(static_cast<unsigned char>(ch)) != 0; };
      bool (*ok)(char) = nullptr;
      if (x == 'b') ok = bin, base = 2;
      if (x == 'o') ok = oct, base = 8;
      if (x == 'x') ok = hx, base = 16;
      if (ok) {
        size_t q = b + 2;
        if (q < s_.size() && s_[q] == '_') ++q;
        size_t r = digits(q, ok);
        if (r > q)
          p = r;
        else
          base = 10;
      }
      if (base == 10) {
        // 0(_?0)*
        p = b + 1;
        while (p < s_.size() &&
               (s_[p] == '0' || (s_[p] == '_' && p + 1 < s_.size() && s_[p + 1] == '0')))
          ++p;
      }
    } else {
      p = digits(b, dec);
    }
    std::string text;
    for (size_t i = (base == 10 ? b : b + 2); i < p; ++i)
      if (s_[i] != '_') text += s_[i];
    errno = 0;
    unsigned long long v = std::strtoull(text.c_str(), nullptr, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
      throw TemplateError(ErrorKind::kUnsupported, "integer literal beyond 64 bits", line_);
    Token t;
    t.type = Tok::kInt;
    t.text = s_.substr(b, p - b);
    t.line = line_;
    t.int_value = static_cast<int64_t>(v);
    out_.push_back(t);
    pos_ = p;
  }

  void string_literal(char quote) {
    size_t p = pos_ + 1;
    std::string body;
    while (true) {
      if (p >= s_.size()) syntax_error("unexpected char '" + std::string(1, quote) + "'", line_);
      char c = s_[p];
      if (c == quote) break;
      if (c == '\\') {
        if (p + 1 >= s_.size())
          syntax_error("unexpected char '" + std::string(1, quote) + "'", line_);
        body += c;
        body += s_[p + 1];
        p += 2;
        continue;
      }
      body += c;
      ++p;
    }
    int line = line_;
    push(Tok::kString, unescape(body, line), line);
    line_ += count_newlines(s_, pos_, p);
    pos_ = p + 1;
  }

  void op(std::vector<char>& balance) {
    static const char* kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* o : kTwo)
      if (s_.compare(pos_, 2, o) == 0) {
        push(Tok::kOp, o, line_);
        pos_ += 2;
        return;
      }
    char c = s_[pos_];
    if (!std::strchr("+-/*%~[](){}><=.:|,;", c))
      syntax_error(std::string("unexpected char '") + c + "'", line_);
    if (c == '{') balance.push_back('}');
    if (c == '(') balance.push_back(')');
    if (c == '[') balance.push_back(']');
    if (c == '}' || c == ')' || c == ']') {
      if (balance.empty()) syntax_error(std::string("unexpected '") + c + "'", line_);
      char want = balance.back();
      balance.pop_back();
      if (want != c)
        syntax_error(std::string("unexpected '") + c + "', expected '" + want + "'", line_);
    }
    push(Tok::kOp, std::string(1, c), line_);
    ++pos_;
  }

  std::string s_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) {
  // Newlines normalised to \n and one trailing newline dropped, as jinja2 does.
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s += source[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return Lexer(std::move(s)).run();
}

}  // namespace pagoda::jinja
