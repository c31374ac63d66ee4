#include "jinja/interpreter.h"

#include <cmath>

#include "jinja/alloc_budget.h"
#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/pystr.h"
#include "tokenizer/unicode.h"

namespace pagoda::jinja {
namespace {

// jinja2's undefined for a failed lookup: "'dict object' has no attribute 'x'".
Value missing_attr(const Value& obj, const std::string& name) {
  std::string owner = obj.is_none() ? "None" : std::string(type_name(obj)) + " object";
  return Value::undefined("'" + owner + "' has no attribute '" + name + "'");
}

Value missing_item(const Value& obj, const Value& key) {
  std::string owner = obj.is_none() ? "None" : std::string(type_name(obj)) + " object";
  return Value::undefined("'" + owner + "' has no element " + repr(key));
}

Value unsafe_attr(const Value& obj, const std::string& name) {
  return Value::undefined(
      "access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.", true);
}

bool names_used(const Expr* e, const char* name);
bool names_used(const Body& body, const char* name);

bool names_used_args(const CallArgsExpr& a, const char* name) {
  for (const auto& x : a.pos)
    if (names_used(x.get(), name)) return true;
  for (const auto& [k, x] : a.kw)
    if (names_used(x.get(), name)) return true;
  return names_used(a.star.get(), name) || names_used(a.star_star.get(), name);
}

bool names_used(const Expr* e, const char* name) {
  if (!e) return false;
  if (e->kind == ExprKind::kName && e->name == name) return true;
  for (const auto& x : e->items)
    if (names_used(x.get(), name)) return true;
  for (const auto& [op, x] : e->ops)
    if (names_used(x.get(), name)) return true;
  return names_used(e->a.get(), name) || names_used(e->b.get(), name) ||
         names_used(e->c.get(), name) || names_used_args(e->args, name);
}

bool names_used(const Body& body, const char* name) {
  for (const auto& s : body) {
    if (names_used(s->expr.get(), name) || names_used(s->filter.get(), name) ||
        names_used(s->body, name) || names_used(s->else_body, name))
      return true;
    for (const auto& p : s->params)
      if (names_used(p.default_value.get(), name)) return true;
    for (const auto& [t, x] : s->with_vars)
      if (names_used(x.get(), name)) return true;
  }
  return false;
}

class MacroFn : public CallableObj {
 public:
  MacroFn(const Stmt& def, std::shared_ptr<Scope> closure, const std::string& name)
      : CallableObj(name),
        def_(def),
        closure_(std::move(closure)),
        varargs_(names_used(def.body, "varargs")),
        kwargs_(names_used(def.body, "kwargs")),
        caller_(names_used(def.body, "caller")) {
    is_macro = true;
  }
  Value call(Interpreter& in, CallArgs& args) const override {
    return in.call_macro(def_, closure_, args, name, varargs_, kwargs_, caller_);
  }

 private:
  const Stmt& def_;
  std::shared_ptr<Scope> closure_;
  bool varargs_, kwargs_, caller_;
};

// The `caller` a {% call %} block hands its macro.
class CallerFn : public CallableObj {
 public:
  CallerFn(const Stmt& block, std::shared_ptr<Scope> closure)
      : CallableObj("caller"),
        block_(block),
        closure_(std::move(closure)),
        varargs_(names_used(block.body, "varargs")),
        kwargs_(names_used(block.body, "kwargs")) {}
  Value call(Interpreter& in, CallArgs& args) const override {
    return in.call_macro(block_, closure_, args, "caller", varargs_, kwargs_, false);
  }

