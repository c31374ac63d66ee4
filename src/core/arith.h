// Integer arithmetic shared across layers.
#pragma once

#include <cstdint>

namespace pagoda {

// a / b rounded up, for a >= 0 and b > 0: blocks needed to hold a items, b per block.
constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// One splitmix64 step: consecutive inputs give distinct, well-mixed 64-bit outputs.
constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace pagoda
