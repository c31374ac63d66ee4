// Block formats: hand-built blocks checked against values worked out by hand from the
// documented GGUF layouts (a layout bug shared by quantizer and dequantizer would pass a
// round trip but not these), then quantize -> dequantize round trips per type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_ref.h"
#include "op_test_util.h"

namespace pagoda::cpu {
namespace {

constexpr uint16_t kHalf0_125 = 0x3000, kHalf0_25 = 0x3400, kHalf0_5 = 0x3800, kHalf1 = 0x3C00,
                   kHalf2 = 0x4000, kHalfMinus1 = 0xBC00;

template <typename Block>
std::vector<float> dequant(DType t, const Block& b, int n) {
  std::vector<float> y(static_cast<size_t>(n), -12345.0f);
  EXPECT_TRUE(dequantize_row(t, &b, y.data(), n).is_ok());
  return y;
}

TEST(QuantBlocks, Q4_0ByHand) {
  BlockQ4_0 b;
  b.d = kHalf0_5;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = dequant(DType::kQ4_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f) << j;
    EXPECT_EQ(y[j + 16], (7 - j) * 0.5f) << j;
  }
}

TEST(QuantBlocks, Q4_1ByHand) {
  BlockQ4_1 b;
  b.d = kHalf0_25;
  b.m = kHalfMinus1;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(((3 * j) & 15) | (j << 4));
  const auto y = dequant(DType::kQ4_1, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], ((3 * j) & 15) * 0.25f - 1.0f) << j;
    EXPECT_EQ(y[j + 16], j * 0.25f - 1.0f) << j;
  }
}

TEST(QuantBlocks, Q5_0AndQ5_1ByHand) {
  // High bits set for element 0 (bit 0) and element 31 (bit 31).
  BlockQ5_0 b0;
  b0.d = kHalf1;
  const uint8_t qh[4] = {0x01, 0x00, 0x00, 0x80};
  std::memcpy(b0.qh, qh, 4);
  for (int j = 0; j < 16; ++j) b0.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  auto y = dequant(DType::kQ5_0, b0, 32);
  EXPECT_EQ(y[0], 0.0f);    // 0 | 16, minus 16
  EXPECT_EQ(y[5], -11.0f);  // 5 - 16
  EXPECT_EQ(y[16], -1.0f);  // 15 - 16
  EXPECT_EQ(y[20], -5.0f);  // 11 - 16
  EXPECT_EQ(y[31], 0.0f);   // 0 | 16, minus 16

  BlockQ5_1 b1;
  b1.d = kHalf0_5;
  b1.m = kHalf1;
  std::memcpy(b1.qh, qh, 4);
  std::memcpy(b1.qs, b0.qs, 16);
  y = dequant(DType::kQ5_1, b1, 32);
  EXPECT_EQ(y[0], 9.0f);   // 16 * 0.5 + 1
  EXPECT_EQ(y[5], 3.5f);   // 5 * 0.5 + 1
  EXPECT_EQ(y[16], 8.5f);  // 15 * 0.5 + 1
  EXPECT_EQ(y[31], 9.0f);  // 16 * 0.5 + 1
}

TEST(QuantBlocks, Q8_0AndQ8_1ByHand) {
  BlockQ8_0 b;
  b.d = kHalf0_125;
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 7 - 100);
  auto y = dequant(DType::kQ8_0, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (j * 7 - 100) * 0.125f) << j;
  BlockQ8_1 b1;
  b1.d = kHalf0_125;
  b1.s = 0;
  std::memcpy(b1.qs, b.qs, 32);
  y = dequant(DType::kQ8_1, b1, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (j * 7 - 100) * 0.125f) << j;
}

TEST(QuantBlocks, Q2_KByHand) {
  BlockQ2_K b{};
  b.d = kHalf0_5;
  b.dmin = kHalf0_25;
  b.scales[0] = 0x31;   // sub-block 0: scale 1, min 3
  b.scales[13] = 0x2F;  // sub-block 13: scale 15, min 2
  b.qs[0] = 0x03;       // element 0: q = 3
  b.qs[52] = 0x20;      // element 128 + 64 + 20 (shift 4, sub-block 8 + 4 + 1): q = 2
  const auto y = dequant(DType::kQ2_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    float want = 0.0f;
    if (e < 16) want = -0.75f;              // 0.5*1*0 - 0.25*3
    if (e == 0) want = 0.75f;               // 0.5*1*3 - 0.25*3
    if (e >= 208 && e < 224) want = -0.5f;  // 0.5*15*0 - 0.25*2
    if (e == 212) want = 14.5f;             // 0.5*15*2 - 0.25*2
    EXPECT_EQ(y[e], want) << e;
  }
}

