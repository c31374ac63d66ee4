#include "jinja/alloc_budget.h"

#include <cstdint>

#include "jinja/error.h"
#include "jinja/value.h"

namespace pagoda::jinja {
namespace {

static_assert(sizeof(Value) <= kItemBytes, "kItemBytes undercounts a list element");
static_assert(2 * sizeof(Value) <= kEntryBytes, "kEntryBytes undercounts a dict entry");

thread_local AllocBudget* g_budget = nullptr;

size_t saturating_add(size_t a, size_t b) {
  size_t r;
  return __builtin_add_overflow(a, b, &r) ? SIZE_MAX : r;
}

}  // namespace

AllocBudget::AllocBudget(size_t limit) : limit_(limit), previous_(g_budget) {
  g_budget = this;
}

AllocBudget::~AllocBudget() {
  g_budget = previous_;
}

void AllocBudget::charge(size_t bytes) {
  if (bytes <= limit_ - used_) {
    used_ += bytes;
    return;
  }
  // Spent for good: a generator filter that defers errors cannot hide the overrun, and
  // whatever the template tries next fails the same way.
  used_ = limit_;
  throw TemplateError(ErrorKind::kLimit,
                      "the template allocated more than " + std::to_string(limit_) +
                          " bytes for strings, lists and dicts (its budget per rendering)");
}

size_t saturating_mul(size_t a, size_t b) {
  size_t r;
  return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

void charge_bytes(size_t bytes) {
  if (g_budget) g_budget->charge(bytes);
}

void charge_string(size_t bytes) {
  charge_bytes(saturating_add(kObjectBytes, bytes));
}

void charge_list(size_t items) {
  charge_bytes(saturating_add(kObjectBytes, saturating_mul(items, kItemBytes)));
}

void charge_dict(size_t entries) {
  charge_bytes(saturating_add(kObjectBytes, saturating_mul(entries, kEntryBytes)));
}

void charge_pair_list(size_t pairs) {
  charge_list(pairs);
  charge_bytes(saturating_mul(pairs, kObjectBytes + 2 * kItemBytes));
}

void append_charged(std::string* out, std::string_view piece) {
  charge_bytes(piece.size());
  out->append(piece);
}

void append_charged(std::string* out, char c) {
  charge_bytes(1);
  out->push_back(c);
}

}  // namespace pagoda::jinja
