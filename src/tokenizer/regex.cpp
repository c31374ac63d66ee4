#include "tokenizer/regex.h"

#include <algorithm>
#include <memory>

#include "tokenizer/unicode.h"

namespace pagoda {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;
constexpr uint32_t kMaxSymbol = 0xFFFFFFFFu;

Ranges normalized(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1 && out.back().second != kMaxSymbol) {
      out.back().second = std::max(out.back().second, hi);
    } else if (!out.empty() && out.back().second == kMaxSymbol) {
      break;
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

Ranges complement(const Ranges& in) {
  const Ranges r = normalized(in);
  Ranges out;
  uint32_t next = 0;
  bool done = false;
  for (const auto& [lo, hi] : r) {
    if (lo > next) out.emplace_back(next, lo - 1);
    if (hi == kMaxSymbol) {
      done = true;
      break;
    }
    next = hi + 1;
  }
  if (!done) out.emplace_back(next, kMaxSymbol);
  return out;
}

// `r` plus the other case of every ASCII letter in it.
Ranges fold_ascii_case(Ranges r) {
  const size_t n = r.size();
  for (size_t k = 0; k < n; ++k) {
    const auto [lo, hi] = r[k];
    for (const auto& [from, to] : {std::pair<uint32_t, uint32_t>{'A', 'a'}, {'a', 'A'}}) {
      const uint32_t a = std::max(lo, from), b = std::min(hi, from + 25);
      if (a <= b) r.emplace_back(a - from + to, b - from + to);
    }
  }
  return r;
}

// ASCII classes as std::regex sees them in the "C" locale.
const Ranges kSpace = {{0x09, 0x0D}, {0x20, 0x20}};
const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};

// What a Unicode category matches in the collapsed alphabet: its marker plus the ASCII
// characters llama.cpp lists for it (which are exactly the ASCII members of the category).
bool collapsed_category(std::string_view name, Ranges* out) {
  if (name == "N") {
    *out = {{Regex::kCollapsedNumber, Regex::kCollapsedNumber}, {'0', '9'}};
  } else if (name == "L" || name == "Lu" || name == "Ll" || name == "Lt" || name == "Lm" ||
             name == "Lo") {
    // llama.cpp has no letter subcategories in this mode: all of them mean \p{L}.
    *out = {{Regex::kCollapsedLetter, Regex::kCollapsedLetter}, {'A', 'Z'}, {'a', 'z'}};
  } else if (name == "P") {
    *out = {{Regex::kCollapsedPunctuation, Regex::kCollapsedPunctuation},
            {0x21, 0x23},
            {0x25, 0x2A},
            {0x2C, 0x2F},
            {0x3A, 0x3B},
            {0x3F, 0x40},
            {0x5B, 0x5D},
            {0x5F, 0x5F},
            {0x7B, 0x7B},
            {0x7D, 0x7D}};
  } else if (name == "M") {
    *out = {{Regex::kCollapsedMark, Regex::kCollapsedMark}};
  } else if (name == "S") {
    *out = {{Regex::kCollapsedSymbol, Regex::kCollapsedSymbol},
            {0x24, 0x24},
            {0x2B, 0x2B},
            {0x3C, 0x3E},
            {0x5E, 0x5E},
            {0x60, 0x60},
            {0x7C, 0x7C},
            {0x7E, 0x7E}};
  } else {
    return false;
  }
  return true;
}

// The substrings llama.cpp looks for to decide that a pattern runs on collapsed text.
bool uses_categories(std::string_view pattern) {
  for (std::string_view c : {"\\p{N}", "\\p{L}", "\\p{P}", "\\p{M}", "\\p{S}", "\\p{Lu}", "\\p{Ll}",
                             "\\p{Lt}", "\\p{Lm}", "\\p{Lo}"})
    if (pattern.find(c) != std::string_view::npos) return true;
  return false;
}

struct Node {
  enum class Kind { kEmpty, kClass, kConcat, kAlt, kRepeat, kLook, kBol, kEol, kWordB, kNotWordB };
  Kind kind = Kind::kEmpty;
  int cls = -1;
  int min = 0, max = -1;  // kRepeat; max -1 is unbounded
  bool greedy = true;
  bool negate = false;  // kLook
  std::vector<std::unique_ptr<Node>> kids;
};
using NodePtr = std::unique_ptr<Node>;

NodePtr make(Node::Kind k) {
  auto n = std::make_unique<Node>();
  n->kind = k;
  return n;
}

class Parser {
 public:
  Parser(std::vector<uint32_t> p, bool collapsed, std::vector<Regex::Class>* classes)
      : p_(std::move(p)), collapsed_(collapsed), classes_(classes) {}

