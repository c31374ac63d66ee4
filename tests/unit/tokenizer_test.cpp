// Tokenizers built from GGUF: llama.cpp's conformance files for the six shared vocabularies,
// round trips, special tokens, decoding, hostile metadata and encoding speed.
#include <gtest/gtest.h>

#include "shared_dir.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "tokenizer/byte_alphabet.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_test_format.h"

namespace pagoda {
namespace {

const char* const kVocabs[] = {"llama-bpe", "qwen2", "gpt-2",
                               "llama-spm", "phi-3", "deepseek-coder"};

std::string vocab_path(const std::string& name) {
  return test::shared_dir() + "/testdata/tokenizer/ggml-vocab-" + name + ".gguf";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Loaded once per vocabulary; the tokenizer keeps no reference to the file.
const Tokenizer& load(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) {
    auto file = GgufFile::open(vocab_path(name));
    if (!file.is_ok()) throw std::runtime_error(file.status().message());
    auto tok = Tokenizer::from_gguf(**file);
    if (!tok.is_ok()) throw std::runtime_error(tok.status().message());
    slot = std::move(tok).value();
  }
  return *slot;
}

std::vector<TokenId> ids(std::initializer_list<TokenId> l) {
  return l;
}

class TokenizerConformance : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerConformance, ReproducesLlamaCppOutFile) {
  const std::string path = vocab_path(GetParam());
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  EXPECT_TRUE((*file)->tensors().empty()) << "expected a vocabulary-only file";
  auto tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();

