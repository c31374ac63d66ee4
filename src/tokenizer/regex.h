// A small backtracking regular-expression engine for pre-tokenizer patterns.
//
// llama.cpp runs most pre-tokenizer regexes through std::regex (ECMAScript grammar), either
// over the code points of the text or, when the pattern names Unicode categories (\p{L},
// \p{N}, ...), over a "collapsed" text in which every non-ASCII code point is replaced by one
// marker byte per category. Token ids depend on those exact semantics (leftmost match,
// ordered alternation, greedy quantifiers, lookahead), so this engine implements the same
// rules rather than a different flavour. It is not a general-purpose regex library: it
// supports what the pre-tokenizer patterns use (alternation, groups, classes, \s \d \w,
// \p{..} in collapsed mode, ? * + {n,m} and lazy forms, (?= ) (?! ), ^ $ \b \B), and it
// works on 32-bit symbols with an explicit backtracking stack, so long runs of the same
// character cannot overflow the call stack.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace pagoda {

class Regex {
 public:
  // Marker symbols of the collapsed alphabet, as llama.cpp assigns them: a non-ASCII code
  // point becomes its category's marker (whitespace becomes \v so that \s matches it).
  static constexpr uint32_t kCollapsedOther = 0xD0;
  static constexpr uint32_t kCollapsedNumber = 0xD1;
  static constexpr uint32_t kCollapsedLetter = 0xD2;
  static constexpr uint32_t kCollapsedPunctuation = 0xD3;
  static constexpr uint32_t kCollapsedMark = 0xD4;
  static constexpr uint32_t kCollapsedSymbol = 0xD5;
  static constexpr uint32_t kCollapsedWhitespace = 0x0B;

  // `pattern` is UTF-8. A pattern that uses \p{..} is a collapsed-alphabet pattern and may
  // not contain non-ASCII literals (llama.cpp rejects that combination too).
  static Result<Regex> compile(std::string_view pattern);

  // Whether search() must be given collapse()d symbols rather than code points.
  bool collapsed() const { return collapsed_; }
  const std::string& pattern() const { return pattern_; }

  // Maps one code point to the symbol this pattern's alphabet uses for it.
  static uint32_t collapse(uint32_t cpt);
  // Code-point alphabet: non-ASCII whitespace becomes \v, as llama.cpp does before handing
  // text to std::wregex (whose \s only knows ASCII whitespace).
  static uint32_t widen(uint32_t cpt);

  // Finds the leftmost match that starts at or after `from` inside [begin, end) of `text`.
  // ^ and $ match at begin and end. With `not_empty`, a match must be non-empty and must
  // start exactly at `from` (std::regex_iterator's retry after an empty match).
  bool search(const uint32_t* text, size_t begin, size_t end, size_t from, bool not_empty,
              size_t* match_begin, size_t* match_end) const;

  enum class Op : uint8_t { kClass, kSplit, kJmp, kMatch, kLook, kBol, kEol, kWordB, kNotWordB };
  struct Inst {
    Op op = Op::kMatch;
    bool negate = false;  // kLook: negative lookahead
    int x = 0;            // kClass: class index; kSplit/kJmp: preferred target; kLook: body
    int y = 0;            // kSplit: second target
  };
  struct Class {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // sorted, disjoint, inclusive
    bool contains(uint32_t c) const;
  };

 private:
  bool run(int pc, const uint32_t* text, size_t begin, size_t end, size_t sp, bool not_empty,
           size_t* match_end, std::vector<std::pair<int, size_t>>* stack) const;

  std::string pattern_;
  bool collapsed_ = false;
  std::vector<Inst> prog_;
  std::vector<Class> classes_;
};

}  // namespace pagoda
