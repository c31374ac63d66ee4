#include "jinja/value.h"

#include <cmath>

#include "jinja/alloc_budget.h"
#include "jinja/error.h"
#include "jinja/pystr.h"

namespace pagoda::jinja {

bool StrObj::is_ascii() const {
  if (ascii_ < 0) {
    ascii_ = 1;
    for (unsigned char c : s)
      if (c >= 0x80) {
        ascii_ = 0;
        break;
      }
  }
  return ascii_ == 1;
}

const Value* DictObj::find(const Value& key) const {
  auto it = index_.find(hash_key(key));
  return it == index_.end() ? nullptr : &items[it->second].second;
}

void DictObj::set(const Value& key, Value value) {
  std::string k = hash_key(key);
  auto it = index_.find(k);
  if (it != index_.end()) {
    items[it->second].second = std::move(value);
    return;
  }
  charge_bytes(kEntryBytes + k.size());
  key_bytes_ += k.size();
  index_.emplace(std::move(k), items.size());
  items.emplace_back(key, std::move(value));
}

size_t DictObj::copy_bytes() const {
  return kObjectBytes + items.size() * kEntryBytes + key_bytes_;
}

Value Value::undefined(std::string message, bool security) {
  Value v(Kind::kUndefined);
  v.obj_ = std::make_shared<UndefinedObj>(std::move(message), security);
  return v;
}
Value Value::boolean(bool b) {
  Value v(Kind::kBool);
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v(Kind::kInt);
  v.i_ = i;
  return v;
}
Value Value::number(double f) {
  Value v(Kind::kFloat);
  v.f_ = f;
  return v;
}
Value Value::string(std::string s, bool safe) {
  Value v(Kind::kString);
  v.obj_ = std::make_shared<StrObj>(std::move(s));
  v.safe_ = safe;
  return v;
}
Value Value::list(std::vector<Value> items, SeqKind kind) {
  Value v(Kind::kList);
  auto l = std::make_shared<ListObj>();
  l->items = std::move(items);
  v.obj_ = std::move(l);
  v.seq_ = kind;
  return v;
}
Value Value::failed_generator(std::string error) {
  Value v(Kind::kList);
  auto l = std::make_shared<ListObj>();
  l->deferred_error = std::move(error);
  v.obj_ = std::move(l);
  v.seq_ = SeqKind::kGenerator;
  return v;
}

Value Value::dict(std::shared_ptr<const DictObj> d) {
  Value v(Kind::kDict);
  v.obj_ = std::move(d);
  return v;
}
ListObj::~ListObj() = default;
DictObj::~DictObj() = default;
NamespaceObj::~NamespaceObj() = default;

void DictObj::clear() {
  items.clear();
  index_.clear();
  key_bytes_ = 0;
}

Value Value::ns(std::shared_ptr<NamespaceObj> n) {
  Value v(Kind::kNamespace);
  v.obj_ = std::move(n);
  return v;
}
Value Value::callable(std::shared_ptr<const CallableObj> c) {
  Value v(Kind::kCallable);
  v.obj_ = std::move(c);
  return v;
}
Value Value::object(Kind kind, std::shared_ptr<const Object> obj) {
  Value v(kind);
  v.obj_ = std::move(obj);
  return v;
}

double Value::as_float() const {
  if (kind_ == Kind::kFloat) return f_;
  return static_cast<double>(as_int());
}
const std::string& Value::str() const {
  return static_cast<const StrObj&>(*obj_).s;
}
const StrObj& Value::str_obj() const {
  return static_cast<const StrObj&>(*obj_);
}
const std::vector<Value>& Value::items() const {
  return static_cast<const ListObj&>(*obj_).items;
}
std::shared_ptr<const std::vector<Value>> Value::shared_items() const {
  return {obj_, &static_cast<const ListObj&>(*obj_).items};  // aliases the list's owner
}
const DictObj& Value::dict() const {
  return static_cast<const DictObj&>(*obj_);
}
NamespaceObj& Value::ns() const {
  return const_cast<NamespaceObj&>(static_cast<const NamespaceObj&>(*obj_));
}
const CallableObj& Value::fn() const {
  return static_cast<const CallableObj&>(*obj_);
}
const UndefinedObj* Value::undef() const {
  return kind_ == Kind::kUndefined ? static_cast<const UndefinedObj*>(obj_.get()) : nullptr;
}

const char* type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return v.is_safe() ? "Markup" : "str";
    case Kind::kList:
      switch (v.seq_kind()) {
        case SeqKind::kList:
          return "list";
        case SeqKind::kTuple:
          return "tuple";
        case SeqKind::kGenerator:
          return "generator";
        case SeqKind::kDictKeys:
          return "dict_keys";
        case SeqKind::kDictValues:
          return "dict_values";
        case SeqKind::kDictItems:
          return "dict_items";
      }
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

void fail_undefined(const Value& v) {
  const UndefinedObj* u = v.undef();
  std::string message = u ? u->message : "undefined value";
  if (u && u->security) throw TemplateError(ErrorKind::kRender, message);
  render_error(message);
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return v.as_bool();
    case Kind::kInt:
      return v.as_int() != 0;
    case Kind::kFloat:
      return v.as_float() != 0.0;
    case Kind::kString:
      return !v.str().empty();
    case Kind::kList:
      return v.seq_kind() == SeqKind::kGenerator || !v.items().empty();
    case Kind::kDict:
      return !v.dict().items.empty();
    default:
      return true;
  }
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.str() == b.str();
    case Kind::kList: {
      // list == tuple is False in Python; views and generators compare by identity.
      if (a.seq_kind() != b.seq_kind()) return false;
      if (a.seq_kind() != SeqKind::kList && a.seq_kind() != SeqKind::kTuple)
        return &a.items() == &b.items();
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case Kind::kDict: {
      const auto& x = a.dict();
      const auto& y = b.dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* o = y.find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    case Kind::kNamespace:
      return &a.ns() == &b.ns();
    case Kind::kCallable:
      return &a.fn() == &b.fn();
    default:
      return false;
  }
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 keeps code point order
  if (a.is_list() && b.is_list() && a.seq_kind() == b.seq_kind() &&
      (a.seq_kind() == SeqKind::kList || a.seq_kind() == SeqKind::kTuple)) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined() || b.is_undefined()) fail_undefined(a.is_undefined() ? a : b);
  render_error(std::string("'<' not supported between instances of '") + type_name(a) + "' and '" +
               type_name(b) + "'");
}