 private:
  const Stmt& block_;
  std::shared_ptr<Scope> closure_;
  bool varargs_, kwargs_;
};

// A scope a closure keeps alive: the Scope, its few variables and its entry in remembered_.
constexpr size_t kScopeBytes = 4 * kObjectBytes;

bool checked_add(int64_t a, int64_t b, int64_t* r) {
  return !__builtin_add_overflow(a, b, r);
}

[[noreturn]] void overflow() {
  throw TemplateError(ErrorKind::kUnsupported,
                      "integer overflow: Pagoda's template integers are 64-bit");
}

// CPython's float divmod (floatobject.c), so // and % agree with Python to the last bit.
std::pair<double, double> py_float_divmod(double vx, double wx) {
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  double floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
  return {floordiv, mod};
}

[[noreturn]] void bad_operands(const std::string& op, const Value& a, const Value& b) {
  render_error("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" +
               type_name(b) + "'");
}

Value loop_attr(const LoopState& st, const std::string& name) {
  const auto& items = *st.items;
  int64_t n = static_cast<int64_t>(items.size());
  int64_t i = static_cast<int64_t>(st.index);
  if (name == "index") return Value::integer(i + 1);
  if (name == "index0") return Value::integer(i);
  if (name == "revindex") return Value::integer(n - i);
  if (name == "revindex0") return Value::integer(n - i - 1);
  if (name == "first") return Value::boolean(i == 0);
  if (name == "last") return Value::boolean(i == n - 1);
  if (name == "length") return Value::integer(n);
  if (name == "depth") return Value::integer(1);
  if (name == "depth0") return Value::integer(0);
  if (name == "previtem")
    return i > 0 ? items[static_cast<size_t>(i - 1)]
                 : Value::undefined("there is no previous item");
  if (name == "nextitem")
    return i + 1 < n ? items[static_cast<size_t>(i + 1)]
                     : Value::undefined("there is no next item");
  return Value::undefined("'LoopContext object' has no attribute '" + name + "'");
}

}  // namespace

Interpreter::Interpreter(const DictObj& context, const Limits& limits)
    : context_(context), limits_(limits) {}

std::string Interpreter::render(const Body& body, const std::vector<std::string>& declared) {
  AllocBudget budget(limits_.max_alloc);
  std::string out;
  out_ = &out;
  top_out_ = &out;
  auto root = std::make_shared<Scope>();
  root->declared = &declared;
  remember_closure(root);
  struct Guard {  // errors unwind through render_error: break the cycles either way
    Interpreter* in;
    ~Guard() { in->break_cycles(); }
  } guard{this};
  exec(body, root);
  return out;
}

// Charged: a macro defined in a loop keeps every iteration's scope alive until the end.
void Interpreter::remember_closure(const std::shared_ptr<Scope>& scope) {
  if (remembered_.count(scope.get())) return;
  charge_bytes(kScopeBytes);
  remembered_.insert(scope.get());
  closures_.push_back(scope);
}

void Interpreter::remember_namespace(const Value& ns) {
  if (remembered_.count(&ns.ns())) return;
  charge_bytes(kScopeBytes);
  remembered_.insert(&ns.ns());
  namespaces_.push_back(ns);
}

void Interpreter::break_cycles() {
  for (const auto& s : closures_) {
    s->vars.clear();
    s->parent.reset();
  }
  for (const Value& ns : namespaces_) ns.ns().attrs.clear();
  closures_.clear();
  namespaces_.clear();
  remembered_.clear();
}

void Interpreter::step() {
  if (++steps_ > limits_.max_steps)
    render_error("the template ran past its limit of " + std::to_string(limits_.max_steps) +
                 " evaluation steps");
}

void Interpreter::check_size(size_t bytes) const {
  if (bytes > limits_.max_output)
    render_error("the template built a string of more than " + std::to_string(limits_.max_output) +
                 " bytes");
}

void Interpreter::emit(const std::string& s) {
  // What a macro, a set block or a filter block captures becomes a string value.
  if (out_ != top_out_) charge_bytes(s.size());
  out_->append(s);
  check_size(out_->size());
}

void Interpreter::exec(const Body& body, const std::shared_ptr<Scope>& scope) {
  for (const auto& s : body) {
    exec_stmt(*s, scope);
    if (flow_ != Flow::kNormal) return;
  }
}

std::string Interpreter::capture(const Body& body, const std::shared_ptr<Scope>& scope) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  try {
    exec(body, scope);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buf;
}

void Interpreter::exec_stmt(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  step();
  line_ = s.line;
  struct Depth {
    Depth(Interpreter* in) : in_(in) {
      if (++in_->depth_ > in_->limits_.max_depth)
        render_error("the template nests or recurses deeper than " +
                     std::to_string(in_->limits_.max_depth) + " levels");
    }
    ~Depth() { --in_->depth_; }
    Interpreter* in_;
  } depth(this);
  switch (s.kind) {
    case StmtKind::kText:
      emit(s.text);
      return;
    case StmtKind::kPrint: {
      Value v = eval(*s.expr, scope);
      emit(to_str(v));
      return;
    }
    case StmtKind::kIf:
      if (truthy(eval(*s.expr, scope)))
        exec(s.body, scope);
      else
        exec(s.else_body, scope);
      return;
    case StmtKind::kFor:
      exec_for(s, scope);
      return;
    case StmtKind::kSet:
      assign(s.target, eval(*s.expr, scope), scope);
      return;
    case StmtKind::kSetBlock: {
      charge_string(0);  // the bytes, as they are captured
      Value v = Value::string(capture(s.body, child(scope, s)));
      if (s.filter) v = apply_filter_chain(*s.filter, v, scope);
      assign(s.target, v, scope);
      return;
    }
    case StmtKind::kMacro:
      remember_closure(scope);
      scope->set(s.text, Value::callable(std::make_shared<MacroFn>(s, scope, s.text)));
      return;
    case StmtKind::kCallBlock: {
      const Expr& call = *s.expr;
      Value callee = eval(*call.a, scope);
      CallArgs args;
      eval_args(call.args, scope, &args);
      remember_closure(scope);
      args.kw.emplace_back("caller", Value::callable(std::make_shared<CallerFn>(s, scope)));
      emit(to_str(this->call(callee, args)));
      return;
    }
    case StmtKind::kFilterBlock: {
      charge_string(0);
      Value body = Value::string(capture(s.body, child(scope, s)));
      emit(to_str(apply_filter_chain(*s.filter, body, scope)));
      return;
    }
    case StmtKind::kWith: {
      auto inner = child(scope, s);
      for (const auto& [target, expr] : s.with_vars) assign(target, eval(*expr, scope), inner);
      exec(s.body, inner);
      return;
    }
    case StmtKind::kBreak:
    case StmtKind::kContinue:
      if (loop_depth_ == 0)
        throw TemplateError(ErrorKind::kSyntax,
                            std::string("'") + (s.kind == StmtKind::kBreak ? "break" : "continue") +
                                "' outside of a loop",
                            s.line);
      flow_ = s.kind == StmtKind::kBreak ? Flow::kBreak : Flow::kContinue;
      return;
    case StmtKind::kGeneration:
      exec(s.body, scope);
      return;
  }
}

void Interpreter::exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  Value iterable = eval(*s.expr, scope);
  if (iterable.is_undefined() && iterable.undef()->security) fail_undefined(iterable);
  std::shared_ptr<const std::vector<Value>> items = iterate_shared(iterable);
  if (s.filter) {
    auto kept = std::make_shared<std::vector<Value>>();
    for (const Value& item : *items) {
      step();
      auto fs = std::make_shared<Scope>();
      fs->parent = scope;
      assign(s.target, item, fs);
      if (truthy(eval(*s.filter, fs))) {
        charge_bytes(kItemBytes);
        kept->push_back(item);
      }
    }
    items = std::move(kept);
  }
  if (items->empty()) {
    exec(s.else_body, scope);
    return;
  }
  auto state = std::make_shared<LoopState>();
  state->items = items;
  auto loop_ns = std::make_shared<NamespaceObj>();
  loop_ns->loop = state;
  Value loop_value = Value::ns(loop_ns);
  ++loop_depth_;
  for (size_t i = 0; i < items->size(); ++i) {
    step();
    state->index = i;
    auto inner = child(scope, s);
    inner->set("loop", loop_value);
    assign(s.target, (*items)[i], inner);
    exec(s.body, inner);
    if (flow_ == Flow::kBreak) {
      flow_ = Flow::kNormal;
      break;
    }
    flow_ = Flow::kNormal;
  }
  --loop_depth_;
}

