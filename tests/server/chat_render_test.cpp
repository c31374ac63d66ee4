// Chat messages to prompt text: OpenAI content given as a list of parts reaches each
// template in the form it takes (vLLM's content format), and what is not text is refused.
#include <gtest/gtest.h>

#include <string>

#include "server/chat_render.h"

namespace pagoda::server {
namespace {

using Json = nlohmann::ordered_json;

ChatRenderer renderer(const std::string& tmpl) {
  ChatTemplateSource src;
  src.template_text = tmpl;
  auto r = ChatRenderer::create(src);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return std::move(r).value();
}

const Json kParts = Json::parse(R"([{"role": "user", "content": [
    {"type": "text", "text": "Hi"}, {"type": "text", "text": "there", "cache_control": {}}]}])");

TEST(ChatContent, StringTemplatesGetTheTextPartsJoined) {
  ChatRenderer r =
      renderer("{% for m in messages %}<{{ m.role }}>{{ m.content + '!' }}{% endfor %}");
  EXPECT_EQ(r.content_format(), ChatContentFormat::kString);
  auto text = r.render(kParts, false, Json());
  ASSERT_TRUE(text.is_ok()) << text.status().message();
  EXPECT_EQ(*text, "<user>Hi\nthere!");
  // A string, or no content, reaches the template as it was sent.
  text = r.render(Json::parse(R"([{"role": "user", "content": "plain"}])"), false, Json());
  EXPECT_EQ(*text, "<user>plain!");
  text = r.render(Json::parse(R"([{"role": "user", "content": []}])"), false, Json());
  EXPECT_EQ(*text, "<user>!");
}

TEST(ChatContent, TemplatesThatIterateContentGetTheParts) {
  ChatRenderer r = renderer(
      "{% for m in messages %}{% if m.content is string %}[{{ m.content }}]{% else %}"
      "{% for p in m.content %}({{ p | tojson }}){% endfor %}{% endif %}{% endfor %}");
  EXPECT_EQ(r.content_format(), ChatContentFormat::kOpenAI);
  auto text = r.render(kParts, false, Json());
  ASSERT_TRUE(text.is_ok()) << text.status().message();
  // As vLLM passes them: the text parts, with nothing but their type and text.
  EXPECT_EQ(*text, R"(({"type": "text", "text": "Hi"})({"type": "text", "text": "there"}))");
  text = r.render(Json::parse(R"([{"role": "user", "content": "plain"}])"), false, Json());
  EXPECT_EQ(*text, "[plain]");
}

TEST(ChatContent, PartsThatAreNotTextAreRefusedByType) {
  for (const char* tmpl : {"{% for m in messages %}{{ m.content }}{% endfor %}",
                           "{% for m in messages %}{% for p in m.content %}{% endfor %}"
                           "{% endfor %}"}) {
    ChatRenderer r = renderer(tmpl);
    for (const char* type : {"image_url", "input_audio", "file"}) {
      Json messages = Json::array(
          {{{"role", "user"},
            {"content", Json::array({{{"type", "text"}, {"text", "a"}}, {{"type", type}}})}}});
      auto text = r.render(messages, false, Json());
      ASSERT_FALSE(text.is_ok()) << tmpl;
      EXPECT_NE(text.status().message().find(std::string("'") + type + "'"), std::string::npos)
          << text.status().message();
      EXPECT_FALSE(message_text(messages[0]["content"]).is_ok());
    }
    auto text = r.render(Json::parse(R"([{"role": "user", "content": [{"text": "no type"}]}])"),
                         false, Json());
    EXPECT_FALSE(text.is_ok());
  }
}

TEST(ChatContent, ChatMlFallbackJoinsTheTextParts) {
  ChatTemplateSource src;
  src.has_chatml_tokens = true;
  auto r = ChatRenderer::create(src);
  ASSERT_TRUE(r.is_ok());
  auto text = r->render(kParts, true, Json());
  ASSERT_TRUE(text.is_ok()) << text.status().message();
  EXPECT_EQ(*text, "<|im_start|>user\nHi\nthere<|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace
}  // namespace pagoda::server
