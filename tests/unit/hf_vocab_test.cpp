// tokenizer.json parsing: malformed and unsupported files are refused with an error naming the
// field or component (ids against Hugging Face's tokenizers: tests/model/test_hf_tokenizer.py).
#include <gtest/gtest.h>

#include <string>

#include "tokenizer/hf_vocab.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace pagoda {
namespace {

// A minimal byte-level BPE tokenizer.json with `model`, `extra` spliced in at the top level.
std::string tokenizer_json(const std::string& model_extra = "", const std::string& extra = "") {
  return R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"])" +
         model_extra + R"(}, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false,
         "use_regex": true})" +
         extra + "}";
}

Status parse(const std::string& tok, const std::string& cfg = "", const std::string& gen = "") {
  HfTokenizerFiles f;
  f.tokenizer_json = tok;
  f.tokenizer_config = cfg;
  f.generation_config = gen;
  return parse_hf_tokenizer(f).status();
}

void expect_error(const Status& s, const std::string& needle) {
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(HfVocab, MinimalFileParses) {
  HfTokenizerFiles f;
  f.tokenizer_json = tokenizer_json();
  auto t = parse_hf_tokenizer(f);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ(t->vocab.n_tokens(), 3);
  EXPECT_TRUE(t->steps.byte_level);
  EXPECT_EQ(t->vocab.merge_ranks.count(std::string("a\nb")), 1u);
}

TEST(HfVocab, MergesAsPairsParse) {
  HfTokenizerFiles f;
  f.tokenizer_json = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b c": 1, "ab c": 2},
                         "merges": [["a", "b c"]]}})";
  auto t = parse_hf_tokenizer(f);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ(t->vocab.merge_ranks.count(std::string("a\nb c")), 1u);
}

TEST(HfVocab, MalformedStructuresNameTheField) {
  expect_error(parse("not json"), "not valid JSON");
  expect_error(parse("[1, 2]"), "top level must be an object");
  expect_error(parse(R"({"model": 3})"), "model must be an object");
  expect_error(parse(R"({"model": {"type": "BPE", "vocab": []}})"),
               "model.vocab must be an object");
  expect_error(parse(R"({"model": {"type": "BPE", "vocab": {"a": "x"}}})"),
               "model.vocab['a'] must be an integer id");
  expect_error(parse(R"({"model": {"type": "BPE", "vocab": {"a": -1}}})"), "is not a valid id");
  expect_error(parse(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}}})"), "id 0 is also");
  expect_error(parse(R"({"model": {"type": "BPE", "vocab": {}}})"), "model.vocab is empty");
  expect_error(parse(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": 5}})"),
               "model.merges must be an array");
  expect_error(parse(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["ab"]}})"),
               "model.merges[0] is not \"left right\"");
  expect_error(parse(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [[1, 2]]}})"),
               "model.merges[0] must be a string or a pair of strings");
  expect_error(parse(tokenizer_json("", R"(, "added_tokens": {})")),
               "added_tokens must be an array");
  expect_error(parse(tokenizer_json("", R"(, "added_tokens": [{"id": 3}])")),
               "added_tokens[0].content must be a string");
  expect_error(parse(tokenizer_json("", R"(, "added_tokens": [{"content": "<s>"}])")),
               "added_tokens[0].id is missing");
  expect_error(parse(tokenizer_json("", R"(, "normalizer": [1])")), "normalizer must be an object");
  expect_error(parse(tokenizer_json(R"(, "byte_fallback": "yes")")),
               "model.byte_fallback must be a boolean");
  expect_error(parse(tokenizer_json(R"(, "unk_token": "<unk>")")),
               "model.unk_token '<unk>' is not a token");
}

TEST(HfVocab, ConfigFilesAreChecked) {
  expect_error(parse(tokenizer_json(), "nope"), "tokenizer_config.json: not a JSON object");
  expect_error(parse(tokenizer_json(), R"({"bos_token": "<s>"})"),
               "tokenizer_config.json: bos_token '<s>' is not a token");
  expect_error(parse(tokenizer_json(), R"({"eos_token": 7})"), "eos_token must be a string");
  expect_error(parse(tokenizer_json(), R"({"add_bos_token": true})"),
               "add_bos_token is true but there is no token");
  expect_error(parse(tokenizer_json(), R"({"chat_template": 1})"), "chat_template must be");
  expect_error(parse(tokenizer_json(), "", R"({"eos_token_id": [0, 99]})"),
               "generation_config.json: eos_token_id");
}