void Interpreter::assign(const Target& t, const Value& v, const std::shared_ptr<Scope>& scope) {
  switch (t.kind) {
    case Target::Kind::kName:
      scope->set(t.name, v);
      return;
    case Target::Kind::kNsAttr: {
      Value ns = lookup(t.name, scope);
      if (!ns.is_namespace() || ns.ns().loop)
        render_error("cannot assign attribute on non-namespace object");
      remember_namespace(ns);
      ns.ns().attrs.set(Value::string(t.attr), v);
      return;
    }
    case Target::Kind::kTuple: {
      if (v.is_undefined()) fail_undefined(v);
      std::vector<Value> parts = iterate(v);
      if (parts.size() != t.items.size()) {
        if (parts.size() > t.items.size())
          render_error("too many values to unpack (expected " + std::to_string(t.items.size()) +
                       ")");
        render_error("not enough values to unpack (expected " + std::to_string(t.items.size()) +
                     ", got " + std::to_string(parts.size()) + ")");
      }
      for (size_t i = 0; i < parts.size(); ++i) assign(t.items[i], parts[i], scope);
      return;
    }
  }
}

std::shared_ptr<Scope> Interpreter::child(const std::shared_ptr<Scope>& parent, const Stmt& frame) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  s->declared = &frame.declared;
  return s;
}

Value Interpreter::lookup(const std::string& name, const std::shared_ptr<Scope>& scope) {
  if (const Value* v = scope->find(name)) return *v;
  // An enclosing frame that assigns the name owns it, assigned yet or not (jinja2 binds
  // it to that frame's local); the current frame reads through to its parents.
  for (const Scope* p = scope->parent.get(); p; p = p->parent.get()) {
    if (const Value* v = p->find(name)) return *v;
    if (p->declares(name)) return Value::undefined("'" + name + "' is undefined");
  }
  if (const Value* v = context_.find(Value::string(name))) return *v;
  Value g;
  if (find_global(name, &g)) return g;
  return Value::undefined("'" + name + "' is undefined");
}