  const auto inputs = parse_vocab_test_inputs(read_file(path + ".inp"));
  const std::string expected = read_file(path + ".out");
  std::vector<std::string> lines;
  std::istringstream ss(expected);
  for (std::string line; std::getline(ss, line);) lines.push_back(line + "\n");
  ASSERT_EQ(inputs.size(), lines.size());
  for (size_t k = 0; k < inputs.size(); ++k)
    EXPECT_EQ(format_vocab_test_line((*tok)->encode(inputs[k], false, false)), lines[k])
        << "case " << k << ": '" << inputs[k] << "'";
  EXPECT_EQ(run_vocab_test(**tok, inputs), expected);
}

INSTANTIATE_TEST_SUITE_P(SharedVocabs, TokenizerConformance, ::testing::ValuesIn(kVocabs));

// Valid UTF-8 text of many kinds, deterministic.
std::vector<std::string> varied_texts(uint32_t seed, int count) {
  static const std::vector<std::string> kFragments = {"Hello",
                                                      " world",
                                                      "DON'T",
                                                      "we'Ve",
                                                      " 'S",
                                                      "x",
                                                      "  ",
                                                      "\t",
                                                      "\n",
                                                      "\r\n",
                                                      "\n\n\n",
                                                      "   indented",
                                                      "1",
                                                      "42",
                                                      "3.14159",
                                                      "1234567890123",
                                                      "café",
                                                      "naïve",
                                                      "Ångström",
                                                      "e\xCC\x81",
                                                      "日本語",
                                                      "中文字符",
                                                      "한국어",
                                                      "Привет",
                                                      "Ελληνικά",
                                                      "עברית",
                                                      "العربية",
                                                      "हिन्दी",
                                                      "ไทย",
                                                      "😀",
                                                      "👍🏽",
                                                      "👨‍👩‍👧",
                                                      "🦙",
                                                      "∑∫√",
                                                      "½",
                                                      "٣",
                                                      "\u00a0",
                                                      "\u3000",
                                                      "\u2028",
                                                      "{\"a\": [1, 2]}",
                                                      "def f(x):\n    return x",
                                                      "<div>&amp;</div>",
                                                      "$HOME/~x",
                                                      "a+b=c",
                                                      "...",
                                                      "!!!",
                                                      "?!",
                                                      "—",
                                                      "«»",
                                                      "\x7f",
                                                      "\x01",
                                                      "tab\there",
                                                      "trailing ",
                                                      " leading",
                                                      "UPPER lower MiXeD",
                                                      "snake_case_name",
                                                      "camelCaseName",
                                                      "ＦＵＬＬ"};
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  for (int k = 0; k < count; ++k) {
    std::string s;
    const int n = 1 + static_cast<int>(rng() % 8);
    for (int j = 0; j < n; ++j) s += kFragments[rng() % kFragments.size()];
    out.push_back(s);
  }
  return out;
}

class TokenizerRoundTrip : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerRoundTrip, DecodeOfEncodeGivesTheText) {
  const Tokenizer& tok = load(GetParam());
  for (const std::string& text : varied_texts(7, 400)) {
    const auto encoded = tok.encode(text, /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(tok.decode(encoded), text);
  }
}

// Documented exceptions to the round trip.
TEST_P(TokenizerRoundTrip, KnownExceptions) {
  const Tokenizer& tok = load(GetParam());
  const bool spm = std::string(GetParam()) == "llama-spm" || std::string(GetParam()) == "phi-3";
  // Invalid UTF-8: byte-level BPE reads each undecodable byte as U+FFFD (as llama.cpp does:
  // the truncated E2 82 gives two);
  // SentencePiece falls back to byte tokens and keeps the bytes.
  const std::string bad =
      "a\xff"
      "b\xe2\x82";
  EXPECT_EQ(tok.decode(tok.encode(bad, false, false)), spm ? bad
                                                           : "a\xEF\xBF\xBD"
                                                             "b\xEF\xBF\xBD\xEF\xBF\xBD");
  if (spm) {
    // U+2581 is SentencePiece's own space marker, so it comes back as a space.
    EXPECT_EQ(tok.decode(tok.encode("a\u2581b", false, false)), "a b");
    // With BOS the first piece keeps its leading space: llama.cpp's detokenize strips only
    // the first token's, and BOS renders as nothing.
    EXPECT_EQ(tok.decode(tok.encode("Hello", true, false)), " Hello");
  } else {
    EXPECT_EQ(tok.decode(tok.encode("Hello", true, false)), "Hello");
  }
}

INSTANTIATE_TEST_SUITE_P(SharedVocabs, TokenizerRoundTrip, ::testing::ValuesIn(kVocabs));

TEST(Tokenizer, SpecialTokensAndEndOfGeneration) {
  const Tokenizer& llama3 = load("llama-bpe");
  EXPECT_EQ(llama3.bos(), 128000);
  EXPECT_EQ(llama3.eos(), 128001);
  EXPECT_TRUE(llama3.add_bos());
  EXPECT_EQ(llama3.encode("Hi", true, false), ids({128000, 13347}));
  EXPECT_EQ(llama3.encode("<|eot_id|>", false, true), ids({128009}));
  EXPECT_NE(llama3.encode("<|eot_id|>", false, false), ids({128009}));
  EXPECT_TRUE(llama3.is_end_of_generation(128001));  // <|end_of_text|>
  EXPECT_TRUE(llama3.is_end_of_generation(128009));  // <|eot_id|>
  EXPECT_FALSE(llama3.is_end_of_generation(128000));
  EXPECT_FALSE(llama3.is_end_of_generation(13347));
  EXPECT_FALSE(llama3.is_end_of_generation(-1));
  EXPECT_TRUE(llama3.is_control(128006));
  EXPECT_FALSE(llama3.is_control(13347));
  EXPECT_EQ(llama3.find_token("<|eot_id|>"), 128009);
  EXPECT_EQ(llama3.token_text(128009), "<|eot_id|>");
  EXPECT_EQ(llama3.find_token("no such token \x01"), std::nullopt);

  const Tokenizer& qwen = load("qwen2");
  EXPECT_FALSE(qwen.add_bos());
  EXPECT_TRUE(qwen.is_end_of_generation(151645));   // <|im_end|>
  EXPECT_TRUE(qwen.is_end_of_generation(151643));   // <|endoftext|>
  EXPECT_FALSE(qwen.is_end_of_generation(151644));  // <|im_start|>
  const auto chat = qwen.encode("<|im_start|>user\nhi<|im_end|>", false, true);
  EXPECT_EQ(chat.front(), 151644);
  EXPECT_EQ(chat.back(), 151645);
  EXPECT_EQ(qwen.decode(chat, /*render_special=*/true), "<|im_start|>user\nhi<|im_end|>");
  EXPECT_EQ(qwen.decode(chat), "user\nhi");

  const Tokenizer& phi3 = load("phi-3");
  EXPECT_TRUE(phi3.is_end_of_generation(32000));  // <|endoftext|>
  EXPECT_TRUE(phi3.is_end_of_generation(32007));  // <|end|>
  EXPECT_TRUE(phi3.is_end_of_generation(2));      // </s>
  // Phi-3's special tokens swallow the whitespace after them (rstrip), as in llama.cpp.
  EXPECT_EQ(phi3.encode("</s>  hi <|end|>  x", false, true), ids({2, 7251, 29871, 32007, 921}));

  EXPECT_TRUE(load("gpt-2").is_end_of_generation(50256));
  EXPECT_TRUE(load("llama-spm").is_end_of_generation(2));
  EXPECT_FALSE(load("llama-spm").is_end_of_generation(1));
}

TEST(Tokenizer, Pieces) {
  const Tokenizer& spm = load("llama-spm");
  EXPECT_EQ(spm.token_to_piece(15043), " Hello");
  EXPECT_EQ(spm.token_to_piece(13), "\n");  // <0x0A>
  EXPECT_EQ(spm.token_to_piece(1), "");     // <s> is control
  EXPECT_EQ(spm.token_to_piece(1, true), "<s>");
  EXPECT_EQ(spm.token_to_piece(0, true), "<unk>");
  EXPECT_EQ(spm.token_to_piece(-1), "");
  EXPECT_EQ(spm.token_to_piece(spm.n_vocab()), "");
  EXPECT_EQ(spm.decode({15043, 3186}), "Hello world");  // leading space of the first piece goes

  const Tokenizer& bpe = load("gpt-2");
  EXPECT_EQ(bpe.token_to_piece(220), " ");  // "Ġ"
  EXPECT_EQ(bpe.token_to_piece(198), "\n");
  EXPECT_EQ(bpe.token_to_piece(50256), "");
  EXPECT_EQ(bpe.token_to_piece(50256, true), "<|endoftext|>");
  // A multi-byte character split across tokens only becomes whole when joined.
  const auto emoji = bpe.encode("🦙", false, false);
  ASSERT_GT(emoji.size(), 1u);
  EXPECT_EQ(bpe.decode(emoji), "🦙");
  EXPECT_EQ(bpe.decode({15496, 995}), "Hello world");

  // deepseek-coder keeps single characters as user-defined tokens: verbatim, always split out.
  const Tokenizer& ds = load("deepseek-coder");
  EXPECT_EQ(ds.token_to_piece(32000), "õ");
  EXPECT_EQ(ds.encode("õ", false, false), ids({32000}));
}

TEST(Tokenizer, ArbitraryBytesAndIdsNeverCrash) {
  std::mt19937 rng(3);
  for (const char* name : kVocabs) {
    const Tokenizer& tok = load(name);
    for (int k = 0; k < 200; ++k) {
      std::string s(rng() % 64, '\0');
      for (char& c : s) c = static_cast<char>(rng());
      const auto out = tok.encode(s, k % 2 == 0, k % 3 == 0);
      for (TokenId id : out) ASSERT_TRUE(id >= 0 && id < tok.n_vocab()) << name;
      std::vector<TokenId> random_ids(16);
      for (TokenId& id : random_ids) id = static_cast<TokenId>(rng() % (tok.n_vocab() + 10)) - 5;
      (void)tok.decode(random_ids, k % 2 == 0);
    }
  }
}

// 100 KB of English through the Llama 3 tokenizer.
TEST(Tokenizer, EncodesHundredKilobytesQuickly) {
  std::string text = read_file(test::shared_dir() + "/testdata/text/tinyshakespeare.txt");
  ASSERT_GE(text.size(), 100000u);
  text.resize(100000);
  for (const char* name : {"llama-bpe", "qwen2", "llama-spm"}) {
    const Tokenizer& tok = load(name);
    (void)tok.encode(text.substr(0, 1000), false, false);  // warm-up
    const auto t0 = std::chrono::steady_clock::now();
    const auto out = tok.encode(text, false, false);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ perf     ] %s: 100000 bytes -> %zu tokens in %.1f ms\n", name, out.size(),
                s * 1e3);
    RecordProperty(std::string(name) + "_ms", static_cast<int>(s * 1e3));
    EXPECT_LT(s, 1.0) << name;
    EXPECT_EQ(tok.decode(out), text) << name;
  }
}

