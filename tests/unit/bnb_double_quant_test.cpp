// bitsandbytes' double quantization of NF4 absmax values (model/bnb_double_quant.h): the
// properties the format guarantees, on plain numbers. That the bytes equal bitsandbytes'
// own is checked against the library in tests/model/test_nf4_quantize.py.
#include "model/bnb_double_quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <vector>

namespace pagoda {
namespace {

// The dynamic map's shape: ascending, symmetric about the 0 at index 127, 1 at the top,
// seven decades down to 10^-6.
TEST(BnbDoubleQuant, MapIsSignedAndDynamic) {
  const std::array<float, 256>& m = bnb_dynamic_map();
  EXPECT_EQ(m[127], 0.0f);
  EXPECT_EQ(m[255], 1.0f);
  for (int i = 0; i < 255; ++i) EXPECT_LT(m[i], m[i + 1]) << i;
  for (int i = 0; i < 127; ++i) EXPECT_EQ(m[126 - i], -m[128 + i]) << i;
  EXPECT_GT(m[128], 1e-7f);
  EXPECT_LT(m[128], 1e-6f);
  EXPECT_NEAR(m[254], 0.99296875f, 1e-6f);  // the top decade's last midpoint
}

// Every absmax reads back within half the widest gap of the map (0.7% of the 256-block's
// largest |absmax - offset|) plus the 1/65535 rounding onto the grid.
TEST(BnbDoubleQuant, AbsmaxReadsBackWithinTheMapsStep) {
  std::mt19937 rng(5);
  std::lognormal_distribution<float> d(-3.0f, 0.6f);
  std::vector<float> a(3 * kBnbNestedBlock + 77);  // the last block is short
  for (float& x : a) x = d(rng);
  ThreadPool pool(2);
  const BnbNestedAbsmax q = bnb_double_quantize(a, pool);
  ASSERT_EQ(q.codes.size(), a.size());
  ASSERT_EQ(q.absmax.size(), 4u);
  double mean = 0;
  for (float x : a) mean += x;
  mean /= static_cast<double>(a.size());
  EXPECT_NEAR(q.offset, mean, 1e-6 * mean);
  const std::array<float, 256>& m = bnb_dynamic_map();
  double widest = 0;
  for (int i = 0; i < 255; ++i) widest = std::max(widest, double{m[i + 1]} - m[i]);
  for (size_t i = 0; i < a.size(); ++i) {
    const float scale = q.absmax[i / kBnbNestedBlock];
    const double back = double{m[q.codes[i]]} * scale + q.offset;
    EXPECT_NEAR(back, a[i], scale * (widest / 2 + 1.0 / 65535) + 1e-7) << i;
  }
  // Each block's scale is its largest |absmax - offset|.
  for (size_t b = 0; b < q.absmax.size(); ++b) {
    float amax = 0;
    for (size_t i = b * kBnbNestedBlock; i < std::min(a.size(), (b + 1) * kBnbNestedBlock); ++i)
      amax = std::max(amax, std::fabs(a[i] - q.offset));
    EXPECT_EQ(q.absmax[b], amax) << b;
  }
}

// Equal absmax values (a block's scale is 0) read back as the offset, exactly.
TEST(BnbDoubleQuant, EqualValuesReadBackExactly) {
  const std::vector<float> a(300, 0.125f);
  ThreadPool pool(1);
  const BnbNestedAbsmax q = bnb_double_quantize(a, pool);
  EXPECT_EQ(q.offset, 0.125f);
  for (float s : q.absmax) EXPECT_EQ(s, 0.0f);
  for (uint8_t c : q.codes) EXPECT_EQ(bnb_dynamic_map()[c] * 0.0f + q.offset, 0.125f);
}

}  // namespace
}  // namespace pagoda
