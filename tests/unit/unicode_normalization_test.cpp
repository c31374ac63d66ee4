// Unicode normalization and lowercasing (tokenizer/normalization.h) on cases whose answers
// follow from UAX #15 and the Unicode Character Database by hand. The exhaustive comparison
// with Python's unicodedata and Hugging Face's normalizers is tests/model/test_hf_normalizers.py.
#include <gtest/gtest.h>

#include <string>

#include "tokenizer/normalization.h"

namespace pagoda::unicode {
namespace {

std::string nfc(std::string_view s) {
  return normalize(s, NormalForm::kNfc);
}
std::string nfd(std::string_view s) {
  return normalize(s, NormalForm::kNfd);
}
std::string nfkc(std::string_view s) {
  return normalize(s, NormalForm::kNfkc);
}
std::string nfkd(std::string_view s) {
  return normalize(s, NormalForm::kNfkd);
}

TEST(UnicodeNormalization, AsciiAndComposedTextPassTheQuickCheck) {
  for (NormalForm f : {NormalForm::kNfc, NormalForm::kNfd, NormalForm::kNfkc, NormalForm::kNfkd})
    EXPECT_TRUE(is_normalized_quick("Hello, world!\n", f));
  EXPECT_TRUE(is_normalized_quick("caf\u00e9 \u4e2d\u6587", NormalForm::kNfc));
  EXPECT_FALSE(is_normalized_quick("caf\u00e9", NormalForm::kNfd));
  EXPECT_FALSE(is_normalized_quick("cafe\u0301", NormalForm::kNfc));  // U+0301 may compose
  EXPECT_FALSE(is_normalized_quick("\ufb01", NormalForm::kNfkc));     // the fi ligature
  EXPECT_TRUE(is_normalized_quick("\ufb01", NormalForm::kNfc));
  // Out of canonical order: below (220) after above (230).
  EXPECT_FALSE(is_normalized_quick("a\u0301\u0323", NormalForm::kNfd));
}

TEST(UnicodeNormalization, CanonicalDecompositionAndComposition) {
  EXPECT_EQ(nfc("e\u0301"), "\u00e9");
  EXPECT_EQ(nfd("\u00e9"), "e\u0301");
  EXPECT_EQ(nfd("\u1e69"), "s\u0323\u0307");  // recursive: U+1E63 U+0307, then s U+0323
  EXPECT_EQ(nfc("s\u0307\u0323"), "\u1e69");  // reordered, then composed twice
  EXPECT_EQ(nfd("a\u0301\u0323"), "a\u0323\u0301");
  // U+0301 is blocked from "a" by U+0301 before it (same class) once that one has composed.
  EXPECT_EQ(nfc("a\u0301\u0301"), "\u00e1\u0301");
  // A starter between them blocks: U+0308 does not reach back over "b".
  EXPECT_EQ(nfc("ab\u0308"), "ab\u0308");
}

TEST(UnicodeNormalization, SingletonsExclusionsAndNonStarters) {
  EXPECT_EQ(nfc("\u212b"), "\u00c5");        // ANGSTROM SIGN: a singleton, never composed back
  EXPECT_EQ(nfc("\u2126"), "\u03a9");        // OHM SIGN
  EXPECT_EQ(nfc("\u0958"), "\u0915\u093c");  // DEVANAGARI QA: a composition exclusion
  EXPECT_EQ(nfc("\u0915\u093c"), "\u0915\u093c");
  EXPECT_EQ(nfc("\u0344"), "\u0308\u0301");  // a non-starter decomposition
  EXPECT_EQ(nfc("\u0f73"), "\u0f71\u0f72");
}

TEST(UnicodeNormalization, HangulByArithmetic) {
  EXPECT_EQ(nfd("\uac00"), "\u1100\u1161");
  EXPECT_EQ(nfd("\uac01"), "\u1100\u1161\u11a8");
  EXPECT_EQ(nfd("\ud7a3"), "\u1112\u1175\u11c2");
  EXPECT_EQ(nfc("\u1100\u1161\u11a8"), "\uac01");
  EXPECT_EQ(nfc("\uac00\u11a8"), "\uac01");        // LV + T
  EXPECT_EQ(nfc("\uac01\u11a8"), "\uac01\u11a8");  // LVT takes no further T
  EXPECT_EQ(nfc("\u1100\u1100\u1161"), "\u1100\uac00");
  EXPECT_EQ(nfc("\u1100\u11a7"), "\u1100\u11a7");  // U+11A7 is not a trailing consonant
}

TEST(UnicodeNormalization, CompatibilityMappings) {
  EXPECT_EQ(nfkc("\ufb01"), "fi");
  EXPECT_EQ(nfkd("\u00bd"), "1\u20442");
  EXPECT_EQ(nfkc("\u1e9b\u0323"), "\u1e69");  // UAX #15's example: long s with dots
  EXPECT_EQ(nfc("\u1e9b\u0323"), "\u1e9b\u0323");
  EXPECT_EQ(nfkd("\u1e9b\u0323"), "s\u0323\u0307");
  EXPECT_EQ(nfkc("\u3392"), "MHz");
  EXPECT_EQ(nfkc("\U0001e030"), "\u0430");  // Unicode 15.0, added on top of the data source
}

TEST(UnicodeNormalization, InvalidBytesStayAsTheyAre) {
  EXPECT_EQ(nfc("\xff"
                "e\u0301\xc0\x80"),
            "\xff\u00e9\xc0\x80");
  // A lone mark after a bad byte has no starter to join.
  EXPECT_EQ(nfc("\xfe\u0301"), "\xfe\u0301");
  EXPECT_EQ(nfd("\ufffd\u00e9"),
            "\ufffd"
            "e\u0301");
}

TEST(UnicodeNormalization, LongRunsOfMarksStayFast) {
  std::string s = "a";
  for (int k = 0; k < 100000; ++k) s += k % 2 ? "\u0301" : "\u0323";
  const std::string out = nfc(s);
  // a + U+0323 composes to U+1EA1; the rest: 49,999 U+0323 then 50,000 U+0301.
  EXPECT_EQ(out.substr(0, 3), "\u1ea1");
  EXPECT_EQ(out.size(), 3 + 99999 * 2);
  EXPECT_EQ(out.substr(3 + 49999 * 2, 2), "\u0301");
}

TEST(UnicodeLowercase, CharacterByCharacter) {
  EXPECT_EQ(to_lower("Hello WORLD 123"), "hello world 123");
  // No final-sigma rule: each character on its own, as Rust's char::to_lowercase.
  EXPECT_EQ(to_lower("\u039f\u0394\u039f\u03a3"), "\u03bf\u03b4\u03bf\u03c3");
  EXPECT_EQ(to_lower("\u0130"), "i\u0307");
  EXPECT_EQ(to_lower("\u00c9\u01c5\u2160\u24b6\U00010400"), "\u00e9\u01c6\u2170\u24d0\U00010428");
  EXPECT_EQ(to_lower("\u00df\u1e9e"), "\u00df\u00df");
  EXPECT_EQ(to_lower("\xff"
                     "A\xc1\x81"),
            "\xff"
            "a\xc1\x81");  // an overlong "A" is not a letter
}

}  // namespace
}  // namespace pagoda::unicode
