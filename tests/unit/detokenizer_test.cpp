// The incremental detokenizer against the text it came from: real vocabularies, text that
// round-trips through their encoders, characters split across tokens, stop strings found
// by plain search in the original text, and long outputs (the detokenizer drops released
// text as it goes).
#include "engine/detokenizer.h"

#include <gtest/gtest.h>

#include "shared_dir.h"

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

std::unique_ptr<Tokenizer> load(const std::string& name) {
  auto f = GgufFile::open(test::shared_dir() + "/testdata/tokenizer/ggml-vocab-" + name + ".gguf");
  EXPECT_TRUE(f.is_ok()) << f.status().message();
  auto t = Tokenizer::from_gguf(**f);
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  return std::move(t).value();
}

// Whether `s` is well-formed UTF-8 made of whole characters.
bool whole_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80           ? 1
                     : (c >> 5) == 0x6  ? 2
                     : (c >> 4) == 0xE  ? 3
                     : (c >> 3) == 0x1E ? 4
                                        : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

std::string long_text() {
  std::string t;
  for (int i = 0; i < 40; ++i)
    t += "Line " + std::to_string(i) +
         ": the sea is calm, la mer est calme, 海は穏やかです 🌊🐟, море спокойно.\n";
  return t;
}

struct Stream {
  std::string text;
  std::vector<std::string> chunks;
  int stopped_at = -1;  // token index whose push reported the stop
};

Stream detokenize(const Tokenizer& tok, const std::vector<int32_t>& ids,
                  std::vector<std::string> stop = {}, bool include_stop = false) {
  IncrementalDetokenizer d(tok, std::move(stop), include_stop);
  Stream r;
  for (size_t i = 0; i < ids.size(); ++i) {
    IncrementalDetokenizer::Update u = d.push(ids[i]);
    if (!u.text.empty()) r.chunks.push_back(u.text);
    r.text += u.text;
    if (u.stopped) {
      r.stopped_at = static_cast<int>(i);
      return r;
    }
  }
  const std::string rest = d.finish();
  if (!rest.empty()) r.chunks.push_back(rest);
  r.text += rest;
  return r;
}

TEST(Detokenizer, ReproducesTheEncodedTextInWholeCharacters) {
  for (const char* name : {"llama-bpe", "qwen2", "gpt-2"}) {
    SCOPED_TRACE(name);
    auto tok = load(name);
    const std::string text = long_text();
    const std::vector<int32_t> ids = tok->encode(text, false, false);
    const Stream r = detokenize(*tok, ids);
    EXPECT_EQ(r.text, text);
    for (const std::string& c : r.chunks) EXPECT_TRUE(whole_utf8(c)) << c;
  }
}

TEST(Detokenizer, SentencePieceByteTokensJoinIntoCharacters) {
  // llama-spm spells characters outside its vocabulary as <0xNN> byte tokens, one byte a
  // token: the stream must hold them back until the character is whole.
  auto tok = load("llama-spm");
  const std::string text = long_text();
  const std::vector<int32_t> ids = tok->encode(text, false, false);
  int byte_tokens = 0;
  for (int32_t id : ids)
    byte_tokens += tok->token_to_piece(id).size() == 1 &&
                   (static_cast<unsigned char>(tok->token_to_piece(id)[0]) & 0x80);
  EXPECT_GT(byte_tokens, 0);
  const Stream r = detokenize(*tok, ids);
  EXPECT_EQ(r.text, " " + text);  // the dummy prefix the encoder added stays in a stream
  for (const std::string& c : r.chunks) EXPECT_TRUE(whole_utf8(c)) << c;
}

TEST(Detokenizer, StopStringsEndTheTextWhereTheyFirstOccur) {
  auto tok = load("llama-bpe");
  const std::string text = long_text();
  const std::vector<int32_t> ids = tok->encode(text, false, false);
  const std::vector<std::vector<std::string>> cases = {
      {"Line 33"},                       // late: most of the text is released and dropped first
      {"calme, 海"},                     // spans tokens and a multi-byte character
      {"спокойно.\nLine 12", "Line 7"},  // the earlier of two
      {"🐟, м"},
      {"not in the text"},
  };
  for (const auto& stop : cases) {
    for (bool include : {false, true}) {
      SCOPED_TRACE(stop[0] + (include ? " (included)" : ""));
      size_t at = std::string::npos, len = 0;
      for (const std::string& s : stop)
        if (size_t p = text.find(s); p < at) at = p, len = s.size();
      const Stream r = detokenize(*tok, ids, stop, include);
      if (at == std::string::npos) {
        EXPECT_EQ(r.text, text);
        EXPECT_EQ(r.stopped_at, -1);
        continue;
      }
      EXPECT_EQ(r.text, text.substr(0, include ? at + len : at));
      // Stopped at the token that completed the stop string: the tokens before it decode
      // to less than its end.
      ASSERT_GE(r.stopped_at, 0);
      const std::vector<int32_t> before(ids.begin(), ids.begin() + r.stopped_at);
      EXPECT_LT(tok->decode(before).size(), at + len);
      EXPECT_GE(
          tok->decode(std::vector<int32_t>(ids.begin(), ids.begin() + r.stopped_at + 1)).size(),
          at + len);
      for (const std::string& c : r.chunks) EXPECT_TRUE(whole_utf8(c)) << c;
    }
  }
}

TEST(Detokenizer, RandomTokensGiveTheirPiecesInOrder) {
  // Any ids, including control tokens (nothing) and stray byte pieces: the stream carries
  // exactly the pieces' bytes, in order, nothing lost or repeated.
  for (const char* name : {"llama-bpe", "llama-spm"}) {
    SCOPED_TRACE(name);
    auto tok = load(name);
    std::mt19937 rng(7);
    std::vector<int32_t> ids(3000);
    std::string bytes;
    for (int32_t& id : ids) {
      id = static_cast<int32_t>(rng() % static_cast<uint32_t>(tok->n_vocab()));
      bytes += tok->token_to_piece(id);
    }
    IncrementalDetokenizer d(*tok, {}, false);
    std::string got;
    for (int32_t id : ids) got += d.push(id).text;
    got += d.finish();
    EXPECT_EQ(got, bytes);
  }
}

}  // namespace
}  // namespace pagoda