// --- synthetic vocabularies written with GgufWriter ---

const std::string kSpace = "\u2581";

// SentencePiece: <unk> <s> </s>, 256 byte tokens, a few pieces, one user-defined token.
GgufWriter spm_vocab() {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(str_format("<0x%02X>", b));
    scores.push_back(0);
    types.push_back(6);
  }
  const std::vector<std::pair<std::string, float>> pieces = {
      {kSpace, -1.0f}, {"a", -2.0f},          {"b", -2.0f},
      {"ab", -1.5f},   {kSpace + "a", -1.2f}, {kSpace + "ab", -0.5f}};
  for (const auto& [t, s] : pieces) {
    tokens.push_back(t);
    scores.push_back(s);
    types.push_back(1);
  }
  tokens.push_back("<|user|>");
  scores.push_back(0);
  types.push_back(4);
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_f32s("tokenizer.ggml.scores", scores);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  return w;
}

// Byte-level BPE: the 256 byte characters, "Ġh", "Ġhi", and a control token.
GgufWriter bpe_vocab() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b)
    tokens.push_back(byte_alphabet::utf8_of_byte(static_cast<uint8_t>(b)));
  const std::string g = byte_alphabet::utf8_of_byte(' ');
  tokens.push_back(g + "h");
  tokens.push_back(g + "hi");
  tokens.push_back("<|end|>");
  std::vector<int32_t> types(tokens.size(), 1);
  types.back() = 3;
  GgufWriter w;
  w.set_string("general.architecture", "gpt2");
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "gpt-2");
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_strings("tokenizer.ggml.merges", {g + " h", g + "h i"});
  w.set_u32("tokenizer.ggml.bos_token_id", 258);
  w.set_u32("tokenizer.ggml.eos_token_id", 258);
  return w;
}