Value Interpreter::call_macro(const Stmt& def, const std::shared_ptr<Scope>& closure,
                              CallArgs& args, const std::string& name, bool uses_varargs,
                              bool uses_kwargs, bool uses_caller) {
  auto scope = child(closure, def);
  const auto& params = def.params;
  if (args.pos.size() > params.size() && !uses_varargs)
    render_error("macro '" + name + "' takes not more than " + std::to_string(params.size()) +
                 " argument(s)");
  std::vector<bool> bound(params.size(), false);
  for (size_t i = 0; i < args.pos.size() && i < params.size(); ++i) {
    scope->set(params[i].name, args.pos[i]);
    bound[i] = true;
  }
  std::vector<Value> extra;
  if (args.pos.size() > params.size()) charge_list(args.pos.size() - params.size());
  for (size_t i = params.size(); i < args.pos.size(); ++i) extra.push_back(args.pos[i]);
  DictObj extra_kw;
  bool has_caller = false;
  for (auto& [k, v] : args.kw) {
    bool found = false;
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].name == k) {
        if (bound[i])
          render_error("macro '" + name + "' got multiple values for argument '" + k + "'");
        scope->set(k, v);
        bound[i] = true;
        found = true;
      }
    if (found) continue;
    if (k == "caller") {
      if (!uses_caller)
        render_error("macro '" + name +
                     "' was invoked with two values for the special caller argument. This is "
                     "most likely a bug.");
      scope->set("caller", v);
      has_caller = true;
    } else if (uses_kwargs) {
      extra_kw.set(Value::string(k), v);
    } else {
      render_error("macro '" + name + "' takes no keyword argument '" + k + "'");
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (bound[i]) continue;
    scope->set(params[i].name,
               params[i].default_value
                   ? eval(*params[i].default_value, scope)
                   : Value::undefined("parameter '" + params[i].name + "' was not provided"));
  }
  scope->set("varargs", Value::list(std::move(extra), SeqKind::kTuple));
  scope->set("kwargs", Value::dict(std::move(extra_kw)));
  if (!has_caller && !scope->find("caller"))
    scope->set("caller", Value::undefined("No caller defined"));
  int saved_loops = loop_depth_;
  loop_depth_ = 0;
  charge_string(0);  // the bytes, as they are captured (emit)
  std::string out;
  try {
    out = capture(def.body, scope);
  } catch (...) {
    loop_depth_ = saved_loops;
    throw;
  }
  loop_depth_ = saved_loops;
  flow_ = Flow::kNormal;
  return Value::string(std::move(out));
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_callable())
    render_error(std::string("'") + type_name(callee) + "' object is not callable");
  step();
  return callee.fn().call(*this, args);
}

void Interpreter::eval_args(const CallArgsExpr& in, const std::shared_ptr<Scope>& scope,
                            CallArgs* out) {
  for (const auto& e : in.pos) out->pos.push_back(eval(*e, scope));
  if (in.star) {
    Value v = eval(*in.star, scope);
    if (v.is_undefined()) fail_undefined(v);
    // Charged: the arguments live while the call runs, a recursive macro's at every level.
    std::vector<Value> xs = iterate(v);
    charge_list(xs.size());
    for (Value& x : xs) out->pos.push_back(std::move(x));
  }
  for (const auto& [k, e] : in.kw) out->kw.emplace_back(k, eval(*e, scope));
  if (in.star_star) {
    Value v = eval(*in.star_star, scope);
    if (!v.is_dict()) render_error("argument after ** must be a mapping");
    for (const auto& [k, x] : v.dict().items) {
      if (!k.is_string()) render_error("keywords must be strings");
      charge_bytes(kEntryBytes + k.str().size());
      out->kw.emplace_back(k.str(), x);
    }
  }
}

Value Interpreter::filter(const std::string& name, const Value& v, CallArgs& args) {
  FilterFn f = find_filter(name);
  if (!f) {
    if (is_unsupported_filter(name))
      unsupported_error("the filter '" + name + "' is not supported");
    render_error("No filter named '" + name + "'.");
  }
  step();
  return f(*this, v, args);
}

bool Interpreter::test(const std::string& name, const Value& v, CallArgs& args) {
  TestFn t = find_test(name);
  if (!t) {
    if (is_unsupported_test(name)) unsupported_error("the test '" + name + "' is not supported");
    render_error("No test named '" + name + "'.");
  }
  size_t given = args.pos.size() + args.kw.size();
  size_t want = static_cast<size_t>(test_arity(name));
  if (given != want && !(name == "filter" || name == "test"))
    render_error("test '" + name + "' takes " + std::to_string(want) + " argument(s) but " +
                 std::to_string(given) + " were given");
  step();
  return t(*this, v, args);
}

Value Interpreter::apply_filter_chain(const Expr& f, const Value& input,
                                      const std::shared_ptr<Scope>& scope) {
  Value v = f.a ? apply_filter_chain(*f.a, input, scope) : input;
  CallArgs args;
  eval_args(f.args, scope, &args);
  return filter(f.name, v, args);
}

