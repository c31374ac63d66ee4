// The generated Unicode tables behind normalization.h (normalization_data.cpp, written by
// scripts/gen_normalization_data.py): sorted arrays, searched by binary search.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pagoda::unicode {

// Quick-check bits per code point (UAX #15's NFx_Quick_Check): kNf*No where the character
// never appears in that form, kNf*Maybe where it may combine with the character before it.
enum NormQc : uint8_t {
  kNfdNo = 0x01,
  kNfkdNo = 0x02,
  kNfcNo = 0x04,
  kNfcMaybe = 0x08,
  kNfkcNo = 0x10,
  kNfkcMaybe = 0x20,
};

// A run of code points from `start` to the next run's start sharing these properties.
struct NormRun {
  uint32_t start;
  uint8_t ccc;  // canonical combining class
  uint8_t qc;   // NormQc bits
};
extern const NormRun kNormRuns[];
extern const size_t kNormRunCount;

// One level of a decomposition mapping: kDecompPool[offset .. offset + length).
struct Decomposition {
  uint32_t cpt;
  uint16_t offset;
  uint8_t length;
  uint8_t compat;  // 1: a compatibility mapping (NFKD/NFKC only)
};
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionCount;
extern const uint32_t kDecompPool[];

// Canonical composition pairs without the composition exclusions, sorted by (first, second).
struct Composition {
  uint32_t first, second, composite;
};
extern const Composition kCompositions[];
extern const size_t kCompositionCount;

// Lowercase mappings (UnicodeData.txt's simple ones, SpecialCasing.txt's unconditional ones).
struct CaseMapping {
  uint32_t cpt, lower;
};
extern const CaseMapping kLowercase[];
extern const size_t kLowercaseCount;
struct LongCaseMapping {
  uint32_t cpt;
  uint32_t length;
  uint32_t lower[3];
};
extern const LongCaseMapping kLowercaseLong[];
extern const size_t kLowercaseLongCount;

}  // namespace pagoda::unicode
