#include "tokenizer/normalization.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tokenizer/normalization_tables.h"
#include "tokenizer/unicode.h"

namespace pagoda::unicode {
namespace {

// Hangul syllables decompose and compose by arithmetic (Unicode §3.12), not by table.
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// A byte that is not part of valid UTF-8 travels through the algorithm as this value: above
// every code point, so it has no properties and nothing composes with it.
constexpr uint32_t kRawByte = 0x80000000u;

struct Props {
  uint8_t ccc = 0;
  uint8_t qc = 0;
};

Props props(uint32_t c) {
  // Everything below the first run with properties (U+00A0) is plain.
  if (c < kNormRuns[1].start || c > kMaxCodePoint) return {};
  const NormRun* end = kNormRuns + kNormRunCount;
  const NormRun* r =
      std::upper_bound(kNormRuns, end, c, [](uint32_t v, const NormRun& e) { return v < e.start; });
  return {r[-1].ccc, r[-1].qc};
}

uint8_t ccc(uint32_t c) {
  return props(c).ccc;
}

bool compatibility(NormalForm form) {
  return form == NormalForm::kNfkc || form == NormalForm::kNfkd;
}

bool composing(NormalForm form) {
  return form == NormalForm::kNfc || form == NormalForm::kNfkc;
}

// The quick-check bits that send a character to the full algorithm in `form`.
uint8_t not_yes_bits(NormalForm form) {
  switch (form) {
    case NormalForm::kNfc:
      return kNfcNo | kNfcMaybe;
    case NormalForm::kNfd:
      return kNfdNo;
    case NormalForm::kNfkc:
      return kNfkcNo | kNfkcMaybe;
    case NormalForm::kNfkd:
      return kNfkdNo;
  }
  return 0;
}

size_t utf8_size(uint32_t c) {
  return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

// The text as code points; bytes that do not decode (or decode from an overlong form, which
// would not encode back to themselves) become kRawByte values.
std::vector<uint32_t> decode_keeping_bytes(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t next = i;
    const uint32_t c = decode_one(text, &next);
    const bool real_fffd = c == kReplacementChar && next - i == 3;
    if ((c == kReplacementChar && !real_fffd) || utf8_size(c) != next - i) {
      for (; i < next; ++i) out.push_back(kRawByte | static_cast<uint8_t>(text[i]));
      continue;
    }
    out.push_back(c);
    i = next;
  }
  return out;
}

const Decomposition* find_decomposition(uint32_t c) {
  const Decomposition* end = kDecompositions + kDecompositionCount;
  const Decomposition* d = std::lower_bound(
      kDecompositions, end, c, [](const Decomposition& e, uint32_t v) { return e.cpt < v; });
  return d != end && d->cpt == c ? d : nullptr;
}

// Appends the full decomposition of `c`: the mappings applied until none applies.
void decompose(uint32_t c, bool compat, std::vector<uint32_t>* out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const uint32_t s = c - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* d = c <= kMaxCodePoint ? find_decomposition(c) : nullptr;
  if (d == nullptr || (d->compat && !compat)) {
    out->push_back(c);
    return;
  }
  for (uint32_t k = 0; k < d->length; ++k) decompose(kDecompPool[d->offset + k], compat, out);
}

// Canonical ordering: each run of non-starters sorted by combining class, stably.
void reorder(std::vector<uint32_t>* cps) {
  std::vector<std::pair<uint8_t, uint32_t>> run;
  auto& v = *cps;
  for (size_t i = 0; i < v.size();) {
    if (ccc(v[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    run.clear();
    for (; j < v.size() && ccc(v[j]) != 0; ++j) run.emplace_back(ccc(v[j]), v[j]);
    if (run.size() > 1) {
      std::stable_sort(run.begin(), run.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      for (size_t k = 0; k < run.size(); ++k) v[i + k] = run[k].second;
    }
    i = j;
  }
}

// The primary composite of `a` then `b`, or 0.
uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  const Composition* end = kCompositions + kCompositionCount;
  const Composition* p =
      std::lower_bound(kCompositions, end, std::pair{a, b}, [](const Composition& e, auto v) {
        return e.first != v.first ? e.first < v.first : e.second < v.second;
      });
  return p != end && p->first == a && p->second == b ? p->composite : 0;
}

// Canonical composition: each character joins the last starter before it unless a character
// between them blocks it (one of class 0, or of a class at least its own).
void compose(std::vector<uint32_t>* cps) {
  auto& v = *cps;
  if (v.empty()) return;
  size_t starter = 0;
  // A text that begins with a non-starter has no starter to compose with yet.
  int last_class = ccc(v[0]) == 0 ? 0 : 256;
  size_t w = 1;
  for (size_t r = 1; r < v.size(); ++r) {
    const uint32_t c = v[r];
    const int cls = ccc(c);
    const bool adjacent_or_unblocked = last_class == 0 || last_class < cls;
    if (adjacent_or_unblocked && last_class != 256) {
      if (const uint32_t composite = compose_pair(v[starter], c)) {
        v[starter] = composite;
        continue;
      }
    }
    if (cls == 0) {
      starter = w;
      last_class = 0;
    } else {
      last_class = cls;
    }
    v[w++] = c;
  }
  v.resize(w);
}

}  // namespace

bool is_normalized_quick(std::string_view text, NormalForm form) {
  const uint8_t stop = not_yes_bits(form);
  uint8_t last_class = 0;
  for (size_t i = 0; i < text.size();) {
    if (static_cast<uint8_t>(text[i]) < 0x80) {  // ASCII: a starter, in every form
      last_class = 0;
      ++i;
      continue;
    }
    const Props p = props(decode_one(text, &i));
    if ((p.ccc != 0 && last_class > p.ccc) || (p.qc & stop)) return false;
    last_class = p.ccc;
  }
  return true;
}

std::string normalize(std::string_view text, NormalForm form) {
  if (is_normalized_quick(text, form)) return std::string(text);
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  const bool compat = compatibility(form);
  for (uint32_t c : decode_keeping_bytes(text)) decompose(c, compat, &cps);
  reorder(&cps);
  if (composing(form)) compose(&cps);
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (uint32_t c : cps) {
    if (c & kRawByte)
      out.push_back(static_cast<char>(c & 0xFF));
    else
      append_utf8(&out, c);
  }
  return out;
}

}  // namespace pagoda::unicode