TEST(QuantBlocks, Q3_KByHand) {
  BlockQ3_K b{};
  b.d = kHalf1;
  // Every 6-bit scale 32 (so zero after the -32 offset): high bits 0b10 everywhere.
  for (int i = 8; i < 12; ++i) b.scales[i] = 0xAA;
  b.scales[0] = 0x02;   // sub-block 0: low nibble 2 -> 34 -> +2
  b.scales[2] = 0x40;   // sub-block 10: low nibble (high half of byte 2) 4
  b.scales[10] = 0x9A;  // ... and high bits (bits 4..5 of byte 8 + 2) 01 -> 20 -> -12
  b.qs[0] = 0x01;
  b.hmask[0] = 0x01;  // element 0: q = 1, high bit set -> 1
  b.qs[35] = 0x0C;    // element 128 + 32 + 3 (shift 2): q = 3
  b.hmask[3] = 0x20;  // its high bit is bit 4*1 + 1
  const auto y = dequant(DType::kQ3_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    float want = 0.0f;
    if (e < 16) want = -8.0f;               // 2 * (0 - 4)
    if (e == 0) want = 2.0f;                // 2 * 1
    if (e >= 160 && e < 176) want = 48.0f;  // -12 * (0 - 4)
    if (e == 163) want = -36.0f;            // -12 * 3
    EXPECT_EQ(y[e], want) << e;
  }
}

TEST(QuantBlocks, Q4_KByHand) {
  BlockQ4_K b{};
  b.d = kHalf1;
  b.dmin = kHalf0_5;
  b.scales[0] = 3;     // sc0 = 3
  b.scales[4] = 2;     // m0 = 2
  b.scales[9] = 0x2D;  // sub-block 5: low nibbles of sc (13) and m (2)
  b.scales[1] = 0x80;  // top bits of sc5: 0b10 -> sc5 = 45
  b.scales[5] = 0xC0;  // top bits of m5: 0b11 -> m5 = 50
  b.qs[0] = 0x7A;      // element 0 = 10 (sub-block 0), element 32 = 7 (sub-block 1)
  b.qs[67] = 0xC0;     // element 128 + 32 + 3 = 163 (high nibble, sub-block 5) = 12
  const auto y = dequant(DType::kQ4_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    float want = 0.0f;
    if (e < 32) want = -1.0f;                // 3*0 - 0.5*2
    if (e == 0) want = 29.0f;                // 3*10 - 1
    if (e >= 160 && e < 192) want = -25.0f;  // 45*0 - 0.5*50
    if (e == 163) want = 515.0f;             // 45*12 - 25
    EXPECT_EQ(y[e], want) << e;
  }
}

TEST(QuantBlocks, Q5_KByHand) {
  BlockQ5_K b{};
  b.d = kHalf1;
  b.dmin = kHalf1;
  b.scales[0] = 1;  // sc0 = 1, m0 = 0
  b.scales[3] = 2;  // sc3 = 2
  b.scales[7] = 1;  // m3 = 1
  b.qs[0] = 0x04;
  b.qh[0] = 0x01;  // element 0: 4 | 16 = 20
  b.qs[37] = 0xE0;
  b.qh[5] = 0x08;  // element 64 + 32 + 5 = 101 (sub-block 3): 14 | 16 = 30
  const auto y = dequant(DType::kQ5_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    float want = 0.0f;
    if (e == 0) want = 20.0f;
    if (e >= 96 && e < 128) want = -1.0f;  // 2*0 - 1
    if (e == 101) want = 59.0f;            // 2*30 - 1
    EXPECT_EQ(y[e], want) << e;
  }
}