std::string hash_key(const Value& v) {
  switch (v.kind()) {
    case Kind::kNone:
      return "n";
    case Kind::kUndefined:
      return "u";
    case Kind::kBool:
    case Kind::kInt:
      return "i" + std::to_string(v.as_int());
    case Kind::kFloat: {
      double f = v.as_float();
      if (std::isfinite(f) && f == std::floor(f) && std::fabs(f) < 9.2e18)
        return "i" + std::to_string(static_cast<int64_t>(f));
      return "f" + float_repr(f);
    }
    case Kind::kString:
      return "s" + v.str();
    case Kind::kList:
      if (v.seq_kind() == SeqKind::kTuple) {
        // Charged: a tuple holding one tuple twice, 60 levels deep, is small, but its
        // key is not.
        std::string k = "t(";
        for (const Value& x : v.items()) {
          std::string part = hash_key(x);
          append_charged(&k, std::to_string(part.size()) + ":");
          append_charged(&k, part);
        }
        return k + ")";
      }
      if (v.seq_kind() == SeqKind::kGenerator)
        return "g" + std::to_string(reinterpret_cast<uintptr_t>(v.object()));
      break;
    case Kind::kNamespace:
    case Kind::kCallable:
      // Hashed by identity, as Python objects without __eq__ are.
      return "o" + std::to_string(reinterpret_cast<uintptr_t>(v.object()));
    default:
      break;
  }
  render_error(std::string("unhashable type: '") + type_name(v) + "'");
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return 0;
    case Kind::kString:
      return v.str_obj().is_ascii() ? static_cast<int64_t>(v.str().size())
                                    : static_cast<int64_t>(code_point_count(v.str()));
    case Kind::kList:
      if (v.seq_kind() != SeqKind::kGenerator) return static_cast<int64_t>(v.items().size());
      break;
    case Kind::kDict:
      return static_cast<int64_t>(v.dict().items.size());
    default:
      break;
  }
  render_error(std::string("object of type '") + type_name(v) + "' has no len()");
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return {};
    case Kind::kList: {
      const auto& l = static_cast<const ListObj&>(*v.object());
      if (!l.deferred_error.empty()) render_error(l.deferred_error);
      return l.items;
    }
    case Kind::kDict: {
      charge_list(v.dict().items.size());
      std::vector<Value> keys;
      keys.reserve(v.dict().items.size());
      for (const auto& kv : v.dict().items) keys.push_back(kv.first);
      return keys;
    }
    case Kind::kString: {
      const std::string& s = v.str();
      // A string per character: the objects outweigh the bytes.
      size_t n = v.str_obj().is_ascii() ? s.size() : code_point_count(s);
      charge_list(n);
      charge_bytes(saturating_mul(n, kObjectBytes));
      charge_bytes(s.size());
      std::vector<Value> chars;
      chars.reserve(n);
      for (size_t i = 0; i < s.size();) {
        size_t n = 1;
        unsigned char c = static_cast<unsigned char>(s[i]);
        if (c >= 0xF0)
          n = 4;
        else if (c >= 0xE0)
          n = 3;
        else if (c >= 0xC0)
          n = 2;
        chars.push_back(Value::string(s.substr(i, n), v.is_safe()));
        i += n;
      }
      return chars;
    }
    default:
      break;
  }
  render_error(std::string("'") + type_name(v) + "' object is not iterable");
}