  Result<NodePtr> parse() {
    NodePtr n = alternation();
    if (!error_.empty()) return invalid_argument(error_);
    if (i_ != p_.size()) return invalid_argument(where("unbalanced ')'"));
    return n;
  }

 private:
  bool at_end() const { return i_ >= p_.size(); }
  uint32_t peek(size_t k = 0) const { return i_ + k < p_.size() ? p_[i_ + k] : 0; }
  std::string where(const std::string& what) const {
    return str_format("regex: %s at position %zu", what.c_str(), i_);
  }
  void fail(const std::string& what) {
    if (error_.empty()) error_ = where(what);
    i_ = p_.size();
  }

  int add_class(Ranges r, bool negate) {
    if (icase_) r = fold_ascii_case(std::move(r));
    Regex::Class c;
    c.ranges = negate ? complement(r) : normalized(std::move(r));
    classes_->push_back(std::move(c));
    return static_cast<int>(classes_->size() - 1);
  }
  NodePtr class_node(Ranges r, bool negate) {
    NodePtr n = make(Node::Kind::kClass);
    n->cls = add_class(std::move(r), negate);
    return n;
  }

  NodePtr alternation() {
    NodePtr first = concatenation();
    if (peek() != '|' || at_end()) return first;
    NodePtr alt = make(Node::Kind::kAlt);
    alt->kids.push_back(std::move(first));
    while (!at_end() && peek() == '|') {
      ++i_;
      alt->kids.push_back(concatenation());
    }
    return alt;
  }

  NodePtr concatenation() {
    NodePtr cat = make(Node::Kind::kConcat);
    while (!at_end() && peek() != '|' && peek() != ')') {
      NodePtr atom = this->atom();
      if (!atom) return cat;
      cat->kids.push_back(quantified(std::move(atom)));
    }
    return cat;
  }

  bool read_int(int* v) {
    if (at_end() || peek() < '0' || peek() > '9') return false;
    int x = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      x = x * 10 + static_cast<int>(peek() - '0');
      if (x > 100000) return false;
      ++i_;
    }
    *v = x;
    return true;
  }

  NodePtr quantified(NodePtr atom) {
    while (!at_end()) {
      int mn = 0, mx = -1;
      const uint32_t c = peek();
      if (c == '*') {
        ++i_;
      } else if (c == '+') {
        mn = 1;
        ++i_;
      } else if (c == '?') {
        mx = 1;
        ++i_;
      } else if (c == '{') {
        ++i_;
        if (!read_int(&mn)) {
          fail("bad {n,m} quantifier");
          return atom;
        }
        mx = mn;
        if (peek() == ',') {
          ++i_;
          mx = -1;
          if (peek() != '}' && !read_int(&mx)) {
            fail("bad {n,m} quantifier");
            return atom;
          }
        }
        if (peek() != '}' || (mx >= 0 && mx < mn)) {
          fail("bad {n,m} quantifier");
          return atom;
        }
        ++i_;
      } else {
        return atom;
      }
      NodePtr rep = make(Node::Kind::kRepeat);
      rep->min = mn;
      rep->max = mx;
      if (!at_end() && peek() == '?') {
        rep->greedy = false;
        ++i_;
      }
      rep->kids.push_back(std::move(atom));
      atom = std::move(rep);
    }
    return atom;
  }

  // \p{Name} after the 'p' has been consumed.
  bool category(Ranges* out) {
    if (peek() != '{') {
      fail("\\p without {name}");
      return false;
    }
    size_t j = i_ + 1;
    std::string name;
    while (j < p_.size() && p_[j] != '}' && name.size() < 16)
      name.push_back(static_cast<char>(p_[j++]));
    if (j >= p_.size() || p_[j] != '}') {
      fail("unterminated \\p{");
      return false;
    }
    if (!collapsed_ || !collapsed_category(name, out)) {
      fail("unsupported Unicode property \\p{" + name + "}");
      return false;
    }
    i_ = j + 1;
    return true;
  }