TEST(QuantBlocks, Q6_KByHand) {
  BlockQ6_K b{};
  b.d = kHalf0_5;
  b.scales[0] = 2;
  b.scales[7] = -3;
  b.scales[9] = 4;
  b.ql[0] = 0x95;  // element 0 low bits 5, element 64 low bits 9
  b.qh[0] = 0x83;  // element 0 high bits 3, element 96 high bits 2
  b.ql[52] = 0xF0;
  b.qh[20] = 0x40;  // element 96 + 20 = 116 (sub-block 7): 15 | 1 << 4 = 31
  b.ql[81] = 0x0C;
  b.qh[49] = 0x01;  // element 128 + 17 = 145 (sub-block 9): 12 | 16 = 28
  const auto y = dequant(DType::kQ6_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    float want = 0.0f;
    if (e < 16) want = -32.0f;               // 0.5*2*(0-32)
    if (e == 0) want = 21.0f;                // 0.5*2*(53-32)
    if (e >= 112 && e < 128) want = 48.0f;   // 0.5*-3*(0-32)
    if (e == 116) want = 1.5f;               // 0.5*-3*(31-32)
    if (e >= 144 && e < 160) want = -64.0f;  // 0.5*4*(0-32)
    if (e == 145) want = -8.0f;              // 0.5*4*(28-32)
    EXPECT_EQ(y[e], want) << e;
  }
}

TEST(QuantBlocks, Q8_KByHand) {
  BlockQ8_K b{};
  b.d = 0.5f;
  for (int j = 0; j < 256; ++j) b.qs[j] = static_cast<int8_t>(j - 128);
  const auto y = dequant(DType::kQ8_K, b, 256);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(y[j], (j - 128) * 0.5f) << j;
}

// The quantizers' rounding rules on values chosen to land on ties.
TEST(QuantBlocks, Q8_0RoundsHalvesAwayFromZero) {
  float x[32] = {};
  x[0] = 127.0f;  // d = 1 exactly
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.49f;
  BlockQ8_0 b;
  quantize_block_q8_0(x, &b);
  EXPECT_EQ(b.d, kHalf1);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 3);
  EXPECT_EQ(b.qs[2], -3);
  EXPECT_EQ(b.qs[3], 0);
  BlockQ8_1 b1;
  quantize_block_q8_1(x, &b1);
  EXPECT_EQ(b1.s, f32_to_fp16(127.0f));  // 127 + 3 - 3 + 0
}

TEST(QuantBlocks, Q8_KRoundsTiesToEvenAndCaps) {
  float x[256] = {};
  x[0] = -127.0f;  // max is negative: iscale = 1
  x[1] = 2.5f;
  x[2] = 3.5f;
  x[3] = 127.0f;
  BlockQ8_K b;
  quantize_block_q8_k(x, &b);
  EXPECT_EQ(b.d, 1.0f / (-127.0f / -127.0f));
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[1], 2);
  EXPECT_EQ(b.qs[2], 4);
  EXPECT_EQ(b.qs[3], 127);
  EXPECT_EQ(b.bsums[0], -127 + 2 + 4 + 127);
  // A positive max maps to -127 (iscale is negative).
  x[0] = 127.0f;
  x[3] = -100.0f;
  quantize_block_q8_k(x, &b);
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[3], 100);
  EXPECT_EQ(b.d, -1.0f);
}

TEST(QuantBlocks, Q4_0AndQ4_1Rules) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);  // max magnitude -16
  BlockQ4_0 b;
  ASSERT_TRUE(quantize_row(DType::kQ4_0, x, &b, 32).is_ok());
  EXPECT_EQ(b.d, kHalf2);  // -16 / -8
  // q = min(15, trunc(x / 2 + 8.5)): x = -16 -> 0, x = -1 -> 8, x = 15 -> 15 (16 capped)
  EXPECT_EQ(b.qs[0] & 0xF, 0);
  EXPECT_EQ(b.qs[15] & 0xF, 8);
  EXPECT_EQ(b.qs[15] >> 4, 15);
  BlockQ4_1 b1;
  ASSERT_TRUE(quantize_row(DType::kQ4_1, x, &b1, 32).is_ok());
  EXPECT_EQ(b1.m, f32_to_fp16(-16.0f));
  EXPECT_EQ(b1.d, f32_to_fp16(31.0f / 15.0f));
}

