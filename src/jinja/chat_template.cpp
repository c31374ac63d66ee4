#include "pagoda/chat_template.h"

#include <new>

#include "core/status.h"
#include "jinja/ast.h"
#include "jinja/builtins.h"
#include "jinja/content_format.h"
#include "jinja/error.h"
#include "jinja/interpreter.h"
#include "jinja/json_io.h"
#include "jinja/parser.h"
#include "jinja/pystr.h"

namespace pagoda {

struct ChatTemplate::Parsed {
  jinja::Body body;
  std::vector<std::string> declared;  // names the top level assigns
  ChatContentFormat content_format = ChatContentFormat::kString;
};

namespace {

using jinja::ErrorKind;
using jinja::TemplateError;

Status to_status(const TemplateError& e, int fallback_line) {
  int line = e.line() ? e.line() : fallback_line;
  std::string where = line ? str_format(" (template line %d)", line) : "";
  switch (e.kind()) {
    case ErrorKind::kSyntax:
      return invalid_argument("chat template syntax error" + where + ": " + e.what());
    case ErrorKind::kUnsupported:
      return unsupported("chat template uses something Pagoda does not support" + where + ": " +
                         e.what());
    case ErrorKind::kRaised:
      return invalid_argument("chat template raised an exception" + where + ": " + e.what());
    case ErrorKind::kRender:
    case ErrorKind::kLimit:
      break;
  }
  return invalid_argument("chat template error" + where + ": " + e.what());
}

// jinja2 resolves filter and test names when it compiles, so an unknown one fails the
// template even where it is never reached.
// Inside an {% if %} or an inline if (a "soft" frame in jinja2's compiler, which loops,
// macros and blocks reset), the check waits until the filter or test is actually used.
void check_names(const jinja::Expr* e, bool soft);
void check_names(const jinja::Body& body, bool soft);

void check_args(const jinja::CallArgsExpr& a, bool soft) {
  for (const auto& x : a.pos) check_names(x.get(), soft);
  for (const auto& kv : a.kw) check_names(kv.second.get(), soft);
  check_names(a.star.get(), soft);
  check_names(a.star_star.get(), soft);
}

void check_names(const jinja::Expr* e, bool soft) {
  if (!e) return;
  if (e->kind == jinja::ExprKind::kCondExpr) soft = true;
  if (!soft && e->kind == jinja::ExprKind::kFilter && !jinja::find_filter(e->name)) {
    if (jinja::is_unsupported_filter(e->name))
      throw TemplateError(ErrorKind::kUnsupported, "the filter '" + e->name + "' is not supported",
                          e->line);
    throw TemplateError(ErrorKind::kSyntax, "No filter named '" + e->name + "'.", e->line);
  }
  if (!soft && e->kind == jinja::ExprKind::kTest && !jinja::find_test(e->name))
    throw TemplateError(ErrorKind::kSyntax, "No test named '" + e->name + "'.", e->line);
  for (const auto& x : e->items) check_names(x.get(), soft);
  for (const auto& op : e->ops) check_names(op.second.get(), soft);
  check_names(e->a.get(), soft);
  check_names(e->b.get(), soft);
  check_names(e->c.get(), soft);
  check_args(e->args, soft);
}

void check_names(const jinja::Body& body, bool soft) {
  for (const auto& s : body) {
    bool inner_soft = soft;
    switch (s->kind) {
      case jinja::StmtKind::kIf:
        inner_soft = true;
        check_names(s->expr.get(), true);
        break;
      case jinja::StmtKind::kFor:
        check_names(s->expr.get(), soft);
        inner_soft = false;
        check_names(s->filter.get(), false);
        break;
      case jinja::StmtKind::kMacro:
      case jinja::StmtKind::kCallBlock:
      case jinja::StmtKind::kFilterBlock:
      case jinja::StmtKind::kWith:
      case jinja::StmtKind::kSetBlock:
        check_names(s->expr.get(), soft);
        check_names(s->filter.get(), soft);
        inner_soft = false;
        break;
      default:
        check_names(s->expr.get(), soft);
        check_names(s->filter.get(), soft);
    }
    check_names(s->body, inner_soft);
    check_names(s->else_body, inner_soft);
    for (const auto& p : s->params) check_names(p.default_value.get(), inner_soft);
    for (const auto& wv : s->with_vars) check_names(wv.second.get(), soft);
  }
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(const std::string& source) {
  if (!jinja::valid_utf8(source)) return invalid_argument("chat template is not valid UTF-8");
  try {
    auto parsed = std::make_shared<Parsed>();
    parsed->body = jinja::parse_template(source);
    parsed->declared = jinja::frame_stores(parsed->body);
    check_names(parsed->body, false);
    if (jinja::iterates_message_content(parsed->body))
      parsed->content_format = ChatContentFormat::kOpenAI;
    return ChatTemplate(std::move(parsed));
  } catch (const TemplateError& e) {
    return to_status(e, 0);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kResourceExhausted, "out of memory parsing the chat template");
  }
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context) const {
  return render(context, ChatTemplateLimits());
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context,
                                         const ChatTemplateLimits& limits) const {
  if (!context.is_object()) return invalid_argument("chat template context must be a JSON object");
  int line = 0;
  try {
    jinja::DictObj vars;
    for (const auto& [k, v] : context.items())
      vars.set(jinja::Value::string(k), jinja::from_json(v));
    jinja::Interpreter in(vars, limits);
    try {
      return in.render(parsed_->body, parsed_->declared);
    } catch (...) {
      line = in.current_line();
      throw;
    }
  } catch (const TemplateError& e) {
    return to_status(e, line);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kResourceExhausted, "out of memory rendering the chat template");
  }
}

ChatContentFormat ChatTemplate::content_format() const {
  return parsed_->content_format;
}

nlohmann::ordered_json make_chat_context(const ChatTemplateInputs& inputs) {
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = inputs.messages;
  ctx["tools"] = inputs.tools ? *inputs.tools : nlohmann::ordered_json(nullptr);
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = inputs.add_generation_prompt;
  if (inputs.bos_token) ctx["bos_token"] = *inputs.bos_token;
  if (inputs.eos_token) ctx["eos_token"] = *inputs.eos_token;
  if (inputs.extra.is_object())
    for (const auto& [k, v] : inputs.extra.items()) ctx[k] = v;
  return ctx;
}

Result<std::string> render_chat_template(const std::string& source,
                                         const nlohmann::ordered_json& context) {
  auto t = ChatTemplate::parse(source);
  if (!t.is_ok()) return t.status();
  return t->render(context);
}

}  // namespace pagoda
