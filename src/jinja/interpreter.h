// Renders a parsed template: scopes as jinja2 sets them up (a fresh scope per loop
// iteration and per macro call, `if` opens none), expressions with Python semantics, and
// attribute access as jinja2's ImmutableSandboxedEnvironment allows it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "jinja/ast.h"
#include "jinja/value.h"
#include "pagoda/chat_template.h"

namespace pagoda::jinja {

// The interpreter's name for the public bounds (pagoda/chat_template.h).
using Limits = ChatTemplateLimits;

// A scope holds few names (a loop variable, `loop`, a macro's parameters), so a flat list
// is cheaper to build per iteration than a hash map.
struct Scope {
  std::vector<std::pair<std::string, Value>> vars;
  std::shared_ptr<Scope> parent;
  const std::vector<std::string>* declared = nullptr;  // see frame_stores
  bool declares(const std::string& name) const {
    if (declared)
      for (const auto& n : *declared)
        if (n == name) return true;
    return false;
  }
  const Value* find(const std::string& name) const {
    for (const auto& [n, v] : vars)
      if (n == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [n, x] : vars)
      if (n == name) {
        x = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  }
};

// The state shared by one loop's iterations (for loop.changed) and its position.
struct LoopState {
  std::shared_ptr<const std::vector<Value>> items;
  size_t index = 0;
};

class Interpreter {
 public:
  Interpreter(const DictObj& context, const Limits& limits);
  // `declared`: frame_stores(body), the names the template's top level assigns.
  std::string render(const Body& body, const std::vector<std::string>& declared);

  // Services for the builtins.
  Value call(const Value& callee, CallArgs& args);
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  // jinja2's attribute getter for map/sort/groupby(attribute="a.b.0").
  Value get_path(const Value& obj, const Value& path);
  Value filter(const std::string& name, const Value& v, CallArgs& args);
  bool test(const std::string& name, const Value& v, CallArgs& args);
  void step();
  void check_size(size_t bytes) const;
  const Limits& limits() const { return limits_; }
  int current_line() const { return line_; }

  // Macro and caller invocation (the callables hold the definition and its scope).
  Value call_macro(const Stmt& def, const std::shared_ptr<Scope>& closure, CallArgs& args,
                   const std::string& name, bool uses_varargs, bool uses_kwargs, bool uses_caller);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  void exec(const Body& body, const std::shared_ptr<Scope>& scope);
  void exec_stmt(const Stmt& s, const std::shared_ptr<Scope>& scope);
  void exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope);
  std::string capture(const Body& body, const std::shared_ptr<Scope>& scope);
  std::shared_ptr<Scope> child(const std::shared_ptr<Scope>& parent, const Stmt& frame);
  void assign(const Target& t, const Value& v, const std::shared_ptr<Scope>& scope);
  void emit(const std::string& s);

  Value eval(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value eval_inner(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value lookup(const std::string& name, const std::shared_ptr<Scope>& scope);
  void eval_args(const CallArgsExpr& in, const std::shared_ptr<Scope>& scope, CallArgs* out);
  Value apply_filter_chain(const Expr& f, const Value& input, const std::shared_ptr<Scope>& s);
  Value binary(const std::string& op, const Value& a, const Value& b);
  bool compare(const std::string& op, const Value& a, const Value& b);
  Value slice(const Value& obj, const Expr& sl, const std::shared_ptr<Scope>& scope);

  // Reference cycles a rendering can build, broken when it ends (render()): a macro (or a
  // {% call %} block's caller) holds the scope it was defined in, which holds the macro;
  // a namespace can be given itself, or a macro closing over it, as an attribute. Python
  // collects such cycles; shared_ptr would leak them.
  void remember_closure(const std::shared_ptr<Scope>& scope);
  void remember_namespace(const Value& ns);
  void break_cycles();
  std::vector<std::shared_ptr<Scope>> closures_;
  std::vector<Value> namespaces_;
  std::unordered_set<const void*> remembered_;

  const DictObj& context_;
  Limits limits_;
  std::string* out_ = nullptr;
  std::string* top_out_ = nullptr;  // the rendering's output; out_ differs while capturing
  Flow flow_ = Flow::kNormal;
  int64_t steps_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  int line_ = 0;
};

}  // namespace pagoda::jinja
