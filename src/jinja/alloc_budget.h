// The allocation budget of one rendering (Limits::max_alloc). Steps and string lengths
// alone do not bound memory: a template that doubles a list 26 times takes 26 steps and
// 4 GB. So every string, list and dict a template creates is charged here before it is
// built, and the rendering stops with an error once the total passes the budget. What a
// rendering starts from (the request's messages, the template's literals) is not charged;
// neither are copies of values that already exist, nor the output (Limits::max_output).
//
// Where a builder cannot know its size in advance (join, repr, tojson, '%' formatting) it
// charges each piece before appending it. A result at most a few times the size of a
// string that already exists (case mapping, strip, escaping) may be charged as soon as it
// is made: the overshoot is bounded by that string.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace pagoda::jinja {

// The budget of the rendering running on this thread. The builders deep in the value and
// string helpers (iterate, repr, str.replace, '%' formatting, tojson) have no interpreter
// at hand; a rendering runs on one thread from start to end, so the thread's budget is the
// running rendering's. Outside a rendering nothing is charged.
class AllocBudget {
 public:
  explicit AllocBudget(size_t limit);  // becomes this thread's budget
  ~AllocBudget();                      // restores the one before
  AllocBudget(const AllocBudget&) = delete;
  AllocBudget& operator=(const AllocBudget&) = delete;

  size_t used() const { return used_; }
  void charge(size_t bytes);

 private:
  size_t limit_;
  size_t used_ = 0;
  AllocBudget* previous_;
};

// What a new value costs: its bytes plus the heap objects around them, so a million
// one-character strings count for what they occupy (about 100 MB), not for a megabyte.
inline constexpr size_t kObjectBytes = 64;  // a StrObj/ListObj/DictObj and its shared_ptr block
inline constexpr size_t kItemBytes = 32;    // one Value in a list (sizeof(Value))
inline constexpr size_t kEntryBytes = 128;  // one dict entry: key and value, and its index node

// Each raises the budget error when the running rendering would pass its budget; counts
// a template computes may be huge, so the products saturate instead of wrapping.
void charge_bytes(size_t bytes);
void charge_string(size_t bytes);     // one new string of `bytes` bytes
void charge_list(size_t items);       // one new list (or tuple) of `items` elements
void charge_dict(size_t entries);     // one new dict of `entries` entries
void charge_pair_list(size_t pairs);  // a new list of `pairs` new (key, value) tuples

// Appends `piece` to `out` after charging it: for strings built from parts.
void append_charged(std::string* out, std::string_view piece);
void append_charged(std::string* out, char c);

// a * b, or SIZE_MAX where it overflows.
size_t saturating_mul(size_t a, size_t b);

}  // namespace pagoda::jinja