Value Interpreter::getattr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (!name.empty() && name[0] == '_') return unsafe_attr(obj, name);
  switch (obj.kind()) {
    case Kind::kNamespace: {
      const NamespaceObj& ns = obj.ns();
      if (ns.loop) {
        if (name == "cycle" || name == "changed") {
          auto state = ns.loop;
          auto changed_last = std::make_shared<std::vector<Value>>();
          auto changed_set = std::make_shared<bool>(false);
          if (name == "cycle")
            return make_function("loop.cycle", [state](Interpreter&, CallArgs& a) {
              if (a.pos.empty()) render_error("no items for cycling given");
              return a.pos[state->index % a.pos.size()];
            });
          // loop.changed compares with the previous call's arguments in this loop.
          auto& holder = const_cast<NamespaceObj&>(ns).attrs;
          const Value* existing = holder.find(Value::string("changed"));
          if (existing) return *existing;
          Value fn =
              make_function("loop.changed", [changed_last, changed_set](Interpreter&, CallArgs& a) {
                bool differ = !*changed_set || a.pos.size() != changed_last->size();
                for (size_t i = 0; !differ && i < a.pos.size(); ++i)
                  differ = !equals(a.pos[i], (*changed_last)[i]);
                *changed_last = a.pos;
                *changed_set = true;
                return Value::boolean(differ);
              });
          holder.set(Value::string("changed"), fn);
          return fn;
        }
        return loop_attr(*ns.loop, name);
      }
      if (const Value* v = ns.attrs.find(Value::string(name))) return *v;
      return missing_attr(obj, name);
    }
    case Kind::kDict:
    case Kind::kString:
    case Kind::kList: {
      if (auto m = find_method(obj, name)) return *m;
      if (obj.is_dict())
        if (const Value* v = obj.dict().find(Value::string(name))) return *v;
      return missing_attr(obj, name);
    }
    default:
      if (auto m = find_method(obj, name)) return *m;
      return missing_attr(obj, name);
  }
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  switch (obj.kind()) {
    case Kind::kDict: {
      if (key.is_list() && key.seq_kind() != SeqKind::kTuple) break;  // unhashable
      if (key.is_dict()) break;
      if (const Value* v = obj.dict().find(key)) return *v;
      break;
    }
    case Kind::kList: {
      if (obj.seq_kind() != SeqKind::kList && obj.seq_kind() != SeqKind::kTuple) break;
      if (!(key.is_int() || key.is_bool())) break;
      int64_t n = static_cast<int64_t>(obj.items().size());
      int64_t i = key.as_int();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return missing_item(obj, key);
      return obj.items()[static_cast<size_t>(i)];
    }
    case Kind::kString: {
      if (!(key.is_int() || key.is_bool())) break;
      const StrObj& so = obj.str_obj();
      int64_t i = key.as_int();
      if (so.is_ascii()) {
        int64_t n = static_cast<int64_t>(so.s.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return missing_item(obj, key);
        charge_string(1);
        return Value::string(so.s.substr(static_cast<size_t>(i), 1), obj.is_safe());
      }
      std::vector<uint32_t> cps = to_code_points(so.s);
      int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return missing_item(obj, key);
      charge_string(4);
      return Value::string(
          from_code_points(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1), obj.is_safe());
    }
    default:
      break;
  }
  // jinja2 falls back to the attribute of that name for string keys.
  if (key.is_string()) {
    if (!key.str().empty() && key.str()[0] == '_') return unsafe_attr(obj, key.str());
    if (obj.is_namespace()) return getattr(obj, key.str());
    if (auto m = find_method(obj, key.str())) return *m;
    return missing_attr(obj, key.str());
  }
  return missing_item(obj, key);
}

