// Chat-template interpreter: language features (each expectation checked against Python's
// jinja2 set up as Hugging Face sets it up), errors with line numbers, and the limits that
// keep hostile templates from crashing or hanging the process. The broad comparison with
// jinja2 lives in tests/model/test_jinja_semantics.py and test_chat_templates.py.
#include "pagoda/chat_template.h"

#include <gtest/gtest.h>

#include "shared_dir.h"

#include "cpu_time.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace pagoda {
namespace {

using Json = nlohmann::ordered_json;

std::string render_ok(const std::string& tmpl, const Json& ctx = Json::object()) {
  auto r = render_chat_template(tmpl, ctx);
  EXPECT_TRUE(r.is_ok()) << tmpl << " -> " << r.status().message();
  return r.is_ok() ? *r : std::string();
}

std::string render_error(const std::string& tmpl, const Json& ctx = Json::object()) {
  auto r = render_chat_template(tmpl, ctx);
  EXPECT_FALSE(r.is_ok()) << tmpl << " rendered " << (r.is_ok() ? *r : "");
  return r.is_ok() ? std::string() : r.status().message();
}

TEST(ChatTemplate, LoopsFiltersAndWhitespaceMatchJinja2) {
  Json msgs =
      Json::parse(R"([{"role":"user","content":" hi "},{"role":"assistant","content":"yo"}])");
  EXPECT_EQ(render_ok("{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}"
                      "{% if not loop.last %}|{% endif %}{% endfor %}",
                      Json{{"messages", msgs}}),
            "<user>hi|<assistant>yo");
  EXPECT_EQ(render_ok("{%- if x -%}\n  yes\n{%- endif %}\n!", Json{{"x", 1}}), "yes!");
  // trim_blocks and lstrip_blocks.
  EXPECT_EQ(render_ok("a\n  {% if true %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");
  EXPECT_EQ(render_ok("{% for x in items if x > 1 %}{{ loop.index }}:{{ x }} {% else %}none"
                      "{% endfor %}",
                      Json{{"items", {1, 2, 3}}}),
            "1:2 2:3 ");
  EXPECT_EQ(render_ok("{% for x in [] %}x{% else %}none{% endfor %}"), "none");
  EXPECT_EQ(render_ok("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(ChatTemplate, ValuesPrintAsPythonDoes) {
  EXPECT_EQ(render_ok("{{ 'a,b'.split(',') }} {{ [1, 'x', none, true] }} {{ 7 // 2 }} "
                      "{{ 7 / 2 }} {{ -7 % 3 }}"),
            "['a', 'b'] [1, 'x', None, True] 3 3.5 2");
  EXPECT_EQ(render_ok("{{ 1e16 }} {{ 0.1 + 0.2 }} {{ 3.0 }} {{ 1.5e-7 }}"),
            "1e+16 0.30000000000000004 3.0 1.5e-07");
  EXPECT_EQ(render_ok("{{ '%s=%05.1f' % ('v', 3.14159) }}"), "v=003.1");
  EXPECT_EQ(render_ok("{{ messages[0]['content'][::-1] }}",
                      Json{{"messages", Json::parse(R"([{"content":"héllo"}])")}}),
            "olléh");
}

TEST(ChatTemplate, TojsonKeepsKeyOrderAsHuggingFaceDoes) {
  Json ctx = {{"d", Json::parse(R"({"b":1,"a":[1,"é"]})")}};
  EXPECT_EQ(render_ok("{{ d | tojson }} {{ d | tojson(indent=2) }}", ctx),
            "{\"b\": 1, \"a\": [1, \"é\"]} {\n  \"b\": 1,\n  \"a\": [\n    1,\n    \"é\"\n  ]\n}");
}

TEST(ChatTemplate, NamespacesMacrosAndMarkup) {
  EXPECT_EQ(render_ok("{% set ns = namespace(n=0) %}{% for i in range(4) %}"
                      "{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(render_ok("{% macro f(a, b='x') %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}"
                      "{{ f(2, b='y') }}"),
            "[1x][2y]");
  EXPECT_EQ(render_ok("{{ x.y }}|{{ x.y is defined }}", Json{{"x", Json::object()}}), "|False");
  // Markup + str escapes the str, as markupsafe does.
  EXPECT_EQ(render_ok("{{ 'x' | safe + '<' }}"), "x&lt;");
  Json users = Json::parse(R"([{"n":"a","on":true},{"n":"b","on":false},{"n":"c","on":true}])");
  EXPECT_EQ(render_ok("{{ users | selectattr('on') | map(attribute='n') | join(',') }}",
                      Json{{"users", users}}),
            "a,c");
}

TEST(ChatTemplate, ReferenceCyclesAreFreedWhenRenderingEnds) {
  // A macro holds the scope that holds it; a namespace can hold itself or a macro closing
  // over the scope that holds the namespace. The interpreter breaks these cycles when a
  // rendering ends, also when it ends in an error. The leak check is LeakSanitizer's:
  // scripts/test.sh runs these tests under ASan with detect_leaks=1.
  EXPECT_EQ(render_ok("{% macro m(x) %}<{{ x }}>{% endmacro %}{% for i in range(2) %}"
                      "{% macro inner() %}{{ m(i) }}{% endmacro %}{{ inner() }}{% endfor %}"),
            "<0><1>");
  EXPECT_EQ(render_ok("{% set ns = namespace(self=none) %}{% set ns.self = ns %}"
                      "{% macro get() %}{{ ns.self is defined }}{% endmacro %}"
                      "{% set ns.f = get %}{{ ns.f() }}"),
            "True");
  EXPECT_EQ(render_ok("{% macro m() %}[{{ caller() }}]{% endmacro %}"
                      "{% call m() %}c{% endcall %}"),
            "[c]");
  render_error(
      "{% macro m() %}{{ raise_exception('boom') }}{% endmacro %}"
      "{% set ns = namespace() %}{% set ns.m = m %}{{ ns.m() }}");
}

TEST(ChatTemplate, ParseOnceRenderMany) {
  auto t = ChatTemplate::parse(
      "{{ bos_token }}{% for m in messages %}{{ m.content }};{% endfor %}"
      "{% if add_generation_prompt %}>{% endif %}");
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  ChatTemplateInputs in;
  in.messages = Json::parse(R"([{"role":"user","content":"a"}])");
  in.bos_token = "<s>";
  EXPECT_EQ(*t->render(make_chat_context(in)), "<s>a;");
  in.add_generation_prompt = true;
  in.messages.push_back(Json{{"role", "assistant"}, {"content", "b"}});
  EXPECT_EQ(*t->render(make_chat_context(in)), "<s>a;b;>");
  // Shared between threads.
  std::vector<std::thread> threads;
  std::vector<std::string> outs(8);
  Json ctx = make_chat_context(in);
  for (int i = 0; i < 8; ++i) threads.emplace_back([&, i] { outs[i] = *t->render(ctx); });
  for (auto& th : threads) th.join();
  for (const auto& o : outs) EXPECT_EQ(o, "<s>a;b;>");
}

TEST(ChatTemplate, ContextLooksLikeTransformers) {
  ChatTemplateInputs in;
  in.messages = Json::array();
  in.extra = {{"enable_thinking", false}};
  Json ctx = make_chat_context(in);
  EXPECT_TRUE(ctx["tools"].is_null());
  EXPECT_TRUE(ctx["documents"].is_null());
  EXPECT_EQ(ctx["add_generation_prompt"], false);
  EXPECT_FALSE(ctx.contains("bos_token"));
  EXPECT_EQ(ctx["enable_thinking"], false);
  EXPECT_EQ(render_ok("{{ tools is defined }} {{ tools is none }} {{ bos_token is defined }}", ctx),
            "True True False");
}

TEST(ChatTemplateErrors, SyntaxErrorsNameTheLine) {
  std::string m = render_error("line 1\nline 2\n{% if x %}\nno end");
  EXPECT_NE(m.find("syntax error"), std::string::npos) << m;
  EXPECT_NE(m.find("'endif'"), std::string::npos) << m;
  m = render_error("a\nb\n{{ 1 + }}");
  EXPECT_NE(m.find("line 3"), std::string::npos) << m;
  m = render_error("{% for x in y %}\n{% endif %}");
  EXPECT_NE(m.find("line 2"), std::string::npos) << m;
  m = render_error("\n\n\n{% frobnicate %}");
  EXPECT_NE(m.find("unknown tag 'frobnicate'"), std::string::npos) << m;
  EXPECT_NE(m.find("line 4"), std::string::npos) << m;
  m = render_error("{{ x | no_such_filter }}");
  EXPECT_NE(m.find("No filter named 'no_such_filter'"), std::string::npos) << m;
  m = render_error("{{ 'unterminated }}");
  EXPECT_NE(m.find("syntax error"), std::string::npos) << m;
  m = render_error("{# never closed");
  EXPECT_NE(m.find("comment"), std::string::npos) << m;
  EXPECT_FALSE(ChatTemplate::parse(std::string("\xff\xfe bad utf-8")).is_ok());
}

TEST(ChatTemplateErrors, UnsupportedConstructsAreNamed) {
  for (const char* t :
       {"{% extends 'base.html' %}", "{% include 'x.jinja' %}", "{% import 'm' as m %}",
        "{% block body %}{% endblock %}", "{% for x in y recursive %}{% endfor %}",
        "{% autoescape true %}{% endautoescape %}"}) {
    auto r = ChatTemplate::parse(t);
    ASSERT_FALSE(r.is_ok()) << t;
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported) << t;
    EXPECT_NE(r.status().message().find("not supported"), std::string::npos)
        << r.status().message();
  }
  std::string m = render_error("{{ 'x' | wordwrap(3) }}");
  EXPECT_NE(m.find("'wordwrap' is not supported"), std::string::npos) << m;
  m = render_error("\n{{ 'x'.encode() }}");
  EXPECT_NE(m.find("'encode' is not supported"), std::string::npos) << m;
  EXPECT_NE(m.find("line 2"), std::string::npos) << m;
  m = render_error("{{ 2 ** 64 }}");
  EXPECT_NE(m.find("64-bit"), std::string::npos) << m;
}

TEST(ChatTemplateErrors, RenderErrorsAreValues) {
  std::string m = render_error("ok\n{{ raise_exception('System role not supported') }}");
  EXPECT_NE(m.find("System role not supported"), std::string::npos) << m;
  EXPECT_NE(m.find("line 2"), std::string::npos) << m;
  m = render_error("{{ missing.attr }}");
  EXPECT_NE(m.find("'missing' is undefined"), std::string::npos) << m;
  m = render_error("{{ 'a' + 1 }}");
  EXPECT_NE(m.find("can only concatenate str"), std::string::npos) << m;
  m = render_error("{{ [1].append(2) }}");  // the sandbox forbids mutation
  EXPECT_NE(m.find("unsafe"), std::string::npos) << m;
  m = render_error("{{ 1 / 0 }}");
  EXPECT_NE(m.find("division by zero"), std::string::npos) << m;
  EXPECT_FALSE(render_chat_template("{{ x }}", Json::array()).is_ok());
}

TEST(ChatTemplateLimits, HostileTemplatesFailCleanly) {
  // Deep nesting is refused while parsing.
  std::string deep(100000, '(');
  EXPECT_NE(render_error("{{ " + deep + "1" + std::string(100000, ')') + " }}").find("too deep"),
            std::string::npos);
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_NE(render_error(ifs).find("too deep"), std::string::npos);
  std::string nots = "{{ " + std::string(0, ' ');
  for (int i = 0; i < 50000; ++i) nots += "not ";
  EXPECT_NE(render_error(nots + "1 }}").find("too deep"), std::string::npos);
  std::string filters = "{{ 1";
  for (int i = 0; i < 100000; ++i) filters += "|abs";
  // Flat chains build deep trees too: a|f|f|f..., a + a + a..., a.b.b.b...
  EXPECT_NE(render_error(filters + " }}").find("too deep"), std::string::npos);
  std::string sum = "{{ 1";
  for (int i = 0; i < 100000; ++i) sum += " + 1";
  EXPECT_NE(render_error(sum + " }}").find("too deep"), std::string::npos);
  std::string attrs = "{{ x";
  for (int i = 0; i < 100000; ++i) attrs += ".y";
  EXPECT_NE(render_error(attrs + " }}").find("too deep"), std::string::npos);
  // Long but shallow templates are fine.
  std::string many;
  for (int i = 0; i < 20000; ++i) many += "{% if true %}x{% endif %}{{ 1 + 2 }}";
  EXPECT_EQ(render_ok(many).size(), 40000u);
  // Runaway loops and recursion stop at the step and depth limits.
  EXPECT_NE(render_error("{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% endfor %}"
                         "{% endfor %}")
                .find("evaluation steps"),
            std::string::npos);
  EXPECT_NE(render_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("deeper than"),
            std::string::npos);
  EXPECT_NE(render_error("{{ range(1000000) }}").find("Range too big"), std::string::npos);
  // Output and string sizes are bounded.
  EXPECT_NE(render_error("{{ 'x' * 1000000000000 }}").find("bytes"), std::string::npos);
  EXPECT_NE(render_error("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}"
                         "{% set ns.s = ns.s + ns.s %}{% endfor %}")
                .find("bytes"),
            std::string::npos);
  ChatTemplateLimits tight;
  tight.max_output = 1000;
  auto t = ChatTemplate::parse("{% for i in range(10000) %}xx{% endfor %}");
  ASSERT_TRUE(t.is_ok());
  auto r = t->render(Json::object(), tight);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("1000 bytes"), std::string::npos) << r.status().message();
  // Deeply nested input JSON is refused, not recursed into without bound.
  Json nested = Json::array();
  for (int i = 0; i < 2000; ++i) nested = Json::array({nested});
  EXPECT_FALSE(render_chat_template("{{ x }}", Json{{"x", nested}}).is_ok());
}

// vLLM's "content format": a template that loops over a message's content takes OpenAI's
// list of parts, any other takes a string.
TEST(ChatTemplate, ContentFormatComesFromTheTemplatesLoops) {
  auto format = [](const std::string& tmpl) {
    auto t = ChatTemplate::parse(tmpl);
    EXPECT_TRUE(t.is_ok()) << tmpl << ": " << t.status().message();
    return t.is_ok() ? t->content_format() : ChatContentFormat::kString;
  };
  const char* kParts[] = {
      "{% for message in messages %}{% for part in message['content'] %}{{ part.text }}"
      "{% endfor %}{% endfor %}",
      "{% for m in messages %}{% for p in m.content if p.type == 'text' %}{% endfor %}{% endfor %}",
      // Bound through variables: the messages, one message, the content.
      "{% set loop_messages = messages[1:] %}{% for m in loop_messages %}{% set c = m.content %}"
      "{% for p in c | selectattr('type', 'equalto', 'text') %}{% endfor %}{% endfor %}",
      "{% set first = messages[0] %}{% for p in first['content'][1:] %}{% endfor %}",
      "{% set users = messages | selectattr('role', 'equalto', 'user') | list %}"
      "{% for u in users %}{% for p in u.get('content') %}{% endfor %}{% endfor %}",
      // Through macro parameters (Kimi K2's and GLM 4.6's templates do this).
      "{% macro text(msg) %}{% set c = msg.get('content') %}{% for p in c %}{% endfor %}"
      "{% endmacro %}{% for m in messages %}{{ text(m) }}{% endfor %}",
      "{% macro text(content) %}{% for p in content %}{% endfor %}{% endmacro %}"
      "{% for m in messages %}{{ text(content=m.content) }}{% endfor %}",
  };
  for (const char* t : kParts) EXPECT_EQ(format(t), ChatContentFormat::kOpenAI) << t;
  const char* kString[] = {
      "{% for m in messages %}{{ m.role + ': ' + m.content | trim }}{% endfor %}",
      "{% for m in messages %}{% for call in m.tool_calls %}{{ call.id }}{% endfor %}{% endfor %}",
      "{% for m in messages %}{% for line in m.content.split('\n') %}{% endfor %}{% endfor %}",
      "{% for doc in documents %}{% for p in doc.content %}{% endfor %}{% endfor %}",
      "{% macro f(x) %}{% for p in x %}{% endfor %}{% endmacro %}{{ f(tools) }}",
  };
  for (const char* t : kString) EXPECT_EQ(format(t), ChatContentFormat::kString) << t;

  // The real templates: those that loop over a message's content parts.
  const std::string dir = test::shared_dir() + "/testdata/chat-templates";
  std::vector<std::string> parts;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream f(entry.path());
    std::string source((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (format(source) == ChatContentFormat::kOpenAI) parts.push_back(entry.path().stem());
  }
  std::sort(parts.begin(), parts.end());
  EXPECT_EQ(parts, (std::vector<std::string>{"GLM-4.6", "Kimi-K2-Instruct", "MiniMax-M2",
                                             "unsloth-mistral-Devstral-Small-2507"}));
}

// Templates that allocate without bound: each is refused with the budget error, quickly
// and without allocating what it asked for.
TEST(ChatTemplateLimits, AllocationBudgetStopsRunawayTemplates) {
  const char* kRunaway[] = {
      // A list doubled 26 times (4 GB before the budget).
      "{% set ns = namespace(l=[1]) %}{% for i in range(26) %}{% set ns.l = ns.l + ns.l %}"
      "{% endfor %}{{ ns.l|length }}",
      // Sizes computed up front must fail before anything is built.
      "{{ ([1] * 1000000000)|length }}",
      "{{ 'x' * 10000000000 }}",
      "{{ ('x' * 1000000).replace('x', 'y' * 1000) }}",
      "{{ 'ab'.replace('', 'x' * 100000000) }}",
      // Strings under the length limit, but too many of them.
      "{% set a = 'x' * 40000000 %}{% set b = 'y' * 40000000 %}{{ a|length + b|length }}",
      // A dict copied and grown by one key per iteration (quadratic).
      "{% set ns = namespace(d={}) %}{% for i in range(100000) %}"
      "{% set ns.d = dict(ns.d, **{('key' ~ i): i}) %}{% endfor %}{{ ns.d|length }}",
      // range() within the sandbox's MAX_RANGE, many times over.
      "{% set ns = namespace(l=[]) %}{% for i in range(1000) %}"
      "{% set ns.l = ns.l + [range(100000)] %}{% endfor %}{{ ns.l|length }}",
      // Joining a list of large strings.
      "{{ (['x' * 1000] * 100000)|join(',') }}",
      // Shared structure: small to build, huge to print, dump or hash.
      "{% set ns = namespace(d={}) %}{% for i in range(40) %}{% set ns.d = {'a': ns.d, 'b': ns.d} "
      "%}"
      "{% endfor %}{{ ns.d }}",
      "{% set ns = namespace(l=[]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}"
      "{% endfor %}{{ ns.l|tojson }}",
      "{% set ns = namespace(t=(1,)) %}{% for i in range(60) %}{% set ns.t = (ns.t, ns.t) %}"
      "{% endfor %}{{ {ns.t: 1}|length }}",
      // Every line of a long string indented by a wide margin.
      "{{ ('\n' * 100000)|indent(10000, true, true) }}",
      // A recursive macro holding its arguments at every level.
      "{% macro f() %}{{ f(*varargs) }}{% endmacro %}{{ f(*range(100000)) }}",
      // A generator filter defers errors; the budget error is not deferred.
      "{% set g = (['x' * 1000000] * 100)|map('upper') %}done",
  };
  for (const char* tmpl : kRunaway) {
    const double start = test::thread_seconds();
    std::string m = render_error(tmpl);
    const double seconds = test::thread_seconds() - start;
    EXPECT_NE(m.find("the template allocated more than 67108864 bytes"), std::string::npos)
        << tmpl << " -> " << m;
    EXPECT_LT(seconds, 5.0 * test::kSlowdown) << tmpl;
  }
  // The sandbox's own range limit comes first, as in jinja2.
  EXPECT_NE(render_error("{{ range(1000000000)|length }}").find("Range too big"),
            std::string::npos);

  // The budget is a limit like the others: a caller may set it.
  auto t = ChatTemplate::parse("{{ (['x' * 1000] * 2000)|join }}");
  ASSERT_TRUE(t.is_ok());
  EXPECT_TRUE(t->render(Json::object()).is_ok());
  ChatTemplateLimits small;
  small.max_alloc = 1 << 20;
  auto r = t->render(Json::object(), small);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("allocated more than 1048576 bytes"), std::string::npos)
      << r.status().message();
}

// The budget must never change what a real template renders: each of the 24 renders a
// long conversation (about 1 MB of prompt, a few thousand messages) with the default
// budget exactly as without one.
TEST(ChatTemplateLimits, RealTemplatesRenderLongConversationsWithinBudget) {
  const std::string dir = test::shared_dir() + "/testdata/chat-templates";
  Json messages = Json::array();
  messages.push_back({{"role", "system"}, {"content", "You are a helpful assistant."}});
  for (int i = 0; i < 2000; ++i)
    messages.push_back({{"role", i % 2 ? "assistant" : "user"},
                        {"content", "Message " + std::to_string(i) + ": " +
                                        std::string(400 + i % 200, 'a' + i % 26)}});
  Json tools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather", "parameters": {"type": "object",
      "properties": {"location": {"type": "string"}}, "required": ["location"]}}}])");
  int rendered = 0, templates = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    ++templates;
    std::ifstream f(entry.path());
    std::string source((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto t = ChatTemplate::parse(source);
    ASSERT_TRUE(t.is_ok()) << entry.path() << ": " << t.status().message();
    for (const Json& with_tools : {Json(nullptr), tools}) {
      ChatTemplateInputs in;
      in.messages = messages;
      if (!with_tools.is_null()) in.tools = with_tools;
      in.add_generation_prompt = true;
      in.bos_token = "<s>";
      in.eos_token = "</s>";
      Json ctx = make_chat_context(in);
      ChatTemplateLimits unbounded;
      unbounded.max_alloc = SIZE_MAX;
      auto want = t->render(ctx, unbounded);
      auto got = t->render(ctx);
      ASSERT_EQ(got.is_ok(), want.is_ok()) << entry.path() << ": " << got.status().message();
      if (!want.is_ok()) {
        EXPECT_EQ(got.status().message(), want.status().message()) << entry.path();
        continue;
      }
      EXPECT_EQ(*got, *want) << entry.path();
      EXPECT_GT(got->size(), 800000u) << entry.path();
      ++rendered;
    }
  }
  EXPECT_EQ(templates, 24);
  EXPECT_GE(rendered, 30);  // some templates refuse a system message or need other inputs
}

}  // namespace
}  // namespace pagoda
