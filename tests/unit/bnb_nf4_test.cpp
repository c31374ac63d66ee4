// bitsandbytes NF4 codes converted to Pagoda's NF4 blocks (model/bnb_nf4.h), against the
// plain formula w = absmax[e / blocksize] * code[q] on hand-packed bytes.
#include "model/bnb_nf4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/quant_blocks.h"

namespace pagoda {
namespace {

// The table is bitsandbytes' code book times 127, rounded: at most 0.4663/127 of absmax
// apart (the figure bnb_nf4.h and quant_blocks.h state).
TEST(BnbNf4, TableIsTheCodeBookInInt8) {
  double worst = 0;
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(cpu::kNf4Values[i], std::lround(127.0 * cpu::kNf4Code[i])) << i;
    worst = std::max(worst, std::fabs(127.0 * cpu::kNf4Code[i] - cpu::kNf4Values[i]));
  }
  EXPECT_LT(worst, 0.4663);
  EXPECT_GT(worst, 0.466);
}

TEST(BnbNf4, BlocksDequantizeToAbsmaxTimesCode) {
  std::mt19937 rng(3);
  const int64_t rows = 3, cols = 96, blocksize = 64, n = rows * cols;
  std::vector<uint8_t> codes(n), packed(n / 2);
  for (auto& c : codes) c = static_cast<uint8_t>(rng() % 16);
  for (int64_t i = 0; i < n / 2; ++i)  // bitsandbytes: element 2i in the high nibble
    packed[i] = static_cast<uint8_t>(codes[2 * i] << 4 | codes[2 * i + 1]);
  std::vector<float> absmax((n + blocksize - 1) / blocksize);  // the last block is short
  std::uniform_real_distribution<float> u(0.01f, 2.0f);
  for (float& a : absmax) a = u(rng);
  std::vector<uint8_t> out(row_bytes(DType::kNF4, cols) * rows);
  bnb_nf4_to_blocks(packed.data(), absmax.data(), blocksize, rows, cols, out.data());
  std::vector<float> got(n);
  ASSERT_TRUE(cpu::dequantize_row(DType::kNF4, out.data(), got.data(), n).is_ok());
  for (int64_t e = 0; e < n; ++e) {
    const float a = absmax[e / blocksize];
    const double want = a * cpu::kNf4Code[codes[e]];
    // The table's rounding plus d's f16 rounding (2^-11 of a / 127, times |q| <= 127).
    EXPECT_NEAR(got[e], want, a * (0.4663 / 127 + std::ldexp(1.0, -11)) + 1e-7) << e;
  }
}

}  // namespace
}  // namespace pagoda