struct RoundTripCase {
  DType type;
  double bound;  // on nmse for N(0, 1) data
};

// Bounds: a uniform rounding error of step s has variance s^2 / 12; with block maxima of
// about 2.5 sigma over 32 (3 sigma over 256) this predicts Q8_0 ~3e-5, Q8_K ~5e-5, Q4_0
// (step amax / 8) ~8e-3, Q4_1 (step range / 15) ~7e-3, Q6_K (step amax16 / 31) ~4e-4,
// Q5_K (range / 31) ~2e-3, Q4_K ~7e-3; F16 and BF16 round relatively to 2^-11 and 2^-8
// (4e-8, 3e-6). Measured values sit at those; each bound is about 2x the measurement.
const RoundTripCase kRoundTrips[] = {
    {DType::kF32, 0.0},
    {DType::kF16, 1e-7},
    {DType::kBF16, 6e-6},
    {DType::kQ8_0, 6e-5},
    {DType::kQ8_1, 6e-5},
    {DType::kQ8_K, 1e-4},
    {DType::kQ4_0, 1.5e-2},
    {DType::kQ4_1, 1.2e-2},
    {DType::kQ4_K, 1.3e-2},
    {DType::kQ5_K, 3e-3},
    {DType::kQ6_K, 8e-4},
    // Uniform data over 16-element sub-blocks: step^2 / 12 against the signal's 1/3 is
    // 0.11 for Q2_K's 4 levels and 0.018 for Q3_K's 8, before the scales' own rounding.
    {DType::kQ2_K, 1.3e-1},
    {DType::kQ3_K, 2.5e-2},
};

TEST(QuantBlocks, RoundTripErrorIsBounded) {
  std::mt19937 rng(1234);
  const int n = 256 * 64;
  for (const auto& c : kRoundTrips) {
    const auto x = testing::random_floats(rng, n);
    std::vector<uint8_t> q(row_bytes(c.type, n));
    ASSERT_TRUE(quantize_row(c.type, x.data(), q.data(), n).is_ok()) << dtype_name(c.type);
    std::vector<float> y(n);
    ASSERT_TRUE(dequantize_row(c.type, q.data(), y.data(), n).is_ok());
    const double e = testing::nmse(y.data(), x.data(), n);
    EXPECT_LE(e, c.bound) << dtype_name(c.type);
    // The bounds are meant to be tight: a much better result hints at a broken test.
    if (c.bound > 0) {
      EXPECT_GE(e, c.bound / 20) << dtype_name(c.type);
    }
  }
}

// The K quantizers' search on blocks that stress it: all zeros (exact), a constant, one
// spike among zeros, all-negative and all-positive values, small and large magnitudes.
// Every output must be finite, and no worse than the block's one-value approximation
// (its mean), which every format can nearly represent. (Not tiny ones: below about 1e-5
// a block's fp16 scale falls under fp16's range, in every implementation of the format.)
TEST(QuantBlocks, KQuantizersHandleDegenerateBlocks) {
  std::mt19937 rng(77);
  std::vector<std::vector<float>> blocks;
  blocks.emplace_back(256, 0.0f);
  blocks.emplace_back(256, 0.37f);
  blocks.emplace_back(256, -2.5f);
  std::vector<float> spike(256, 0.0f);
  spike[100] = 5.0f;
  blocks.push_back(spike);
  spike[100] = -5.0f;
  blocks.push_back(spike);
  for (const float scale : {1e-3f, 1.0f, 1e3f}) {
    auto x = testing::random_floats(rng, 256);
    std::vector<float> neg(256), pos(256);
    for (int i = 0; i < 256; ++i) {
      neg[i] = -std::fabs(x[i]) * scale - scale;
      pos[i] = std::fabs(x[i]) * scale + scale;
    }
    blocks.push_back(neg);
    blocks.push_back(pos);
  }
  for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (size_t b = 0; b < blocks.size(); ++b) {
      const std::vector<float>& x = blocks[b];
      std::vector<uint8_t> q(row_bytes(t, 256));
      ASSERT_TRUE(quantize_row(t, x.data(), q.data(), 256).is_ok());
      std::vector<float> y(256);
      ASSERT_TRUE(dequantize_row(t, q.data(), y.data(), 256).is_ok());
      double mean = 0, err = 0, err_mean = 0;
      for (float v : x) mean += v / 256.0;
      for (int i = 0; i < 256; ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << dtype_name(t) << " block " << b;
        err += (y[i] - x[i]) * (y[i] - x[i]);
        err_mean += (mean - x[i]) * (mean - x[i]);
      }
      if (b == 0) {
        EXPECT_EQ(err, 0.0) << dtype_name(t);
      }
      // The fp16 block scale rounds a constant by up to 2^-11 relative.
      EXPECT_LE(err, err_mean + 256 * std::pow(mean * 1e-3, 2)) << dtype_name(t) << " block " << b;
    }
  }
}

