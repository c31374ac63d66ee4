// FP8 checkpoint weights to BF16 (model/fp8_checkpoint.h), against values worked out by
// hand: e4m3 codes whose value is known, scales that are powers of two, and BF16 ties.
#include "model/fp8_checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dtype.h"

namespace pagoda {
namespace {

// 1 + 2^-8 lies halfway between the BF16 neighbours 1 (0x3F80) and 1 + 2^-7 (0x3F81).
TEST(Fp8Checkpoint, Bf16RoundsOnceToNearestEven) {
  EXPECT_EQ(f64_to_bf16(1.0), 0x3F80);
  EXPECT_EQ(f64_to_bf16(1.0 + std::ldexp(1.0, -8)), 0x3F80);      // tie: to even
  EXPECT_EQ(f64_to_bf16(1.0 + 3 * std::ldexp(1.0, -8)), 0x3F82);  // tie: to even, up
  EXPECT_EQ(f64_to_bf16(-(1.0 + std::ldexp(1.0, -8))), 0xBF80);
  // Just above the tie: up. Through f32 first, 1 + 2^-8 + 2^-33 would round to the tie
  // 1 + 2^-8 and then to even (1): the double rounding the single rounding avoids.
  EXPECT_EQ(f64_to_bf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -33)), 0x3F81);
  EXPECT_EQ(f32_to_bf16(static_cast<float>(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -33))),
            0x3F80);
  // A carry into the exponent: (2 - 2^-9) rounds to 2.
  EXPECT_EQ(f64_to_bf16(2.0 - std::ldexp(1.0, -9)), 0x4000);
  EXPECT_EQ(f64_to_bf16(0.0), 0x0000);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f64_to_bf16(std::nan("")))));
}

// e4m3 codes: 0x38 = 1, 0x40 = 2, 0xC0 = -2, 0x7E = 448, 0x01 = 2^-9 (the smallest
// subnormal), 0x00 = 0.
TEST(Fp8Checkpoint, BlocksTakeTheScaleOfTheirTile) {
  // 3 x 5 in [2, 2] tiles: a 2 x 3 scale grid, the last tile row and column partial.
  const std::vector<uint8_t> w = {0x38, 0x38, 0x40, 0x40, 0x38,  //
                                  0xC0, 0x38, 0x38, 0x7E, 0x38,  //
                                  0x01, 0x00, 0x38, 0x38, 0x40};
  const std::vector<float> s = {0.5f, 0.25f, 4.0f,  //
                                8.0f, 1.0f,  0.125f};
  std::vector<uint16_t> out(15);
  fp8_e4m3_blocks_to_bf16(w.data(), 3, 5, s.data(), 2, 2, out.data());
  const std::vector<float> want = {0.5f,
                                   0.5f,
                                   0.5f,
                                   0.5f,
                                   4.0f,  //
                                   -1.0f,
                                   0.5f,
                                   0.25f,
                                   112.0f,
                                   4.0f,  //
                                   8.0f * std::ldexp(1.0f, -9),
                                   0.0f,
                                   1.0f,
                                   1.0f,
                                   0.25f};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(bf16_to_f32(out[i]), want[i]) << i;
}

TEST(Fp8Checkpoint, OneScaleForTheTensor) {
  const std::vector<uint8_t> w = {0x38, 0xC0, 0x7E, 0x01};
  const float s = 3.0f;  // 448 x 3 = 1344 = 0x44A8 in BF16; 2^-9 x 3 keeps its 2 bits
  std::vector<uint16_t> out(4);
  fp8_e4m3_blocks_to_bf16(w.data(), 2, 2, &s, 2, 2, out.data());
  EXPECT_EQ(bf16_to_f32(out[0]), 3.0f);
  EXPECT_EQ(bf16_to_f32(out[1]), -6.0f);
  EXPECT_EQ(out[2], 0x44A8);
  EXPECT_EQ(bf16_to_f32(out[3]), 3.0f * std::ldexp(1.0f, -9));
}

}  // namespace
}  // namespace pagoda