Value Interpreter::get_path(const Value& obj, const Value& path) {
  if (!path.is_string()) return getitem(obj, path);
  Value cur = obj;
  size_t start = 0;
  const std::string& p = path.str();
  while (true) {
    size_t dot = p.find('.', start);
    std::string part = p.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    cur = digits ? getitem(cur, Value::integer(std::atoll(part.c_str())))
                 : getitem(cur, Value::string(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

Value Interpreter::slice(const Value& obj, const Expr& sl, const std::shared_ptr<Scope>& scope) {
  auto bound = [&](const ExprPtr& e, bool* given) -> int64_t {
    *given = false;
    if (!e) return 0;
    Value v = eval(*e, scope);
    if (v.is_none()) return 0;
    if (!(v.is_int() || v.is_bool()))
      render_error("slice indices must be integers or None or have an __index__ method");
    *given = true;
    return v.as_int();
  };
  bool has_start, has_stop, has_step;
  int64_t start = bound(sl.a, &has_start);
  int64_t stop = bound(sl.b, &has_stop);
  int64_t step = bound(sl.c, &has_step);
  if (!has_step) step = 1;
  if (step == 0) render_error("slice step cannot be zero");
  // jinja2 slices with Python's own subscript (not the sandbox's getitem): what cannot be
  // sliced raises.
  if (obj.is_undefined()) fail_undefined(obj);
  bool is_str = obj.is_string();
  bool is_seq =
      obj.is_list() && (obj.seq_kind() == SeqKind::kList || obj.seq_kind() == SeqKind::kTuple);
  if (obj.is_dict()) render_error("unhashable type: 'slice'");
  if (!is_str && !is_seq)
    render_error(std::string("'") + type_name(obj) + "' object is not subscriptable");
  const bool ascii = is_str && obj.str_obj().is_ascii();
  std::vector<uint32_t> cps;
  if (is_str && !ascii) cps = to_code_points(obj.str());
  const int64_t n = static_cast<int64_t>(ascii    ? obj.str().size()
                                         : is_str ? cps.size()
                                                  : obj.items().size());
  // Python's slice.indices().
  auto clamp = [&](int64_t v, bool given, bool is_start) -> int64_t {
    if (!given) {
      if (step > 0) return is_start ? 0 : n;
      return is_start ? n - 1 : -1;
    }
    if (v < 0) {
      v += n;
      if (v < 0) v = step > 0 ? 0 : -1;
    } else if (v >= n) {
      v = step > 0 ? n : n - 1;
    }
    return v;
  };
  const int64_t b = clamp(start, has_start, true), e = clamp(stop, has_stop, false);
  // The slice's length first, so the result is charged before it is built.
  const uint64_t stride = step > 0 ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
  const uint64_t span = static_cast<uint64_t>(step > 0 ? e - b : b - e);
  const size_t count =
      (step > 0 ? b < e : b > e) ? static_cast<size_t>((span - 1) / stride + 1) : 0;
  auto at = [&](size_t k) { return static_cast<size_t>(b + static_cast<int64_t>(k) * step); };
  if (is_str) {
    auto utf8_size = [](uint32_t cp) -> size_t {
      return cp <= 0x7F ? 1 : cp <= 0x7FF ? 2 : cp <= 0xFFFF ? 3 : 4;
    };
    size_t bytes = count;
    if (!ascii) {
      bytes = 0;
      for (size_t k = 0; k < count; ++k) bytes += utf8_size(cps[at(k)]);
    }
    charge_string(bytes);
    std::string out;
    out.reserve(bytes);
    for (size_t k = 0; k < count; ++k) {
      if (ascii)
        out += obj.str()[at(k)];
      else
        unicode::append_utf8(&out, cps[at(k)]);
    }
    return Value::string(std::move(out), obj.is_safe());
  }
  charge_list(count);
  std::vector<Value> out;
  out.reserve(count);
  for (size_t k = 0; k < count; ++k) out.push_back(obj.items()[at(k)]);
  return Value::list(std::move(out), obj.seq_kind());
}

namespace {

// The arithmetic operators with more than one kind of operand, as Python has them.
Value binary_add(const Interpreter& in, const Value& a, const Value& b) {
  const bool nums = a.is_number() && b.is_number();
  const bool floats = nums && (a.is_float() || b.is_float());
  if (nums) {
    if (floats) return Value::number(a.as_float() + b.as_float());
    int64_t r;
    if (!checked_add(a.as_int(), b.as_int(), &r)) overflow();
    return Value::integer(r);
  }
  if (a.is_string() && b.is_string()) {
    in.check_size(a.str().size() + b.str().size());
    if (a.is_safe() || b.is_safe()) {
      // markupsafe: Markup + str escapes the str.
      std::string l = a.is_safe() ? a.str() : html_escape(a.str());
      std::string r = b.is_safe() ? b.str() : html_escape(b.str());
      in.check_size(l.size() + r.size());
      charge_string(l.size() + r.size());
      return Value::string(l + r, true);
    }
    charge_string(a.str().size() + b.str().size());
    return Value::string(a.str() + b.str());
  }
  if (a.is_list() && b.is_list() && a.seq_kind() == b.seq_kind() &&
      (a.seq_kind() == SeqKind::kList || a.seq_kind() == SeqKind::kTuple)) {
    charge_list(a.items().size() + b.items().size());
    std::vector<Value> items;
    items.reserve(a.items().size() + b.items().size());
    items.insert(items.end(), a.items().begin(), a.items().end());
    items.insert(items.end(), b.items().begin(), b.items().end());
    return Value::list(std::move(items), a.seq_kind());
  }
  if (a.is_string())
    render_error(std::string("can only concatenate str (not \"") + type_name(b) + "\") to str");
  if (a.is_list() && a.seq_kind() == SeqKind::kList)
    render_error(std::string("can only concatenate list (not \"") + type_name(b) + "\") to list");
  bad_operands("+", a, b);
}

Value binary_multiply(const Interpreter& in, const Value& a, const Value& b) {
  const bool nums = a.is_number() && b.is_number();
  const bool floats = nums && (a.is_float() || b.is_float());
  if (nums) {
    if (floats) return Value::number(a.as_float() * b.as_float());
    int64_t r;
    if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) overflow();
    return Value::integer(r);
  }
  const Value* seq = nullptr;
  const Value* count = nullptr;
  if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) seq = &a, count = &b;
  if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) seq = &b, count = &a;
  if (!seq ||
      (seq->is_list() && seq->seq_kind() != SeqKind::kList && seq->seq_kind() != SeqKind::kTuple)) {
    if (a.is_string() || b.is_string())
      render_error(std::string("can't multiply sequence by non-int of type '") +
                   type_name(a.is_string() ? b : a) + "'");
    bad_operands("*", a, b);
  }
  size_t n = static_cast<size_t>(std::max<int64_t>(0, count->as_int()));
  // '' * 10**18 is '' at once, not after 10**18 empty appends.
  if (seq->is_string() ? seq->str().empty() : seq->items().empty()) n = 0;
  if (seq->is_string()) {
    const size_t bytes = saturating_mul(n, seq->str().size());
    charge_string(bytes);
    in.check_size(bytes);
    std::string out;
    out.reserve(bytes);
    for (size_t i = 0; i < n; ++i) out += seq->str();
    return Value::string(std::move(out), seq->is_safe());
  }
  const size_t items = saturating_mul(n, seq->items().size());
  charge_list(items);
  std::vector<Value> out;
  out.reserve(items);
  for (size_t i = 0; i < n; ++i) out.insert(out.end(), seq->items().begin(), seq->items().end());
  return Value::list(std::move(out), seq->seq_kind());
}

Value binary_modulo(const Interpreter& in, const Value& a, const Value& b) {
  const bool nums = a.is_number() && b.is_number();
  const bool floats = nums && (a.is_float() || b.is_float());
  if (a.is_string()) {
    // Markup % args escapes the arguments.
    Value args = b;
    if (a.is_safe()) {
      auto esc = [](const Value& x) {
        if (x.is_number() || (x.is_string() && x.is_safe())) return x;
        return Value::string(html_escape(to_str(x)), true);
      };
      if (b.is_list() && b.seq_kind() == SeqKind::kTuple) {
        charge_list(b.items().size());
        std::vector<Value> items;
        for (const Value& x : b.items()) items.push_back(esc(x));
        args = Value::list(std::move(items), SeqKind::kTuple);
      } else if (!b.is_dict()) {
        args = esc(b);
      }
    }
    std::string r = percent_format(a.str(), args);
    in.check_size(r.size());
    return Value::string(std::move(r), a.is_safe());
  }
  if (!nums) bad_operands("%", a, b);
  if (floats) {
    if (b.as_float() == 0) render_error("float modulo");
    return Value::number(py_float_divmod(a.as_float(), b.as_float()).second);
  }
  int64_t x = a.as_int(), y = b.as_int();
  if (y == 0) render_error("integer division or modulo by zero");
  if (y == -1) return Value::integer(0);
  int64_t m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  return Value::integer(m);
}

}  // namespace

Value Interpreter::binary(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  // str % x is Python's own formatting, which takes an undefined as a mapping.
  if (b.is_undefined() && !(op == "%" && a.is_string())) fail_undefined(b);
  const bool nums = a.is_number() && b.is_number();
  const bool floats = nums && (a.is_float() || b.is_float());
  if (op == "+") return binary_add(*this, a, b);
  if (op == "-") {
    if (!nums) bad_operands("-", a, b);
    if (floats) return Value::number(a.as_float() - b.as_float());
    int64_t r;
    if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) overflow();
    return Value::integer(r);
  }
  if (op == "*") return binary_multiply(*this, a, b);
  if (op == "/") {
    if (!nums) bad_operands("/", a, b);
    if (b.as_float() == 0) render_error("division by zero");
    return Value::number(a.as_float() / b.as_float());
  }
  if (op == "//") {
    if (!nums) bad_operands("//", a, b);
    if (floats) {
      if (b.as_float() == 0) render_error("float floor division by zero");
      return Value::number(py_float_divmod(a.as_float(), b.as_float()).first);
    }
    int64_t x = a.as_int(), y = b.as_int();
    if (y == 0) render_error("integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) overflow();
    int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
    return Value::integer(q);
  }
  if (op == "%") return binary_modulo(*this, a, b);
  if (op == "**") {
    if (!nums) bad_operands("** or pow()", a, b);
    if (!floats && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), r = 1;
      while (e > 0) {
        if (e & 1)
          if (__builtin_mul_overflow(r, base, &r)) overflow();
        e >>= 1;
        if (e && __builtin_mul_overflow(base, base, &base)) overflow();
      }
      return Value::integer(r);
    }
    if (a.as_float() == 0 && b.as_float() < 0)
      render_error("0.0 cannot be raised to a negative power");
    return Value::number(std::pow(a.as_float(), b.as_float()));
  }
  render_error("unknown operator " + op);
}

