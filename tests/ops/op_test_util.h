// Helpers shared by the kernel tests: random data, normalised errors, ISA iteration.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/cpu_features.h"

namespace pagoda::cpu::testing {

inline std::vector<float> random_floats(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// sum((a - b)^2) / sum(b^2): insensitive to the output's scale, and one wrong block in a
// row of n blocks shows up as about 1/n.
inline double nmse(const float* a, const double* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += b[i] * b[i];
  }
  if (std::isnan(num)) return std::numeric_limits<double>::infinity();
  return den > 0 ? num / den : num;
}

inline double nmse(const float* a, const float* b, size_t n) {
  std::vector<double> bd(b, b + n);
  return nmse(a, bd.data(), n);
}

// The ISA levels this machine can run, lowest first.
inline std::vector<Isa> available_isas() {
  set_isa_override(Isa::kAvx512);
  std::vector<Isa> v;
  for (Isa i : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512})
    if (static_cast<int>(i) <= static_cast<int>(best_isa())) v.push_back(i);
  return v;
}

// Sets an ISA cap for the lifetime of the object.
class IsaScope {
 public:
  explicit IsaScope(Isa isa) { set_isa_override(isa); }
  ~IsaScope() { set_isa_override(Isa::kAvx512); }
};

}  // namespace pagoda::cpu::testing