Result<std::unique_ptr<Tokenizer>> build(const GgufWriter& w, std::vector<uint8_t>* keep) {
  *keep = w.to_bytes();
  auto file = GgufFile::parse(keep->data(), keep->size());
  if (!file.is_ok()) return file.status();
  return Tokenizer::from_gguf(**file);
}

TEST(Tokenizer, SyntheticSentencePiece) {
  std::vector<uint8_t> bytes;
  auto tok = build(spm_vocab(), &bytes);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  const TokenId ab = *(*tok)->find_token(kSpace + "ab");
  const TokenId space = *(*tok)->find_token(kSpace);
  const TokenId user = *(*tok)->find_token("<|user|>");
  // Highest-scoring pairs merge first: "▁a" then "▁ab".
  EXPECT_EQ((*tok)->encode("ab ab", false, false), ids({ab, ab}));
  EXPECT_EQ((*tok)->encode("ab", true, false), ids({1, ab}));
  // No piece for "é": byte fallback.
  EXPECT_EQ((*tok)->encode("é", false, false), ids({space, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ((*tok)->decode((*tok)->encode("é", false, false)), "é");
  // User-defined tokens are split out even without parse_special, and text after a
  // special token gets the dummy space again.
  EXPECT_EQ((*tok)->encode("ab<|user|>ab", false, false), ids({ab, user, ab}));
  EXPECT_EQ((*tok)->decode({ab, user, ab}), "ab<|user|> ab");
  // Control tokens only with parse_special.
  EXPECT_EQ((*tok)->encode("</s>", false, true), ids({2}));
  EXPECT_NE((*tok)->encode("</s>", false, false), ids({2}));
}

TEST(Tokenizer, SyntheticBytePairEncoding) {
  std::vector<uint8_t> bytes;
  auto tok = build(bpe_vocab(), &bytes);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  EXPECT_EQ((*tok)->encode(" hi", false, false), ids({257}));
  EXPECT_EQ((*tok)->encode(" hi<|end|>", false, true), ids({257, 258}));
  EXPECT_EQ((*tok)->encode("hi", false, false), ids({'h', 'i'}));  // printable ASCII maps to itself
  EXPECT_TRUE((*tok)->is_end_of_generation(258));
  EXPECT_FALSE((*tok)->add_bos());
  EXPECT_EQ((*tok)->decode({257, 258}), " hi");
}

struct BadCase {
  const char* what;
  std::function<void(GgufWriter&)> edit;
  const char* message;  // expected substring of the error
};

TEST(Tokenizer, HostileMetadataGivesClearErrors) {
  const std::vector<std::string> three = {"a", "b", "c"};
  const std::vector<BadCase> spm_cases = {
      {"no model key", [](GgufWriter& w) { w.remove("tokenizer.ggml.model"); },
       "tokenizer.ggml.model"},
      {"no vocab", [](GgufWriter& w) { w.set_string("tokenizer.ggml.model", "no_vocab"); },
       "no vocabulary"},
      {"unsupported model", [](GgufWriter& w) { w.set_string("tokenizer.ggml.model", "bert"); },
       "not supported"},
      {"model not a string", [](GgufWriter& w) { w.set_u32("tokenizer.ggml.model", 1); },
       "must be a string"},
      {"no tokens", [](GgufWriter& w) { w.remove("tokenizer.ggml.tokens"); },
       "tokenizer.ggml.tokens"},
      {"tokens not strings",
       [](GgufWriter& w) {
         w.set_i32s("tokenizer.ggml.tokens", {1, 2, 3});
       },
       "array of strings"},
      {"tokens scalar", [](GgufWriter& w) { w.set_string("tokenizer.ggml.tokens", "abc"); },
       "must be an array"},
      {"tokens empty", [](GgufWriter& w) { w.set_strings("tokenizer.ggml.tokens", {}); },
       "is empty"},
      {"duplicate token",
       [&](GgufWriter& w) {
         w.set_strings("tokenizer.ggml.tokens", {"<unk>", "x", "x"});
         w.remove("tokenizer.ggml.scores");
         w.remove("tokenizer.ggml.token_type");
       },
       "duplicate token"},
      {"short scores",
       [](GgufWriter& w) {
         w.set_f32s("tokenizer.ggml.scores", {1, 2});
       },
       "tokenizer.ggml.scores has 2 entries"},
      {"scores strings", [&](GgufWriter& w) { w.set_strings("tokenizer.ggml.scores", three); },
       "array of numbers"},
      {"long token types",
       [](GgufWriter& w) {
         w.set_i32s("tokenizer.ggml.token_type", std::vector<int32_t>(1000, 1));
       },
       "token_type has 1000 entries"},
      {"float token types",
       [](GgufWriter& w) {
         w.set_f32s("tokenizer.ggml.token_type", std::vector<float>(266, 1.0f));
       },
       "integers"},
      {"bos out of range", [](GgufWriter& w) { w.set_u32("tokenizer.ggml.bos_token_id", 100000); },
       "outside the vocabulary"},
      {"eos negative", [](GgufWriter& w) { w.set_i32("tokenizer.ggml.eos_token_id", -3); },
       "outside the vocabulary"},
      {"bos a string", [](GgufWriter& w) { w.set_string("tokenizer.ggml.bos_token_id", "1"); },
       "must be an integer"},
      {"add_bos not bool", [](GgufWriter& w) { w.set_u32("tokenizer.ggml.add_bos_token", 1); },
       "must be a bool"},
      {"eos far out of range",
       [](GgufWriter& w) { w.set_u32("tokenizer.ggml.eos_token_id", 1u << 30); },
       "outside the vocabulary"},
      {"pre not a string", [](GgufWriter& w) { w.set_u32("tokenizer.ggml.pre", 7); },
       "tokenizer.ggml.pre must be a string"},
  };
  for (const BadCase& c : spm_cases) {
    GgufWriter w = spm_vocab();
    c.edit(w);
    std::vector<uint8_t> bytes;
    auto tok = build(w, &bytes);
    ASSERT_FALSE(tok.is_ok()) << c.what;
    EXPECT_NE(tok.status().message().find(c.message), std::string::npos)
        << c.what << ": " << tok.status().message();
  }
  const std::vector<BadCase> bpe_cases = {
      {"no merges", [](GgufWriter& w) { w.remove("tokenizer.ggml.merges"); },
       "tokenizer.ggml.merges"},
      {"merges not strings", [](GgufWriter& w) { w.set_i32s("tokenizer.ggml.merges", {1}); },
       "array of strings"},
      {"add_bos without BOS",
       [](GgufWriter& w) {
         w.set_string("tokenizer.ggml.pre", "chatglm-bpe");
         w.remove("tokenizer.ggml.bos_token_id");
         w.set_bool("tokenizer.ggml.add_bos_token", true);
       },
       "no BOS token"},
  };
  for (const BadCase& c : bpe_cases) {
    GgufWriter w = bpe_vocab();
    c.edit(w);
    std::vector<uint8_t> bytes;
    auto tok = build(w, &bytes);
    ASSERT_FALSE(tok.is_ok()) << c.what;
    EXPECT_NE(tok.status().message().find(c.message), std::string::npos)
        << c.what << ": " << tok.status().message();
  }
}

TEST(Tokenizer, ToleratedMetadata) {
  std::vector<uint8_t> bytes;
  {  // An optional id out of range is ignored with a warning (as llama.cpp does).
    GgufWriter w = spm_vocab();
    w.set_u32("tokenizer.ggml.padding_token_id", 99999);
    EXPECT_TRUE(build(w, &bytes).is_ok());
  }
  {  // Unknown token types and an empty token string still load.
    GgufWriter w = spm_vocab();
    std::vector<int32_t> types(266, 1);
    types[3] = -7;
    types[4] = 99;
    w.set_i32s("tokenizer.ggml.token_type", types);
    std::vector<float> scores(266, 0.0f);
    w.set_f32s("tokenizer.ggml.scores", scores);
    auto tok = build(w, &bytes);
    ASSERT_TRUE(tok.is_ok()) << tok.status().message();
    EXPECT_EQ((*tok)->token_to_piece(3, true), "");  // undefined type renders as nothing
  }
  {  // Unknown or missing pre-tokenizer: the default one, with a warning.
    for (bool remove : {false, true}) {
      GgufWriter w = bpe_vocab();
      if (remove)
        w.remove("tokenizer.ggml.pre");
      else
        w.set_string("tokenizer.ggml.pre", "some-future-model");
      auto tok = build(w, &bytes);
      ASSERT_TRUE(tok.is_ok()) << tok.status().message();
      EXPECT_EQ((*tok)->encode(" hi", false, false), ids({257}));
    }
  }
  {  // Integer scores are accepted (llama.cpp reads i32 scores too).
    GgufWriter w = spm_vocab();
    w.set_i32s("tokenizer.ggml.scores", std::vector<int32_t>(266, -1));
    EXPECT_TRUE(build(w, &bytes).is_ok());
  }
}

// Random corruption of a small vocabulary file: any outcome but a crash is fine.
TEST(Tokenizer, CorruptedFilesDoNotCrash) {
  std::mt19937 rng(11);
  for (const GgufWriter& w : {spm_vocab(), bpe_vocab()}) {
    const std::vector<uint8_t> good = w.to_bytes();
    int loaded = 0;
    for (int iter = 0; iter < 3000; ++iter) {
      std::vector<uint8_t> bytes = good;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < flips; ++k) bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
      if (iter % 10 == 0) bytes.resize(rng() % bytes.size());
      auto file = GgufFile::parse(bytes.data(), bytes.size());
      if (!file.is_ok()) continue;
      auto tok = Tokenizer::from_gguf(**file);
      if (!tok.is_ok()) {
        EXPECT_FALSE(tok.status().message().empty());
        continue;
      }
      ++loaded;
      for (const char* text : {"ab ab", " hi<|end|>", "é\xff", ""})
        (void)(*tok)->decode((*tok)->encode(text, true, true), true);
    }
    EXPECT_GT(loaded, 0);
  }
}

}  // namespace
}  // namespace pagoda
