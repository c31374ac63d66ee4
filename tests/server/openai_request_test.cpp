// Request parsing against a real vocabulary (stories260K, 512 tokens): token ids checked
// against it, seeds over the whole 64-bit range, prompts longer than the context refused
// without being encoded whole.
#include <gtest/gtest.h>

#include "../unit/shared_dir.h"

#include <cstdint>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>

#include "model/gguf.h"
#include "server/chat_render.h"
#include "server/json_body.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::server {
namespace {

using ojson = nlohmann::ordered_json;

struct Fixture {
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<ChatRenderer> chat;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    auto file = GgufFile::open(test::shared_dir() + "/models/stories260K.gguf");
    if (!file.is_ok()) throw std::runtime_error(file.status().message());
    auto tok = Tokenizer::from_gguf(**file);
    if (!tok.is_ok()) throw std::runtime_error(tok.status().message());
    x.tok = std::move(tok).value();
    auto chat = ChatRenderer::create(ChatRenderer::source_for(
        *x.tok, "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"));
    if (!chat.is_ok()) throw std::runtime_error(chat.status().message());
    x.chat = std::make_unique<ChatRenderer>(std::move(chat).value());
    return x;
  }();
  return f;
}

ParseContext context(int64_t max_model_len = 512) {
  return ParseContext{*fixture().tok, *fixture().chat, max_model_len, 4096};
}

ApiResult<GenerationRequest> completion(const std::string& body, int64_t max_model_len = 512) {
  auto j = parse_json_body(body);
  if (!j.ok()) return j.error();
  return parse_completion_request(j.value(), context(max_model_len));
}

ApiResult<GenerationRequest> chat(const std::string& body, int64_t max_model_len = 512) {
  auto j = parse_json_body(body);
  if (!j.ok()) return j.error();
  return parse_chat_request(j.value(), context(max_model_len));
}

void expect_400(ApiResult<GenerationRequest> r, const std::string& param,
                const std::string& in_message) {
  ASSERT_FALSE(r.ok()) << param;
  EXPECT_EQ(r.error().status, 400);
  EXPECT_EQ(r.error().param, param) << r.error().message;
  EXPECT_NE(r.error().message.find(in_message), std::string::npos) << r.error().message;
}

TEST(OpenAiRequest, StopTokenIdsMustBeInTheVocabulary) {
  auto r = completion(R"({"prompt": "Hi", "stop_token_ids": [0, 2, 511]})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value().params.stop_token_ids, (std::vector<int32_t>{0, 2, 511}));
  // 2^32 + 1 used to wrap to 1; -1 passed as it was.
  for (const char* bad :
       {"512", "-1", "4294967297", "18446744073709551615", "-9223372036854775808"})
    expect_400(completion(std::string(R"({"prompt": "Hi", "stop_token_ids": [1, )") + bad + "]}"),
               "stop_token_ids", std::string(bad) + " is outside the vocabulary (0..511)");
  expect_400(chat(R"({"messages": [{"role": "user", "content": "Hi"}], "stop_token_ids": [600]})"),
             "stop_token_ids", "600");
  expect_400(completion(R"({"prompt": "Hi", "stop_token_ids": [1.5]})"), "stop_token_ids",
             "list of token ids");
}

TEST(OpenAiRequest, SeedTakesTheWhole64BitRange) {
  const std::pair<const char*, uint64_t> cases[] = {
      {"0", 0},
      {"42", 42},
      {"9223372036854775807", INT64_MAX},
      {"9223372036854775808", uint64_t{1} << 63},  // was clamped to INT64_MAX
      {"18446744073709551615", UINT64_MAX},
      {"-1", UINT64_MAX},  // negatives: two's complement, as before
      {"-9223372036854775808", uint64_t{1} << 63},
  };
  for (const auto& [text, want] : cases) {
    auto r = completion(std::string(R"({"prompt": "Hi", "seed": )") + text + "}");
    ASSERT_TRUE(r.ok()) << text << ": " << r.error().message;
    EXPECT_EQ(r.value().params.seed, want) << text;
  }
  // Past 2^64 JSON gives a float: refused, not rounded.
  for (const char* bad : {"18446744073709551616", "1.5", "1e3", "\"7\""})
    expect_400(completion(std::string(R"({"prompt": "Hi", "seed": )") + bad + "}"), "seed",
               "must be an integer");
}

TEST(OpenAiRequest, HugeIntegersAreReportedAsGiven) {
  expect_400(completion(R"({"prompt": "Hi", "n": 18446744073709551615})"), "n",
             "got 18446744073709551615");
  expect_400(completion(R"({"prompt": [18446744073709551615]})"), "prompt",
             "token id 18446744073709551615 is outside");
  expect_400(completion(R"({"prompt": [1, -3]})"), "prompt", "token id -3 is outside");
}

TEST(OpenAiRequest, PromptMustLeaveRoomInTheContext) {
  const std::string text = "Once upon a time there was a little dog. ";
  const size_t n = fixture().tok->encode(text, true, true).size();
  const std::string body = R"({"prompt": ")" + text + R"(", "max_tokens": 1})";
  // n tokens fit a context of n + 1 (room for one generated token), not one of n.
  auto ok = completion(body, static_cast<int64_t>(n) + 1);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok.value().prompts[0].size(), n);
  EXPECT_EQ(ok.value().prompts[0], fixture().tok->encode(text, true, true));
  expect_400(completion(body, static_cast<int64_t>(n)), "prompt", "context");
  expect_400(completion(R"({"prompt": ["Hi", ")" + text + R"("]})", static_cast<int64_t>(n)),
             "prompt", "context");
  // The rendered chat text counts the same way.
  const std::string msgs = R"({"messages": [{"role": "user", "content": ")" + text + R"("}]})";
  const size_t chat_n = chat(msgs).value().prompts[0].size();
  EXPECT_TRUE(chat(msgs, static_cast<int64_t>(chat_n) + 1).ok());
  expect_400(chat(msgs, static_cast<int64_t>(chat_n)), "messages", "context");
}

// CPU time of this thread, so that the limit below holds on a busy machine too.
double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

TEST(OpenAiRequest, TenMegabytePromptIsRefusedQuickly) {
  std::string text;
  while (text.size() < 10'000'000) text += "Once upon a time there was a little dog. ";
  const std::string body = R"({"prompt": ")" + text + R"("})";
  const double t0 = thread_seconds();
  expect_400(completion(body), "prompt", "the prompt has 512 or more tokens");
  expect_400(chat(R"({"messages": [{"role": "user", "content": ")" + text + R"("}]})"), "messages",
             "context is 512");
  const double s = thread_seconds() - t0;
  std::printf("[ perf     ] two 10 MB requests refused in %.1f ms\n", s * 1e3);
  EXPECT_LT(s, 5.0);  // 0.15 s; loose for the sanitizers (all of it takes seconds)
}

}  // namespace
}  // namespace pagoda::server
