// The server's pieces that need no model: errors, metrics text, chat message content.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/auth.h"
#include "server/chat_render.h"
#include "server/metrics.h"

namespace pagoda::server {
namespace {

TEST(ServerApiError, OpenAiShapeAndStatusMapping) {
  const nlohmann::json j = bad_request("bad temperature", "temperature").to_json();
  EXPECT_EQ(j["error"]["message"], "bad temperature");
  EXPECT_EQ(j["error"]["type"], "BadRequestError");
  EXPECT_EQ(j["error"]["param"], "temperature");
  EXPECT_EQ(j["error"]["code"], 400);
  EXPECT_TRUE(not_found_error("x").to_json()["error"]["param"].is_null());
  EXPECT_EQ(from_status(out_of_range("too long")).status, 400);
  EXPECT_EQ(from_status(invalid_argument("bad")).status, 400);
  EXPECT_EQ(from_status(internal_error("boom")).status, 500);
  EXPECT_EQ(overloaded("full", 1).retry_after_s, 1);
}

TEST(ServerApiError, QuoteForErrorCutsAndEscapes) {
  EXPECT_EQ(quote_for_error("smollm2"), "'smollm2'");
  EXPECT_EQ(quote_for_error(""), "''");
  EXPECT_EQ(quote_for_error(std::string(300, 'm')), "'" + std::string(256, 'm') + "...'");
  EXPECT_EQ(quote_for_error(std::string(256, 'm')), "'" + std::string(256, 'm') + "'");
  EXPECT_EQ(quote_for_error("a\nb\x01\x7f"), "'a\\x0Ab\\x01\\x7F'");
  EXPECT_EQ(quote_for_error("Gr\xC3\xBC\xC3\x9F"
                            "e \xF0\x9F\xA6\x99"),
            "'Gr\xC3\xBC\xC3\x9F"
            "e \xF0\x9F\xA6\x99'");
  // Bytes that are not UTF-8 (a stray continuation, a truncated sequence, a surrogate).
  EXPECT_EQ(quote_for_error("\x80x\xE2\x82"), "'\\x80x\\xE2\\x82'");
  EXPECT_EQ(quote_for_error("\xED\xA0\x80"), "'\\xED\\xA0\\x80'");
  // The cut never splits a character: a 2-byte one that would end past `max` is left out.
  EXPECT_EQ(quote_for_error("a\xC3\xA9\xC3\xA9", 4), "'a\xC3\xA9...'");
  // Whatever comes in, the message can be written as JSON.
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_NO_THROW((void)bad_request(quote_for_error(all, 1000)).to_json().dump());
}

TEST(ServerMetrics, HistogramBucketsAreCumulative) {
  Histogram h({0.001, 0.01, 0.1});
  h.observe(0.0005);
  h.observe(0.005);
  h.observe(0.005);
  h.observe(5);
  std::string out;
  h.render("m", "a=\"b\"", &out);
  EXPECT_NE(out.find("m_bucket{a=\"b\",le=\"0.001\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("m_bucket{a=\"b\",le=\"0.01\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("m_bucket{a=\"b\",le=\"0.10000000000000001\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("m_bucket{a=\"b\",le=\"+Inf\"} 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("m_count{a=\"b\"} 4\n"), std::string::npos) << out;
}

TEST(ServerMetrics, CountersAndGauges) {
  Metrics m({"my \"model\"", "1.0", "v1.0-3-gabc"});
  m.add_prompt_tokens(7);
  m.add_generation_tokens(3);
  RequestMetrics rm;
  rm.arrival = 1;
  rm.first_scheduled = 1.5;
  rm.first_token = 2;
  rm.finished = 3;
  m.completion_finished(rm, FinishReason::kLength);
  m.error_response(400);
  EngineStats s;
  s.num_running = 2;
  s.kv_usage = 0.25;
  const std::string t = m.render(s);
  const std::string model = "model_name=\"my \\\"model\\\"\"";
  EXPECT_NE(t.find("pagoda:prompt_tokens_total{" + model + "} 7\n"), std::string::npos) << t;
  EXPECT_NE(t.find("pagoda:generation_tokens_total{" + model + "} 3\n"), std::string::npos);
  EXPECT_NE(t.find("pagoda:num_requests_running{" + model + "} 2\n"), std::string::npos);
  EXPECT_NE(t.find("pagoda:kv_cache_usage_perc{" + model + "} 0.25\n"), std::string::npos);
  EXPECT_NE(t.find("pagoda:request_success_total{" + model + ",finished_reason=\"length\"} 1\n"),
            std::string::npos);
  EXPECT_NE(t.find("pagoda:request_errors_total{" + model + ",code=\"400\"} 1\n"),
            std::string::npos);
  EXPECT_NE(t.find("pagoda:e2e_request_latency_seconds_sum{" + model + "} 2\n"), std::string::npos);
  EXPECT_NE(t.find("pagoda:build_info{" + model + ",version=\"1.0\",revision=\"v1.0-3-gabc\"} 1\n"),
            std::string::npos)
      << t;
}

TEST(ServerChat, MessageContentTextParts) {
  EXPECT_EQ(*message_text("hi"), "hi");
  EXPECT_EQ(*message_text(nullptr), "");
  auto parts =
      nlohmann::ordered_json::parse(R"([{"type":"text","text":"a"},{"type":"text","text":"b"}])");
  EXPECT_EQ(*message_text(parts), "a\nb");  // as vLLM joins them
  EXPECT_FALSE(message_text(nlohmann::ordered_json::parse(R"([{"type":"image_url"}])")).is_ok());
  EXPECT_FALSE(message_text(3).is_ok());
}

TEST(ServerChat, RenderKeepsTheRequestKeyOrder) {
  ChatTemplateSource src;
  src.template_text = "{{ tools | tojson }}|{{ messages[0] | tojson }}";
  auto r = ChatRenderer::create(src);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const auto messages = nlohmann::ordered_json::parse(R"([{"role":"user","content":"hi"}])");
  const auto tools = nlohmann::ordered_json::parse(R"([{"type":"function","function":{}}])");
  auto text = r->render(messages, false, tools);
  ASSERT_TRUE(text.is_ok()) << text.status().message();
  EXPECT_EQ(*text, R"([{"type": "function", "function": {}}]|{"role": "user", "content": "hi"})");
}

TEST(ServerAuth, BearerSchemeInAnyCaseAndExactKey) {
  EXPECT_EQ(bearer_token("Bearer abc").value_or("?"), "abc");
  EXPECT_EQ(bearer_token("bearer abc").value_or("?"), "abc");
  EXPECT_EQ(bearer_token("  BEARER \tabc  ").value_or("?"), "abc");
  EXPECT_FALSE(bearer_token("Basic abc"));
  EXPECT_FALSE(bearer_token("Bearerabc"));
  EXPECT_TRUE(same_key("sekret", "sekret"));
  EXPECT_FALSE(same_key("sekreT", "sekret"));
  EXPECT_FALSE(same_key("sekret2", "sekret"));
  EXPECT_FALSE(same_key("sekre", "sekret"));
  EXPECT_FALSE(same_key("", "sekret"));
  EXPECT_FALSE(same_key("", ""));
  EXPECT_FALSE(same_key("sekretsekret", "sekret"));  // the cycled key is no match
}

}  // namespace
}  // namespace pagoda::server
