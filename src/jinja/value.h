// The values a template computes with, modelled on the Python objects jinja2 handles:
// undefined, None, bool, int, float, str (with markupsafe's "safe" flag), list and its
// relatives (tuple, generator, dict views), dict (insertion-ordered), namespace() and
// callables. Containers are immutable once built (Hugging Face renders in jinja2's
// ImmutableSandboxedEnvironment); only a namespace's attributes change.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pagoda::jinja {

class Interpreter;
class Value;
struct LoopState;

enum class Kind : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kDict,
  kNamespace,
  kCallable,
};

// What Python type a sequence value stands for: they iterate alike but print, index and
// measure differently (a generator has no len() and is always true).
enum class SeqKind : uint8_t { kList, kTuple, kGenerator, kDictKeys, kDictValues, kDictItems };

struct Object {
  virtual ~Object() = default;
};

struct StrObj : Object {
  explicit StrObj(std::string v) : s(std::move(v)) {}
  std::string s;
  bool is_ascii() const;  // cached: code point operations are byte operations then

 private:
  mutable int8_t ascii_ = -1;
};

// Destructors are defined in value.cpp, where Value is complete (clang instantiates an
// implicit virtual destructor here, with Value still incomplete).
struct ListObj : Object {
  ListObj() = default;
  ListObj(const ListObj&) = default;
  ListObj(ListObj&&) = default;
  ListObj& operator=(const ListObj&) = default;
  ListObj& operator=(ListObj&&) = default;
  ~ListObj() override;
  std::vector<Value> items;
  // A generator whose body failed: jinja2's generator filters are lazy, so the error
  // surfaces only when something iterates it.
  std::string deferred_error;
};

// Insertion-ordered dict keyed by hashable values (str, int, float, bool, None, tuples).
struct DictObj : Object {
  DictObj() = default;
  DictObj(const DictObj&) = default;
  DictObj(DictObj&&) = default;
  DictObj& operator=(const DictObj&) = default;
  DictObj& operator=(DictObj&&) = default;
  ~DictObj() override;
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  // A new key is charged to the running rendering's budget (alloc_budget.h).
  void set(const Value& key, Value value);
  void clear();
  // What a copy of this dict allocates, for the budget.
  size_t copy_bytes() const;

 private:
  std::unordered_map<std::string, size_t> index_;
  size_t key_bytes_ = 0;  // the index's keys: a copy duplicates them
};

struct NamespaceObj : Object {
  ~NamespaceObj() override;
  mutable DictObj attrs;
  std::shared_ptr<LoopState> loop;  // set for a for loop's `loop` variable
};

struct UndefinedObj : Object {
  explicit UndefinedObj(std::string m, bool sec = false) : message(std::move(m)), security(sec) {}
  std::string message;    // what jinja2 would raise when the value is used
  bool security = false;  // an unsafe attribute in the sandbox (raises SecurityError)
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

struct CallableObj : Object {
  explicit CallableObj(std::string n) : name(std::move(n)) {}
  std::string name;
  bool is_macro = false;
  virtual Value call(Interpreter& in, CallArgs& args) const = 0;
};

class Value {
 public:
  Value() = default;  // undefined
  static Value undefined(std::string message, bool security = false);
  static Value none() { return Value(Kind::kNone); }
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s, bool safe = false);
  static Value list(std::vector<Value> items, SeqKind kind = SeqKind::kList);
  static Value failed_generator(std::string error);
  static Value dict(std::shared_ptr<const DictObj> d);
  static Value dict(DictObj d) { return dict(std::make_shared<DictObj>(std::move(d))); }
  static Value ns(std::shared_ptr<NamespaceObj> n);
  static Value callable(std::shared_ptr<const CallableObj> c);
  static Value object(Kind kind, std::shared_ptr<const Object> obj);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }  // not bool (Python's bool is an int)
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  bool is_safe() const { return safe_; }
  SeqKind seq_kind() const { return seq_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_float() const;  // int, bool or float
  const std::string& str() const;
  const StrObj& str_obj() const;
  const std::vector<Value>& items() const;
  // A list's items, sharing its storage (lists never change once built).
  std::shared_ptr<const std::vector<Value>> shared_items() const;
  const DictObj& dict() const;
  NamespaceObj& ns() const;
  const CallableObj& fn() const;
  const UndefinedObj* undef() const;
  const Object* object() const { return obj_.get(); }

 private:
  explicit Value(Kind k) : kind_(k) {}
  Kind kind_ = Kind::kUndefined;
  bool safe_ = false;
  SeqKind seq_ = SeqKind::kList;
  union {
    bool b_;
    int64_t i_ = 0;
    double f_;
  };
  std::shared_ptr<const Object> obj_;
};

// Python semantics the interpreter and the builtins share.
const char* type_name(const Value& v);  // Python's type name: 'str', 'dict', 'NoneType'...
[[noreturn]] void fail_undefined(const Value& v);
bool truthy(const Value& v);
bool equals(const Value& a, const Value& b);
// Python's a < b: raises TypeError (a render error) for unorderable types.
bool less_than(const Value& a, const Value& b);
// The dict-index key of a hashable value; raises TypeError for unhashable ones.
std::string hash_key(const Value& v);
int64_t length(const Value& v);  // len(); raises for values without one
// The items a for loop over `v` visits (dict keys, string characters...). A list comes
// back as a copy, uncharged; the new list of a dict's keys or a string's characters is
// charged to the running rendering's budget.
std::vector<Value> iterate(const Value& v);
// The same without copying a list: for loops hold their items while the body runs, and a
// recursive macro would otherwise hold a copy per level.
std::shared_ptr<const std::vector<Value>> iterate_shared(const Value& v);
bool contains(const Value& container, const Value& item);  // Python's `item in container`
std::string to_str(const Value& v);                        // str(v) ('' for undefined)
std::string repr(const Value& v);                          // repr(v)

}  // namespace pagoda::jinja