  // An escape after the backslash, as a set of symbols; `literal` tells a single character
  // (which may bound a range) from a class escape. Returns false on error.
  bool escape(Ranges* out, bool* literal = nullptr) {
    bool lit = false;
    const bool ok = escape_set(out, &lit);
    if (literal) *literal = lit;
    return ok;
  }
  bool escape_set(Ranges* out, bool* literal) {
    if (at_end()) {
      fail("trailing backslash");
      return false;
    }
    const uint32_t c = p_[i_++];
    switch (c) {
      case 's':
        *out = kSpace;
        return true;
      case 'S':
        *out = complement(kSpace);
        return true;
      case 'd':
        *out = kDigit;
        return true;
      case 'D':
        *out = complement(kDigit);
        return true;
      case 'w':
        *out = kWord;
        return true;
      case 'W':
        *out = complement(kWord);
        return true;
      case 'p':
        return category(out);
      case 'r':
        *literal = true;
        *out = {{'\r', '\r'}};
        return true;
      case 'n':
        *literal = true;
        *out = {{'\n', '\n'}};
        return true;
      case 't':
        *literal = true;
        *out = {{'\t', '\t'}};
        return true;
      case 'v':
        *literal = true;
        *out = {{'\v', '\v'}};
        return true;
      case 'f':
        *literal = true;
        *out = {{'\f', '\f'}};
        return true;
      case '0':
        *literal = true;
        *out = {{0, 0}};
        return true;
      case 'x':
      case 'u': {
        const int digits = c == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (int k = 0; k < digits; ++k) {
          const uint32_t h = peek();
          int d = -1;
          if (h >= '0' && h <= '9') d = static_cast<int>(h - '0');
          if (h >= 'a' && h <= 'f') d = static_cast<int>(h - 'a' + 10);
          if (h >= 'A' && h <= 'F') d = static_cast<int>(h - 'A' + 10);
          if (d < 0 || at_end()) {
            fail("bad hex escape");
            return false;
          }
          v = v * 16 + static_cast<uint32_t>(d);
          ++i_;
        }
        *literal = true;
        *out = {{v, v}};
        return true;
      }
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
          fail(str_format("unsupported escape \\%c", static_cast<char>(c)));
          return false;
        }
        *literal = true;
        *out = {{c, c}};  // escaped punctuation stands for itself
        return true;
    }
  }

  NodePtr bracket() {
    bool negate = false;
    if (peek() == '^') {
      negate = true;
      ++i_;
    }
    Ranges set;
    bool first = true;
    while (true) {
      if (at_end()) {
        fail("unterminated [");
        return nullptr;
      }
      uint32_t c = peek();
      if (c == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      ++i_;
      Ranges item;
      bool single = true;  // a single literal, which may start a range
      if (c == '\\') {
        if (!escape(&item, &single)) return nullptr;
      } else {
        item = {{c, c}};
      }
      if (single && peek() == '-' && peek(1) != ']' && i_ + 1 < p_.size()) {
        ++i_;
        uint32_t hi = peek();
        ++i_;
        if (hi == '\\') {
          Ranges r;
          bool lit = false;
          if (!escape(&r, &lit)) return nullptr;
          if (!lit) {
            fail("bad range in class");
            return nullptr;
          }
          hi = r[0].first;
        }
        if (hi < item[0].first) {
          fail("reversed range in class");
          return nullptr;
        }
        item = {{item[0].first, hi}};
      }
      set.insert(set.end(), item.begin(), item.end());
    }
    return class_node(std::move(set), negate);
  }

  NodePtr atom() {
    const uint32_t c = p_[i_++];
    switch (c) {
      case '(': {
        NodePtr group;
        if (peek() == '?') {
          const uint32_t k = peek(1);
          if (k == ':') {
            i_ += 2;
            group = alternation();
          } else if (k == 'i' && peek(2) == ':') {
            // (?i:...), as Hugging Face patterns write the contractions: ASCII letters match
            // either case (tokenizers does not fold U+017F to 's' there either).
            i_ += 3;
            const bool outer = icase_;
            icase_ = true;
            group = alternation();
            icase_ = outer;
          } else if (k == '=' || k == '!') {
            i_ += 2;
            group = make(Node::Kind::kLook);
            group->negate = k == '!';
            group->kids.push_back(alternation());
          } else {
            fail("unsupported group (?" + std::string(1, static_cast<char>(k)));
            return nullptr;
          }
        } else {
          group = alternation();  // capturing groups: nothing is captured
        }
        if (peek() != ')' || at_end()) {
          fail("missing ')'");
          return nullptr;
        }
        ++i_;
        return group;
      }
      case '[':
        return bracket();
      case '.':
        return class_node({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, true);
      case '^':
        return make(Node::Kind::kBol);
      case '$':
        return make(Node::Kind::kEol);
      case '*':
      case '+':
      case '?':
        fail("quantifier without operand");
        return nullptr;
      case '\\': {
        if (peek() == 'b' || peek() == 'B') {
          const bool b = peek() == 'b';
          ++i_;
          return make(b ? Node::Kind::kWordB : Node::Kind::kNotWordB);
        }
        Ranges r;
        if (!escape(&r)) return nullptr;
        return class_node(std::move(r), false);
      }
      default:
        return class_node({{c, c}}, false);
    }
  }

  std::vector<uint32_t> p_;
  size_t i_ = 0;
  bool collapsed_;
  bool icase_ = false;  // inside (?i:...)
  std::vector<Regex::Class>* classes_;
  std::string error_;
};

bool nullable(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kClass:
      return false;
    case Node::Kind::kConcat:
      for (const auto& k : n.kids)
        if (!nullable(*k)) return false;
      return true;
    case Node::Kind::kAlt:
      for (const auto& k : n.kids)
        if (nullable(*k)) return true;
      return false;
    case Node::Kind::kRepeat:
      return n.min == 0 || nullable(*n.kids[0]);
    default:
      return true;
  }
}