std::shared_ptr<const std::vector<Value>> iterate_shared(const Value& v) {
  if (v.is_list()) {
    const auto& l = static_cast<const ListObj&>(*v.object());
    if (!l.deferred_error.empty()) render_error(l.deferred_error);
    return v.shared_items();
  }
  return std::make_shared<const std::vector<Value>>(iterate(v));
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kUndefined:
      return false;
    case Kind::kString:
      if (!item.is_string())
        render_error(std::string("'in <string>' requires string as left operand, not ") +
                     type_name(item));
      return container.str().find(item.str()) != std::string::npos;
    case Kind::kDict:
      if (item.is_list() && item.seq_kind() != SeqKind::kTuple) hash_key(item);  // TypeError
      return container.dict().find(item) != nullptr;
    case Kind::kList:
      if (container.seq_kind() == SeqKind::kDictKeys) {
        for (const Value& x : container.items())
          if (equals(x, item)) return true;
        return false;
      }
      for (const Value& x : container.items())
        if (equals(x, item)) return true;
      return false;
    default:
      break;
  }
  render_error(std::string("argument of type '") + type_name(container) + "' is not iterable");
}

namespace {

std::string int_str(int64_t i) {
  return std::to_string(i);
}

void repr_into(const Value& v, std::string* out, int depth);

// Containers being printed, for Python's [...] / {...} on self-reference.
thread_local std::vector<const void*> g_repr_stack;

struct ReprGuard {
  explicit ReprGuard(const void* p) { g_repr_stack.push_back(p); }
  ~ReprGuard() { g_repr_stack.pop_back(); }
  static bool active(const void* p) {
    for (const void* x : g_repr_stack)
      if (x == p) return true;
    return false;
  }
};

void seq_repr(const std::vector<Value>& items, const char* open, const char* close, bool one_tuple,
              std::string* out, int depth) {
  if (ReprGuard::active(&items)) {
    append_charged(out, open[0] == '(' ? "(...)" : "[...]");
    return;
  }
  ReprGuard guard(&items);
  append_charged(out, open);
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) append_charged(out, ", ");
    repr_into(items[i], out, depth + 1);
  }
  if (one_tuple && items.size() == 1) append_charged(out, ",");
  append_charged(out, close);
}

void repr_into(const Value& v, std::string* out, int depth) {
  if (depth > 200) render_error("maximum recursion depth exceeded while getting the repr");
  switch (v.kind()) {
    case Kind::kUndefined:
      append_charged(out, "Undefined");
      return;
    case Kind::kNone:
      append_charged(out, "None");
      return;
    case Kind::kBool:
      append_charged(out, v.as_bool() ? "True" : "False");
      return;
    case Kind::kInt:
      append_charged(out, int_str(v.as_int()));
      return;
    case Kind::kFloat:
      append_charged(out, float_repr(v.as_float()));
      return;
    case Kind::kString:
      if (v.is_safe()) {
        append_charged(out, "Markup(" + string_repr(v.str()) + ")");
      } else {
        append_charged(out, string_repr(v.str()));
      }
      return;
    case Kind::kList:
      switch (v.seq_kind()) {
        case SeqKind::kList:
          seq_repr(v.items(), "[", "]", false, out, depth);
          return;
        case SeqKind::kTuple:
          seq_repr(v.items(), "(", ")", true, out, depth);
          return;
        case SeqKind::kGenerator:
          append_charged(out, "<generator object>");
          return;
        case SeqKind::kDictKeys:
          seq_repr(v.items(), "dict_keys([", "])", false, out, depth);
          return;
        case SeqKind::kDictValues:
          seq_repr(v.items(), "dict_values([", "])", false, out, depth);
          return;
        case SeqKind::kDictItems:
          seq_repr(v.items(), "dict_items([", "])", false, out, depth);
          return;
      }
      return;
    case Kind::kDict: {
      if (ReprGuard::active(&v.dict())) {
        append_charged(out, "{...}");
        return;
      }
      ReprGuard guard(&v.dict());
      append_charged(out, "{");
      bool first = true;
      for (const auto& [k, x] : v.dict().items) {
        if (!first) append_charged(out, ", ");
        first = false;
        repr_into(k, out, depth + 1);
        append_charged(out, ": ");
        repr_into(x, out, depth + 1);
      }
      append_charged(out, "}");
      return;
    }
    case Kind::kNamespace: {
      if (v.ns().loop) {
        append_charged(out, "<LoopContext>");
        return;
      }
      if (ReprGuard::active(&v.ns())) {
        append_charged(out, "<Namespace {...}>");
        return;
      }
      ReprGuard guard(&v.ns());
      append_charged(out, "<Namespace ");
      charge_bytes(v.ns().attrs.copy_bytes());
      repr_into(Value::dict(std::make_shared<DictObj>(v.ns().attrs)), out, depth + 1);
      append_charged(out, ">");
      return;
    }
    case Kind::kCallable:
      append_charged(out, v.fn().is_macro ? "<Macro '" + v.fn().name + "'>"
                                          : "<function " + v.fn().name + ">");
      return;
  }
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return v.str();
    default: {
      std::string out;
      repr_into(v, &out, 0);
      return out;
    }
  }
}

std::string repr(const Value& v) {
  std::string out;
  repr_into(v, &out, 0);
  return out;
}

}  // namespace pagoda::jinja
