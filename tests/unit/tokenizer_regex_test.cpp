// The pre-tokenizer regex engine and splitters, on small cases whose answers follow from
// ECMAScript regex semantics (what llama.cpp's std::regex gives).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace pagoda {
namespace {

// All matches of `pattern` in `text`, as std::regex_iterator would list them.
std::vector<std::string> matches(const std::string& pattern, const std::string& text) {
  auto re = Regex::compile(pattern);
  EXPECT_TRUE(re.is_ok()) << re.status().message();
  if (!re.is_ok()) return {};
  const std::vector<uint32_t> cpts = unicode::decode(text);
  std::vector<uint32_t> sym(cpts.size());
  for (size_t i = 0; i < cpts.size(); ++i)
    sym[i] = re->collapsed() ? Regex::collapse(cpts[i]) : Regex::widen(cpts[i]);
  std::vector<std::string> out;
  size_t from = 0, mb = 0, me = 0;
  while (from <= sym.size() && re->search(sym.data(), 0, sym.size(), from, false, &mb, &me)) {
    std::string m;
    for (size_t i = mb; i < me; ++i) unicode::append_utf8(&m, cpts[i]);
    out.push_back(m);
    from = me > mb ? me : me + 1;
  }
  return out;
}

using V = std::vector<std::string>;

TEST(TokenizerRegex, AlternationIsOrderedNotLongest) {
  EXPECT_EQ(matches("a|ab", "ab"), V({"a"}));
  EXPECT_EQ(matches("ab|a", "ab"), V({"ab"}));
}

TEST(TokenizerRegex, Quantifiers) {
  EXPECT_EQ(matches("x{2,3}", "xxxxx"), V({"xxx", "xx"}));
  EXPECT_EQ(matches("x{2,3}?", "xxxxx"), V({"xx", "xx"}));
  EXPECT_EQ(matches("x{2}", "xxxxx"), V({"xx", "xx"}));
  EXPECT_EQ(matches("ab*c", "ac abbbc abx"), V({"ac", "abbbc"}));
  EXPECT_EQ(matches("a+?", "aaa"), V({"a", "a", "a"}));
  EXPECT_EQ(matches("(?:ab)+", "abababx ab"), V({"ababab", "ab"}));
}

TEST(TokenizerRegex, ClassesAndEscapes) {
  EXPECT_EQ(matches("[^a-c]+", "abcxyzab"), V({"xyz"}));
  EXPECT_EQ(matches("[\\-\\]x]+", "a-]x]b"), V({"-]x]"}));
  EXPECT_EQ(matches("\\d+", "ab12c345"), V({"12", "345"}));
  EXPECT_EQ(matches("\\$\\+", "$+ +$"), V({"$+"}));
  EXPECT_EQ(matches("[\r\n]", "a\r\nb"), V({"\r", "\n"}));
  // Non-ASCII whitespace counts as \s (llama.cpp maps it to \v before matching).
  EXPECT_EQ(matches("\\s+", "a\u3000\u00a0b"), V({"\u3000\u00a0"}));
}

TEST(TokenizerRegex, Lookahead) {
  EXPECT_EQ(matches("\\s+(?!\\S)", "a   b"), V({"  "}));
  EXPECT_EQ(matches("\\s+(?!\\S)", "a   "), V({"   "}));
  EXPECT_EQ(matches("[a-z](?=1)", "a1b2c1"), V({"a", "c"}));
  EXPECT_EQ(matches("\\s+$", "a  b  "), V({"  "}));
}

TEST(TokenizerRegex, CollapsedCategories) {
  auto re = Regex::compile("\\p{L}+");
  ASSERT_TRUE(re.is_ok());
  EXPECT_TRUE(re->collapsed());
  EXPECT_EQ(matches("\\p{L}+", "héllo wörld 42 日本"), V({"héllo", "wörld", "日本"}));
  EXPECT_EQ(matches("\\p{N}+", "a٣42½"), V({"٣42½"}));
  EXPECT_EQ(matches("[\\p{P}\\p{S}]+", "a«»~€b"), V({"«»~€"}));
  EXPECT_EQ(matches("[^\\s\\p{L}\\p{N}]+", "ab😀!x"), V({"😀!"}));
}

TEST(TokenizerRegex, RejectsWhatItCannotDo) {
  for (const char* bad :
       {"(", "a)", "[a", "a{3,1}", "\\p{Han}", "[é\\p{L}]", "(?x:a)", "(a*)*", "*a", "\\q", "\\"}) {
    auto re = Regex::compile(bad);
    EXPECT_FALSE(re.is_ok()) << bad;
    if (!re.is_ok()) {
      EXPECT_FALSE(re.status().message().empty());
    }
  }
}

TEST(TokenizerRegex, LongRunsDoNotOverflowTheStack) {
  const std::string spaces(200000, ' ');
  EXPECT_EQ(matches("\\s+(?!\\S)|\\s+", "x" + spaces + "y"), V({spaces.substr(1), " "}));
}

std::vector<std::string> split(const char* pre, const std::string& text) {
  const PreTokenizerSpec* spec = find_pre_tokenizer(pre);
  EXPECT_NE(spec, nullptr) << pre;
  if (spec == nullptr) return {};
  auto p = PreTokenizer::create(*spec);
  EXPECT_TRUE(p.is_ok()) << p.status().message();
  return p.is_ok() ? p->split(text) : std::vector<std::string>();
}

TEST(TokenizerPreTokenizer, Gpt2) {
  EXPECT_EQ(split("gpt-2", "Hello world's  123  \n"),
            V({"Hello", " world", "'s", " ", " 123", "  \n"}));
  EXPECT_EQ(split("gpt-2", "DON'T"), V({"DON", "'", "T"}));  // contractions are lowercase only
}

TEST(TokenizerPreTokenizer, Llama3) {
  EXPECT_EQ(split("llama3", "Hello WORLD'S 12345\n\n  x"),
            V({"Hello", " WORLD", "'S", " ", "123", "45", "\n\n", " ", " x"}));
  EXPECT_EQ(split("llama3", ".Hello!!\n\nok"), V({".Hello", "!!\n\n", "ok"}));
}

TEST(TokenizerPreTokenizer, InvalidUtf8BecomesReplacementCharacter) {
  EXPECT_EQ(split("gpt-2",
                  "a\xff"
                  "b"),
            V({"a", "\xEF\xBF\xBD", "b"}));
}

TEST(TokenizerPreTokenizer, EveryKnownVariantCompilesAndRuns) {
  const std::string text = "Hello, World! It's 2024: 日本語 😀  \n\t café ~/x 1234567";
  for (std::string_view name : known_pre_tokenizer_names()) {
    const PreTokenizerSpec* spec = find_pre_tokenizer(name);
    ASSERT_NE(spec, nullptr);
    auto p = PreTokenizer::create(*spec);
    ASSERT_TRUE(p.is_ok()) << name << ": " << p.status().message();
    std::string joined;
    for (const std::string& w : p->split(text)) joined += w;
    EXPECT_EQ(joined, text) << name;  // splitting never loses or adds text
  }
  EXPECT_EQ(find_pre_tokenizer("no-such-pre-tokenizer"), nullptr);
}

}  // namespace
}  // namespace pagoda