TEST(HfVocab, ConfigReadsTokensTemplatesAndEndOfGeneration) {
  HfTokenizerFiles f;
  f.tokenizer_json = tokenizer_json();
  f.tokenizer_config = R"({"bos_token": {"content": "a"}, "eos_token": "b", "add_bos_token": true,
      "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default",
      "template": "D"}]})";
  f.generation_config = R"({"eos_token_id": [1, 2]})";
  auto t = parse_hf_tokenizer(f);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ(t->vocab.bos, 0);
  EXPECT_EQ(t->vocab.eos, 1);
  EXPECT_TRUE(t->vocab.add_bos);
  EXPECT_EQ(t->chat_template, "D");
  EXPECT_EQ(t->vocab.end_of_generation.count(2), 1u);
  f.chat_template_jinja = "J";  // chat_template.jinja wins over the config's
  EXPECT_EQ(parse_hf_tokenizer(f)->chat_template, "J");
}

TEST(HfVocab, UnsupportedComponentsAreNamed) {
  expect_error(parse(R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})"),
               "model Unigram is not supported");
  expect_error(parse(R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})"),
               "model WordPiece is not supported");
  expect_error(parse(tokenizer_json(R"(, "dropout": 0.1)")), "model.dropout is not supported");
  expect_error(parse(tokenizer_json(R"(, "continuing_subword_prefix": "##")")),
               "continuing_subword_prefix is not supported");
  expect_error(parse(tokenizer_json("", R"(, "normalizer": {"type": "Precompiled"})")),
               "tokenizer.json: normalizer Precompiled is not supported");
  expect_error(parse(tokenizer_json("", R"(, "normalizer": {"type": "Sequence", "normalizers":
                                              [{"type": "NFC"}, {"type": "StripAccents"}]})")),
               "tokenizer.json: normalizer StripAccents is not supported");
  expect_error(parse(tokenizer_json("", R"(, "normalizer": {"type": "BertNormalizer"})")),
               "normalizer BertNormalizer is not supported");
  expect_error(parse(tokenizer_json("", R"(, "normalizer": {"type": "Replace", "pattern":
                                              {"Regex": " +"}, "content": " "})")),
               "normalizer Replace with a Regex pattern is not supported");
  const auto pre = [](const std::string& p) {
    return parse(R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "pre_tokenizer": )" + p + "}");
  };
  expect_error(pre(R"({"type": "BertPreTokenizer"})"), "pre_tokenizer BertPreTokenizer is not");
  expect_error(pre(R"({"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Removed"})"),
               "behavior Removed is not supported");
  expect_error(pre(R"({"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Isolated",
                       "invert": true})"),
               "invert is not supported");
  expect_error(pre(R"({"type": "Split", "pattern": {"Regex": "\\p{Lu}+"},
                       "behavior": "Isolated"})"),
               "letter subcategory \\p{Lu} is not supported");
  expect_error(pre(R"({"type": "Split", "pattern": {"Regex": "(?<=a)b"},
                       "behavior": "Isolated"})"),
               "pre_tokenizer Split: ");
  expect_error(pre(R"({"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"},
                       {"type": "Digits"}]})"),
               "ByteLevel before other pre-tokenizers is not supported");
  expect_error(parse(tokenizer_json("", R"(, "post_processor": {"type": "RobertaProcessing"})")),
               "post_processor RobertaProcessing is not supported");
  expect_error(parse(tokenizer_json("", R"(, "added_tokens": [{"id": 3, "content": "<x>",
                                              "single_word": true}])")),
               "single_word is not supported");
}

TEST(HfVocab, OversizedTokenizerJsonIsRefused) {
  HfTokenizerFiles f;
  f.tokenizer_json.assign(kMaxTokenizerJsonBytes + 1, ' ');
  expect_error(parse_hf_tokenizer(f).status(), "over 256 MiB");
}

// (?i:...) as Hugging Face's Llama-3 and Qwen2 patterns spell the contractions.
TEST(HfVocab, RegexCaseInsensitiveGroup) {
  auto re = Regex::compile("(?i:'s|'ll)|[^a]");
  ASSERT_TRUE(re.is_ok()) << re.status().message();
  const auto match_at_0 = [&](const std::string& text) {
    const auto cpts = unicode::decode(text);
    std::vector<uint32_t> sym(cpts.size());
    for (size_t i = 0; i < cpts.size(); ++i) sym[i] = Regex::widen(cpts[i]);
    size_t b = 0, e = 0;
    return re->search(sym.data(), 0, sym.size(), 0, false, &b, &e) && b == 0 ? e : size_t{0};
  };
  EXPECT_EQ(match_at_0("'S"), 2u);
  EXPECT_EQ(match_at_0("'lL"), 3u);
  EXPECT_EQ(match_at_0("'x"), 1u);  // only the quote, through [^a]
  // Outside the group case matters again.
  auto re2 = Regex::compile("(?i:a)b");
  ASSERT_TRUE(re2.is_ok());
  const std::vector<uint32_t> ab = {'A', 'B'}, aB = {'A', 'b'};
  size_t b = 0, e = 0;
  EXPECT_FALSE(re2->search(ab.data(), 0, 2, 0, false, &b, &e));
  EXPECT_TRUE(re2->search(aB.data(), 0, 2, 0, false, &b, &e));
}

}  // namespace
}  // namespace pagoda
