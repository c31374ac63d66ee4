// vec.h primitives on every ISA level against double-precision references, over lengths
// that hit every tail case of the vector loops.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/vec.h"
#include "core/dtype.h"
#include "op_test_util.h"

namespace pagoda::cpu {
namespace {

const int64_t kLengths[] = {0, 1, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 128, 200, 1000};

std::vector<uint16_t> to_f16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_fp16(v[i]);
  return h;
}

// An f32 sum of n products of N(0,1) values has a rounding error of about sqrt(n) * eps *
// sqrt(sum of squares); relative to the reference's own scale sqrt(n) that is well under
// 1e-5 at these lengths, while a dropped or doubled element costs ~1 / n >= 1e-3.
double rel_err(double got, double want, double scale) {
  return std::fabs(got - want) / (scale + 1e-30);
}

TEST(Vec, DotAndAxpyMatchDoubleReference) {
  std::mt19937 rng(17);
  for (Isa isa : testing::available_isas()) {
    testing::IsaScope scope(isa);
    for (int64_t n : kLengths) {
      const auto a = testing::random_floats(rng, static_cast<size_t>(n) + 1);
      const auto b = testing::random_floats(rng, static_cast<size_t>(n) + 1);
      const auto ah = to_f16(a);
      double want32 = 0, want16 = 0, scale = 0;
      for (int64_t i = 0; i < n; ++i) {
        want32 += static_cast<double>(a[i]) * b[i];
        want16 += static_cast<double>(fp16_to_f32(ah[i])) * b[i];
        scale += std::fabs(static_cast<double>(a[i]) * b[i]);
      }
      EXPECT_LE(rel_err(dot_f32(n, a.data(), b.data()), want32, scale), 1e-6)
          << isa_name(isa) << " n=" << n;
      EXPECT_LE(rel_err(dot_f16_f32(n, ah.data(), b.data()), want16, scale), 1e-6)
          << isa_name(isa) << " n=" << n;

      // axpy: every element is one fused or two rounded operations, so compare per element.
      const float s = 0.37f;
      std::vector<float> y(b.begin(), b.end()), yh(b.begin(), b.end());
      const float sentinel = y[static_cast<size_t>(n)];
      axpy_f32(n, s, a.data(), y.data());
      axpy_f16_f32(n, s, ah.data(), yh.data());
      for (int64_t i = 0; i < n; ++i) {
        const double w = static_cast<double>(b[i]) + static_cast<double>(s) * a[i];
        const double wh = static_cast<double>(b[i]) + static_cast<double>(s) * fp16_to_f32(ah[i]);
        ASSERT_NEAR(y[i], w, 1e-6 * (std::fabs(w) + 1))
            << isa_name(isa) << " n=" << n << " i=" << i;
        ASSERT_NEAR(yh[i], wh, 1e-6 * (std::fabs(wh) + 1))
            << isa_name(isa) << " n=" << n << " i=" << i;
      }
      EXPECT_EQ(y[static_cast<size_t>(n)], sentinel) << "wrote past n";
      EXPECT_EQ(yh[static_cast<size_t>(n)], sentinel) << "wrote past n";
    }
  }
}

TEST(Vec, F16RowConversionsAreExact) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits;
  for (Isa isa : testing::available_isas()) {
    testing::IsaScope scope(isa);
    for (int64_t n : kLengths) {
      // Arbitrary bit patterns cover rounding ties, denormals, overflow and infinities.
      std::vector<float> x(static_cast<size_t>(n) + 1);
      for (float& f : x) {
        // Exponents around f16's underflow (2^-31..2^0) and overflow (2^1..2^32) ranges.
        const uint32_t high[3] = {0, 0x30000000u, 0x40000000u};
        do f = f32_from_bits((bits(rng) & 0x8fffffffu) | high[bits(rng) % 3]);
        while (std::isnan(f));
      }
      std::vector<uint16_t> h(static_cast<size_t>(n) + 1, 0xBEEF);
      f32_to_f16_row(n, x.data(), h.data());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(h[i], f32_to_fp16(x[i])) << isa_name(isa) << " " << x[i];
      EXPECT_EQ(h[static_cast<size_t>(n)], 0xBEEF);

      std::vector<uint16_t> hs(static_cast<size_t>(n));
      for (auto& v : hs) {
        do v = static_cast<uint16_t>(bits(rng));
        while ((v & 0x7c00) == 0x7c00 && (v & 0x3ff) != 0);
      }
      std::vector<float> f(static_cast<size_t>(n) + 1, -7.0f);
      f16_to_f32_row(n, hs.data(), f.data());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(bits_from_f32(f[i]), bits_from_f32(fp16_to_f32(hs[i])));
      EXPECT_EQ(f[static_cast<size_t>(n)], -7.0f);
    }
  }
}

// The loop every caller of argmax_f32 had before it: the first maximum by >, so NaNs
// are passed over unless x[0] is one.
int64_t plain_argmax(int64_t n, const float* x) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

TEST(Vec, ArgmaxMatchesPlainLoop) {
  std::mt19937 rng(29);
  std::normal_distribution<float> normal;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Few distinct values make ties common; the specials go anywhere, x[0] included.
  const float levels[] = {-1.0f, 0.5f, 2.0f, 0.0f, -0.0f, -inf, inf, nan};
  std::vector<int64_t> lengths(std::begin(kLengths), std::end(kLengths));
  lengths.push_back(49152 + 5);  // a vocabulary, past the unrolled loops
  for (Isa isa : testing::available_isas()) {
    testing::IsaScope scope(isa);
    for (int64_t n : lengths) {
      for (int trial = 0; trial < 200; ++trial) {
        // Trial t draws from the first 3 + t % 6 levels (no specials, then one more each).
        std::uniform_int_distribution<int> pick(0, 2 + trial % 6);
        std::vector<float> x(static_cast<size_t>(n) + 1, inf);  // past n: must not be read
        for (int64_t i = 0; i < n; ++i) x[i] = levels[pick(rng)];
        if (trial % 2) {  // mostly ordinary values with a few specials
          for (int64_t i = 0; i < n; ++i) x[i] = normal(rng);
          for (int k = 0; k < 3 && n > 0; ++k)
            x[std::uniform_int_distribution<int64_t>(0, n - 1)(rng)] = levels[pick(rng)];
        }
        ASSERT_EQ(argmax_f32(n, x.data()), plain_argmax(n, x.data()))
            << isa_name(isa) << " n=" << n << " trial=" << trial;
      }
    }
    const std::vector<float> all_nan(40, nan), neg_inf(40, -inf);
    EXPECT_EQ(argmax_f32(40, all_nan.data()), 0) << isa_name(isa);
    EXPECT_EQ(argmax_f32(40, neg_inf.data()), 0) << isa_name(isa);
  }
}

}  // namespace
}  // namespace pagoda::cpu