class Compiler {
 public:
  explicit Compiler(std::vector<Regex::Inst>* prog) : prog_(prog) {}

  Status emit(const Node& n) {
    using Op = Regex::Op;
    switch (n.kind) {
      case Node::Kind::kEmpty:
        break;
      case Node::Kind::kClass:
        add({Op::kClass, false, n.cls, 0});
        break;
      case Node::Kind::kConcat:
        for (const auto& k : n.kids) PAGODA_RETURN_IF_ERROR(emit(*k));
        break;
      case Node::Kind::kAlt: {
        std::vector<int> jumps;
        for (size_t k = 0; k < n.kids.size(); ++k) {
          if (k + 1 < n.kids.size()) {
            const int split = add({Op::kSplit, false, 0, 0});
            (*prog_)[split].x = size();
            PAGODA_RETURN_IF_ERROR(emit(*n.kids[k]));
            jumps.push_back(add({Op::kJmp, false, 0, 0}));
            (*prog_)[split].y = size();
          } else {
            PAGODA_RETURN_IF_ERROR(emit(*n.kids[k]));
          }
        }
        for (int j : jumps) (*prog_)[j].x = size();
        break;
      }
      case Node::Kind::kRepeat: {
        const Node& body = *n.kids[0];
        for (int k = 0; k < n.min; ++k) PAGODA_RETURN_IF_ERROR(emit(body));
        if (n.max < 0) {
          // A loop whose body can match nothing would spin forever; no pre-tokenizer
          // pattern needs one.
          if (nullable(body)) return invalid_argument("regex: loop over an empty-matching body");
          const int split = add({Op::kSplit, false, 0, 0});
          PAGODA_RETURN_IF_ERROR(emit(body));
          add({Op::kJmp, false, split, 0});
          prefer(split, split + 1, size(), n.greedy);
        } else {
          std::vector<int> splits;
          for (int k = n.min; k < n.max; ++k) {
            splits.push_back(add({Op::kSplit, false, 0, 0}));
            PAGODA_RETURN_IF_ERROR(emit(body));
          }
          for (int s : splits) prefer(s, s + 1, size(), n.greedy);
        }
        break;
      }
      case Node::Kind::kLook: {
        const int look = add({Op::kLook, n.negate, 0, 0});
        const int jmp = add({Op::kJmp, false, 0, 0});
        (*prog_)[look].x = size();
        PAGODA_RETURN_IF_ERROR(emit(*n.kids[0]));
        add({Op::kMatch, false, 0, 0});
        (*prog_)[jmp].x = size();
        break;
      }
      case Node::Kind::kBol:
        add({Op::kBol, false, 0, 0});
        break;
      case Node::Kind::kEol:
        add({Op::kEol, false, 0, 0});
        break;
      case Node::Kind::kWordB:
        add({Op::kWordB, false, 0, 0});
        break;
      case Node::Kind::kNotWordB:
        add({Op::kNotWordB, false, 0, 0});
        break;
    }
    if (prog_->size() > 1000000) return invalid_argument("regex: pattern too large");
    return Status::ok();
  }

 private:
  int size() const { return static_cast<int>(prog_->size()); }
  int add(Regex::Inst in) {
    prog_->push_back(in);
    return size() - 1;
  }
  void prefer(int split, int body, int skip, bool greedy) {
    (*prog_)[split].x = greedy ? body : skip;
    (*prog_)[split].y = greedy ? skip : body;
  }
  std::vector<Regex::Inst>* prog_;
};