TEST(QuantBlocks, RejectsPartialBlocks) {
  float x[40] = {};
  uint8_t q[64];
  EXPECT_FALSE(quantize_row(DType::kQ4_0, x, q, 40).is_ok());
  EXPECT_FALSE(dequantize_row(DType::kQ4_K, q, x, 40).is_ok());
  EXPECT_FALSE(quantize_row(DType::kI32, x, q, 4).is_ok());
}

// An importance per column (pagoda imatrix) should cut the error it weighs: over a
// matrix of normal weights whose columns' importances spread over two decades, the
// weighted squared error of quantize_row_weighted with those importances against the
// same search with flat ones (so what is measured is the importances' effect, not the
// search's). Without an importance the bytes are quantize_row's.
TEST(QuantBlocks, ImportanceWeightsTheError) {
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  constexpr int64_t kCols = 512, kRows = 64;
  std::vector<float> qw(kCols), flat(kCols, 1.0f);
  for (float& v : qw) v = std::exp(2.3f * nd(rng));  // log-normal: a few columns dominate
  std::vector<float> x(static_cast<size_t>(kCols * kRows));
  for (float& v : x) v = nd(rng);
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K,
                  DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const size_t rb = row_bytes(t, kCols);
    std::vector<uint8_t> plain(rb), weighted(rb), none(rb);
    std::vector<float> yp(kCols), yw(kCols);
    double ep = 0, ew = 0;
    for (int64_t r = 0; r < kRows; ++r) {
      const float* row = x.data() + r * kCols;
      ASSERT_TRUE(quantize_row(t, row, none.data(), kCols).is_ok());
      ASSERT_TRUE(quantize_row_weighted(t, row, weighted.data(), kCols, qw.data()).is_ok());
      ASSERT_TRUE(quantize_row_weighted(t, row, plain.data(), kCols, nullptr).is_ok());
      EXPECT_EQ(none, plain) << dtype_name(t);
      ASSERT_TRUE(quantize_row_weighted(t, row, plain.data(), kCols, flat.data()).is_ok());
      ASSERT_TRUE(dequantize_row(t, plain.data(), yp.data(), kCols).is_ok());
      ASSERT_TRUE(dequantize_row(t, weighted.data(), yw.data(), kCols).is_ok());
      for (int64_t c = 0; c < kCols; ++c) {
        ep += qw[c] * (yp[c] - row[c]) * (yp[c] - row[c]);
        ew += qw[c] * (yw[c] - row[c]) * (yw[c] - row[c]);
      }
    }
    EXPECT_LT(ew, 0.9 * ep) << dtype_name(t) << ": weighted " << ew << " against " << ep;
  }
  // Zero importances (columns never reached) and zero blocks stay finite.
  std::vector<float> zeros(kCols, 0.0f);
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K,
                  DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    std::vector<uint8_t> q(row_bytes(t, kCols));
    std::vector<float> y(kCols);
    for (const float* row : {x.data(), zeros.data()}) {
      ASSERT_TRUE(quantize_row_weighted(t, row, q.data(), kCols, zeros.data()).is_ok());
      ASSERT_TRUE(dequantize_row(t, q.data(), y.data(), kCols).is_ok());
      for (float v : y) ASSERT_TRUE(std::isfinite(v)) << dtype_name(t);
    }
  }
}

}  // namespace
}  // namespace pagoda::cpu
