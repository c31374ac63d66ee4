#include "jinja/content_format.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace pagoda::jinja {
namespace {

// What a name or an expression stands for, as far as the detection cares.
enum class Role { kNone, kMessages, kMessage, kContent };

struct Bindings {
  std::set<std::string> messages{"messages"};
  std::set<std::string> message;
  std::set<std::string> content;

  // True when `name` is new to that role.
  bool add(Role role, const std::string& name) {
    switch (role) {
      case Role::kMessages:
        return messages.insert(name).second;
      case Role::kMessage:
        return message.insert(name).second;
      case Role::kContent:
        return content.insert(name).second;
      case Role::kNone:
        break;
    }
    return false;
  }
};

// The template's assignments, loops and macro calls, flattened: scopes are ignored.
struct Sites {
  std::vector<std::pair<std::string, const Expr*>> sets;   // {% set name = expr %}, with
  std::vector<std::pair<std::string, const Expr*>> fors;   // {% for name in expr %}
  std::map<std::string, std::vector<std::string>> macros;  // name -> parameter names
  std::vector<const Expr*> calls;                          // name(...)
};

void collect(const Expr* e, Sites* s) {
  if (!e) return;
  if (e->kind == ExprKind::kCall && e->a && e->a->kind == ExprKind::kName) s->calls.push_back(e);
  for (const auto& x : e->items) collect(x.get(), s);
  for (const auto& op : e->ops) collect(op.second.get(), s);
  collect(e->a.get(), s);
  collect(e->b.get(), s);
  collect(e->c.get(), s);
  for (const auto& x : e->args.pos) collect(x.get(), s);
  for (const auto& kv : e->args.kw) collect(kv.second.get(), s);
  collect(e->args.star.get(), s);
  collect(e->args.star_star.get(), s);
}

void collect(const Body& body, Sites* s) {
  for (const auto& st : body) {
    if (st->target.kind == Target::Kind::kName) {
      if (st->kind == StmtKind::kSet) s->sets.emplace_back(st->target.name, st->expr.get());
      if (st->kind == StmtKind::kFor) s->fors.emplace_back(st->target.name, st->expr.get());
    }
    for (const auto& [target, value] : st->with_vars)
      if (target.kind == Target::Kind::kName) s->sets.emplace_back(target.name, value.get());
    if (st->kind == StmtKind::kMacro) {
      std::vector<std::string>& params = s->macros[st->text];
      for (const auto& p : st->params) params.push_back(p.name);
    }
    collect(st->expr.get(), s);
    collect(st->filter.get(), s);
    for (const auto& p : st->params) collect(p.default_value.get(), s);
    for (const auto& wv : st->with_vars) collect(wv.second.get(), s);
    collect(st->body, s);
    collect(st->else_body, s);
  }
}

// The value under filters, tests and slices: `messages[1:]|list` is still the messages,
// `message.content|selectattr(...)` still the content.
const Expr* strip(const Expr* e) {
  while (e) {
    if (e->kind == ExprKind::kFilter || e->kind == ExprKind::kTest)
      e = e->a.get();
    else if (e->kind == ExprKind::kGetitem && e->b && e->b->kind == ExprKind::kSlice)
      e = e->a.get();
    else
      break;
  }
  return e;
}

bool names_one_of(const Expr* e, const std::set<std::string>& names) {
  return e && e->kind == ExprKind::kName && names.count(e->name);
}

bool is_const_string(const Expr* e, const char* s) {
  return e && e->kind == ExprKind::kConst && e->value.is_string() && e->value.str() == s;
}

// `m.content`, `m['content']` or `m.get('content')` for a message `m`.
bool is_content_access(const Expr* e, const std::set<std::string>& message) {
  if (!e) return false;
  switch (e->kind) {
    case ExprKind::kGetattr:
      return e->name == "content" && names_one_of(e->a.get(), message);
    case ExprKind::kGetitem:
      return is_const_string(e->b.get(), "content") && names_one_of(e->a.get(), message);
    case ExprKind::kCall: {
      const Expr* f = e->a.get();
      return f && f->kind == ExprKind::kGetattr && f->name == "get" &&
             names_one_of(f->a.get(), message) && !e->args.pos.empty() &&
             is_const_string(e->args.pos[0].get(), "content");
    }
    default:
      return false;
  }
}

Role role_of(const Expr* e, const Bindings& b) {
  e = strip(e);
  if (!e) return Role::kNone;
  if (names_one_of(e, b.messages)) return Role::kMessages;
  if (names_one_of(e, b.message)) return Role::kMessage;
  if (names_one_of(e, b.content) || is_content_access(e, b.message)) return Role::kContent;
  // messages[0], messages[loop.index0 - 1]: one message.
  if (e->kind == ExprKind::kGetitem && names_one_of(strip(e->a.get()), b.messages))
    return Role::kMessage;
  return Role::kNone;
}

}  // namespace

bool iterates_message_content(const Body& body) {
  Sites sites;
  collect(body, &sites);
  Bindings b;
  // Each pass can only add names, and there are finitely many: this ends.
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& [name, value] : sites.sets) changed |= b.add(role_of(value, b), name);
    for (const auto& [name, iterable] : sites.fors)
      if (role_of(iterable, b) == Role::kMessages) changed |= b.add(Role::kMessage, name);
    for (const Expr* call : sites.calls) {
      auto macro = sites.macros.find(call->a->name);
      if (macro == sites.macros.end()) continue;
      const std::vector<std::string>& params = macro->second;
      for (size_t i = 0; i < call->args.pos.size() && i < params.size(); ++i)
        changed |= b.add(role_of(call->args.pos[i].get(), b), params[i]);
      for (const auto& [name, value] : call->args.kw)
        for (const std::string& p : params)
          if (p == name) changed |= b.add(role_of(value.get(), b), p);
    }
  }
  for (const auto& [name, iterable] : sites.fors)
    if (role_of(iterable, b) == Role::kContent) return true;
  return false;
}

}  // namespace pagoda::jinja