bool Interpreter::compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  if (a.is_undefined() && !b.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  try {
    if (op == "<") return less_than(a, b);
    if (op == ">") return less_than(b, a);
    if (op == "<=") return !less_than(b, a);
    if (op == ">=") return !less_than(a, b);
  } catch (const TemplateError&) {
    render_error("'" + op + "' not supported between instances of '" + type_name(a) + "' and '" +
                 type_name(b) + "'");
  }
  render_error("unknown comparison " + op);
}

Value Interpreter::eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
  step();
  if (++depth_ > limits_.max_depth) {
    --depth_;
    render_error("the template nests or recurses deeper than " + std::to_string(limits_.max_depth) +
                 " levels");
  }
  line_ = e.line;
  try {
    Value v = eval_inner(e, scope);
    --depth_;
    return v;
  } catch (...) {
    --depth_;
    throw;
  }
}

Value Interpreter::eval_inner(const Expr& e, const std::shared_ptr<Scope>& scope) {
  switch (e.kind) {
    case ExprKind::kConst:
      return e.value;
    case ExprKind::kName:
      return lookup(e.name, scope);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      charge_list(e.items.size());
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const auto& x : e.items) items.push_back(eval(*x, scope));
      return Value::list(std::move(items),
                         e.kind == ExprKind::kList ? SeqKind::kList : SeqKind::kTuple);
    }
    case ExprKind::kDict: {
      charge_dict(0);  // and each entry as it is set
      auto d = std::make_shared<DictObj>();
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        Value k = eval(*e.items[i], scope);
        d->set(k, eval(*e.items[i + 1], scope));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kGetattr: {
      Value obj = eval(*e.a, scope);
      return getattr(obj, e.name);
    }
    case ExprKind::kGetitem: {
      Value obj = eval(*e.a, scope);
      if (e.b->kind == ExprKind::kSlice) return slice(obj, *e.b, scope);
      Value key = eval(*e.b, scope);
      return getitem(obj, key);
    }
    case ExprKind::kSlice:
      render_error("a slice outside of a subscript");
    case ExprKind::kCall: {
      Value callee = eval(*e.a, scope);
      CallArgs args;
      eval_args(e.args, scope, &args);
      line_ = e.line;
      return call(callee, args);
    }
    case ExprKind::kFilter: {
      Value v = eval(*e.a, scope);
      CallArgs args;
      eval_args(e.args, scope, &args);
      line_ = e.line;
      return filter(e.name, v, args);
    }
    case ExprKind::kTest: {
      Value v = eval(*e.a, scope);
      CallArgs args;
      eval_args(e.args, scope, &args);
      line_ = e.line;
      return Value::boolean(test(e.name, v, args));
    }
    case ExprKind::kNot:
      return Value::boolean(!truthy(eval(*e.a, scope)));
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      Value v = eval(*e.a, scope);
      if (v.is_undefined()) fail_undefined(v);
      if (!v.is_number())
        render_error(std::string("bad operand type for unary ") +
                     (e.kind == ExprKind::kNeg ? "-" : "+") + ": '" + type_name(v) + "'");
      if (e.kind == ExprKind::kPos) return v.is_bool() ? Value::integer(v.as_int()) : v;
      if (v.is_float()) return Value::number(-v.as_float());
      if (v.as_int() == INT64_MIN) overflow();
      return Value::integer(-v.as_int());
    }
    case ExprKind::kBinary: {
      Value a = eval(*e.a, scope);
      Value b = eval(*e.b, scope);
      line_ = e.line;
      return binary(e.name, a, b);
    }
    case ExprKind::kAnd: {
      Value a = eval(*e.a, scope);
      return truthy(a) ? eval(*e.b, scope) : a;
    }
    case ExprKind::kOr: {
      Value a = eval(*e.a, scope);
      return truthy(a) ? a : eval(*e.b, scope);
    }
    case ExprKind::kConcat: {
      charge_string(0);
      std::string out;
      for (const auto& x : e.items) {
        std::string piece = to_str(eval(*x, scope));
        check_size(out.size() + piece.size());
        append_charged(&out, piece);
      }
      return Value::string(std::move(out));
    }
    case ExprKind::kCompare: {
      Value left = eval(*e.a, scope);
      for (const auto& [op, operand] : e.ops) {
        Value right = eval(*operand, scope);
        line_ = e.line;
        if (!compare(op, left, right)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprKind::kCondExpr: {
      if (truthy(eval(*e.a, scope))) return eval(*e.b, scope);
      if (e.c) return eval(*e.c, scope);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
  }
  render_error("unknown expression");
}

}  // namespace pagoda::jinja
