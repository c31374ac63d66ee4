// Tokenizer::encode_bounded: within its limit it is encode() exactly (llama.cpp's
// conformance cases, long texts that SentencePiece encodes a part at a time); over it, it
// stops early, flags the text, and what it returns is a prefix of the full encoding.
#include <gtest/gtest.h>

#include "shared_dir.h"

#include "cpu_time.h"

#include <cstdio>
#include <ctime>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "tokenizer/spm.h"
#include "tokenizer/token_budget.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"
#include "tokenizer/vocab_test_format.h"

namespace pagoda {
namespace {

const char* const kVocabs[] = {"llama-bpe", "qwen2",          "gpt-2",      "llama-spm",
                               "phi-3",     "deepseek-coder", "stories260K"};

std::string vocab_path(const std::string& name) {
  if (name == "stories260K") return test::shared_dir() + "/models/stories260K.gguf";
  return test::shared_dir() + "/testdata/tokenizer/ggml-vocab-" + name + ".gguf";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Loaded {
  std::unique_ptr<Tokenizer> tok;
  Vocab vocab;  // for the single-session SentencePiece reference
};

const Loaded& load(const std::string& name) {
  static std::map<std::string, Loaded> cache;
  Loaded& slot = cache[name];
  if (!slot.tok) {
    auto file = GgufFile::open(vocab_path(name));
    if (!file.is_ok()) throw std::runtime_error(file.status().message());
    auto tok = Tokenizer::from_gguf(**file);
    if (!tok.is_ok()) throw std::runtime_error(tok.status().message());
    auto vocab = Vocab::from_gguf(**file);
    if (!vocab.is_ok()) throw std::runtime_error(vocab.status().message());
    slot.tok = std::move(tok).value();
    slot.vocab = std::move(vocab).value();
  }
  return slot;
}

std::string shakespeare() {
  return read_file(test::shared_dir() + "/testdata/text/tinyshakespeare.txt");
}

// Checks encode_bounded against encode() at the limits around the text's token count.
void expect_bounded_matches(const Tokenizer& tok, const std::string& text, bool add_special,
                            bool parse_special, const std::string& what) {
  const std::vector<TokenId> full = tok.encode(text, add_special, parse_special);
  for (size_t limit : {full.size(), full.size() + 1, SIZE_MAX}) {
    const BoundedEncoding b = tok.encode_bounded(text, add_special, parse_special, limit);
    EXPECT_FALSE(b.over_limit) << what << " limit " << limit;
    EXPECT_EQ(b.ids, full) << what << " limit " << limit;
  }
  if (full.empty()) return;
  for (size_t limit : {full.size() - 1, full.size() / 2, size_t{0}}) {
    const BoundedEncoding b = tok.encode_bounded(text, add_special, parse_special, limit);
    EXPECT_TRUE(b.over_limit) << what << " limit " << limit;
    ASSERT_LE(b.ids.size(), full.size()) << what;
    EXPECT_TRUE(std::equal(b.ids.begin(), b.ids.end(), full.begin())) << what << " not a prefix";
  }
}

class TokenizerBounded : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerBounded, WithinTheLimitIsEncodeExactly) {
  const std::string name = GetParam();
  const Tokenizer& tok = *load(name).tok;
  std::vector<std::string> texts = {"", " ", "Hello world", "<s>hi</s> <|im_start|>x"};
  if (name != "stories260K") {
    const std::string path = vocab_path(name);
    const auto inputs = parse_vocab_test_inputs(read_file(path + ".inp"));
    const std::string expected = read_file(path + ".out");
    std::vector<std::string> lines;
    size_t start = 0;
    for (size_t nl; (nl = expected.find('\n', start)) != std::string::npos; start = nl + 1)
      lines.push_back(expected.substr(start, nl + 1 - start));
    ASSERT_EQ(inputs.size(), lines.size());
    for (size_t k = 0; k < inputs.size(); ++k) {
      // The limit at the exact count gives llama.cpp's ids.
      const std::vector<TokenId> want = tok.encode(inputs[k], false, false);
      const BoundedEncoding b = tok.encode_bounded(inputs[k], false, false, want.size());
      EXPECT_FALSE(b.over_limit);
      EXPECT_EQ(format_vocab_test_line(b.ids), lines[k]) << "case " << k;
      texts.push_back(inputs[k]);
    }
  }
  texts.push_back(shakespeare().substr(0, 20000));
  for (const std::string& text : texts)
    for (int flags = 0; flags < 4; ++flags)
      expect_bounded_matches(tok, text, flags & 1, flags & 2, name + ": '" + text.substr(0, 40));
}

INSTANTIATE_TEST_SUITE_P(SharedVocabs, TokenizerBounded, ::testing::ValuesIn(kVocabs));

// Text whose characters, spaces and bytes meet in every way a cut could get wrong: invalid
// UTF-8 and multi-byte characters right before spaces, runs of spaces, literal U+2581.
std::string spm_hostile_text(uint32_t seed, size_t bytes) {
  static const std::vector<std::string> kBits = {
      " ",    "  ",   "   ",      "a",    "ab",    "The",   "king",  "\xE2\x96\x81",
      "\xE2", "\xF0", "\xF0\x9F", "\xC3", "\xA9",  "é",     "日本",  "🦙",
      "\n",   "\t",   "x ",       "é ",   "\xF0 ", "\xE2 ", "\xC3 ", "\xE2\x96 ",
      "1",    ".",    "'s"};
  std::mt19937 rng(seed);
  std::string s;
  while (s.size() < bytes) s += kBits[rng() % kBits.size()];
  return s;
}

// SentencePiece encodes long text a part at a time: the parts must give exactly the ids of
// one session over the whole text.
TEST(TokenizerBoundedSpm, PartsEncodeAsOneSession) {
  for (const char* name : {"llama-spm", "phi-3", "stories260K"}) {
    const Loaded& l = load(name);
    ASSERT_TRUE(spm_cuts_before_spaces(l.vocab)) << name;
    std::vector<std::string> texts = {shakespeare().substr(0, 60000)};
    for (uint32_t seed = 1; seed <= 6; ++seed) texts.push_back(spm_hostile_text(seed, 20000));
    for (const std::string& text : texts) {
      std::string escaped = l.vocab.add_space_prefix ? " " + text : text;
      std::string marked;
      for (char c : escaped) marked += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
      std::vector<TokenId> want;
      if (l.vocab.add_bos) want.push_back(l.vocab.bos);
      spm_encode(l.vocab, marked, &want);
      if (l.vocab.add_eos) want.push_back(l.vocab.eos);
      EXPECT_EQ(l.tok->encode(text, true, false), want) << name;
    }
  }
}

TEST(TokenizerBoundedSpm, CutsOnlyWhereSymbolsAlign) {
  EXPECT_EQ(spm_next_cut("ab cd", 0), 2u);
  EXPECT_EQ(spm_next_cut("ab cd", 3), 5u);
  EXPECT_EQ(spm_next_cut("  x", 0), 3u);         // a space after a space: no cut
  EXPECT_EQ(spm_next_cut("\xC3\xA9 x", 0), 4u);  // after a continuation byte: no cut
  EXPECT_EQ(spm_next_cut("\xF0xy z", 0), 5u);    // F0 could run past the y
  EXPECT_EQ(spm_next_cut("\xF0wxyz v", 0), 5u);  // ... but not past the z
  EXPECT_EQ(spm_next_cut("", 0), 0u);
}

using test::kSlowdown;
using test::thread_seconds;

// 10 MB over a limit of 2048: stopped after a few thousand tokens, in a fraction of the
// time the whole text takes (0.03-0.25 s here; all of it: 1.7 s and more).
TEST(TokenizerBounded, TenMegabytesStopEarly) {
  const std::string base = shakespeare();
  std::string text;
  while (text.size() < 10'000'000) text += base;
  for (const char* name :
       {"llama-bpe", "qwen2", "gpt-2", "llama-spm", "deepseek-coder", "stories260K"}) {
    const Tokenizer& tok = *load(name).tok;
    const double t0 = thread_seconds();
    const BoundedEncoding b = tok.encode_bounded(text, true, true, 2048);
    const double s = thread_seconds() - t0;
    std::printf("[ perf     ] %s: 10 MB over 2048 tokens refused after %zu tokens in %.1f ms\n",
                name, b.ids.size(), s * 1e3);
    EXPECT_TRUE(b.over_limit) << name;
    // Plain text stops at the count itself: at 2048 when the next word cannot fit (no word
    // encodes to nothing), past it after the word or SentencePiece part that went over.
    EXPECT_GE(b.ids.size(), 2048u) << name;
    EXPECT_LT(b.ids.size(), 2048u + 1100u) << name;
    EXPECT_LT(s, 1.0 * kSlowdown) << name;
    const std::vector<TokenId> head = tok.encode(text.substr(0, 50000), true, true);
    ASSERT_GE(head.size(), b.ids.size());
    EXPECT_TRUE(std::equal(b.ids.begin(), b.ids.end(), head.begin())) << name;
  }
}

// Text with nowhere to stop inside (one 10 MB word; SentencePiece text with no cut) is
// refused by its length before any of it is encoded.
TEST(TokenizerBounded, OneHugeWordIsRefusedByItsLength) {
  const std::string word(10'000'000, 'a');
  const std::string cjk = [] {
    std::string s;
    while (s.size() < 10'000'000) s += "日本語のテキスト";
    return s;
  }();
  for (const char* name : {"llama-bpe", "gpt-2", "llama-spm", "stories260K"}) {
    ASSERT_GT(length_bound(load(name).vocab).max_bytes_per_token, 0u) << name;
    const Tokenizer& tok = *load(name).tok;
    for (const std::string* text : {&word, &cjk}) {
      const double t0 = thread_seconds();
      const BoundedEncoding b = tok.encode_bounded(*text, false, false, 4096);
      const double s = thread_seconds() - t0;
      EXPECT_TRUE(b.over_limit) << name;
      EXPECT_LT(s, 1.0 * kSlowdown) << name;  // all of it: 5 to 20 s
    }
  }
}

}  // namespace
}  // namespace pagoda