bool is_word(uint32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

}  // namespace

bool Regex::Class::contains(uint32_t c) const {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), std::make_pair(c, kMaxSymbol));
  return it != ranges.begin() && std::prev(it)->second >= c;
}

uint32_t Regex::collapse(uint32_t cpt) {
  if (cpt < 128) return cpt;
  const uint16_t f = unicode::flags(cpt);
  if (f & unicode::kWhitespace) return kCollapsedWhitespace;
  switch (f & unicode::kCategoryMask) {
    case unicode::kNumber:
      return kCollapsedNumber;
    case unicode::kLetter:
      return kCollapsedLetter;
    case unicode::kPunctuation:
      return kCollapsedPunctuation;
    case unicode::kMark:
      return kCollapsedMark;
    case unicode::kSymbol:
      return kCollapsedSymbol;
    default:
      return kCollapsedOther;
  }
}

uint32_t Regex::widen(uint32_t cpt) {
  return cpt > 0x7F && unicode::is_whitespace(cpt) ? kCollapsedWhitespace : cpt;
}

Result<Regex> Regex::compile(std::string_view pattern) {
  Regex re;
  re.pattern_ = std::string(pattern);
  re.collapsed_ = uses_categories(pattern);
  std::vector<uint32_t> cps = unicode::decode(pattern);
  if (re.collapsed_) {
    for (uint32_t c : cps)
      if (c >= 128)
        return invalid_argument(
            "regex: a pattern with Unicode categories may not contain "
            "non-ASCII characters: " +
            re.pattern_);
  }
  Parser parser(std::move(cps), re.collapsed_, &re.classes_);
  auto tree = parser.parse();
  if (!tree.is_ok()) return tree.status().with_context("in pattern '" + re.pattern_ + "'");
  Compiler compiler(&re.prog_);
  Status s = compiler.emit(**tree);
  if (!s.is_ok()) return s.with_context("in pattern '" + re.pattern_ + "'");
  re.prog_.push_back({Op::kMatch, false, 0, 0});
  return re;
}

bool Regex::run(int pc0, const uint32_t* text, size_t begin, size_t end, size_t sp0, bool not_empty,
                size_t* match_end, std::vector<std::pair<int, size_t>>* stack) const {
  const size_t base = stack->size();
  stack->emplace_back(pc0, sp0);
  while (stack->size() > base) {
    auto [pc, sp] = stack->back();
    stack->pop_back();
    while (true) {
      const Inst& in = prog_[static_cast<size_t>(pc)];
      bool ok = true;
      switch (in.op) {
        case Op::kClass:
          ok = sp < end && classes_[static_cast<size_t>(in.x)].contains(text[sp]);
          if (ok) {
            ++sp;
            ++pc;
          }
          break;
        case Op::kSplit:
          stack->emplace_back(in.y, sp);
          pc = in.x;
          break;
        case Op::kJmp:
          pc = in.x;
          break;
        case Op::kMatch:
          if (not_empty && sp == sp0) {
            ok = false;
            break;
          }
          *match_end = sp;
          stack->resize(base);
          return true;
        case Op::kLook: {
          std::vector<std::pair<int, size_t>> sub;
          size_t unused = 0;
          ok = run(in.x, text, begin, end, sp, false, &unused, &sub) != in.negate;
          ++pc;
          break;
        }
        case Op::kBol:
          ok = sp == begin;
          ++pc;
          break;
        case Op::kEol:
          ok = sp == end;
          ++pc;
          break;
        case Op::kWordB:
        case Op::kNotWordB: {
          const bool before = sp > begin && is_word(text[sp - 1]);
          const bool after = sp < end && is_word(text[sp]);
          ok = (before != after) == (in.op == Op::kWordB);
          ++pc;
          break;
        }
      }
      if (!ok) break;
    }
  }
  return false;
}

bool Regex::search(const uint32_t* text, size_t begin, size_t end, size_t from, bool not_empty,
                   size_t* match_begin, size_t* match_end) const {
  std::vector<std::pair<int, size_t>> stack;
  if (not_empty) {
    if (!run(0, text, begin, end, from, true, match_end, &stack)) return false;
    *match_begin = from;
    return true;
  }
  for (size_t s = from; s <= end; ++s) {
    if (run(0, text, begin, end, s, false, match_end, &stack)) {
      *match_begin = s;
      return true;
    }
  }
  return false;
}

}  // namespace pagoda
