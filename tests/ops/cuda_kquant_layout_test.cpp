// The CUDA backend's device layout of the K types (backend/cuda/kquant_layout.h), run on
// the host: the functions the repack, dequantization and matrix-vector kernels call on
// the device are the ones called here, checked against the CPU backend's dequantization
// of the same GGUF bytes (element for element, bit for bit) and against an exact dot
// product of those values with 8-bit activations. What only the GPU runs (the warps'
// share of the blocks, the loads) is checked by pagoda_cuda_tests.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cuda/kquant_layout.h"
#include "core/dtype.h"
#include "model/cuda_weight_types.h"

namespace pagoda {
namespace {

constexpr DType kTypes[] = {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

// GGUF rows of `n` elements: quantized from random floats (values a real file has), or
// random bytes with finite fp16 scales (every bit pattern of quants and sub-scales).
std::vector<uint8_t> gguf_rows(DType t, int64_t n, bool random_bytes, std::mt19937& rng) {
  std::vector<uint8_t> raw(row_bytes(t, n));
  if (!random_bytes) {
    std::normal_distribution<float> nd(0.0f, 0.02f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = nd(rng);
    EXPECT_TRUE(cpu::quantize_row(t, v.data(), raw.data(), n));
    return raw;
  }
  for (uint8_t& b : raw) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(-1e-3f, 1e-3f);
  const int bb = static_cast<int>(dtype_info(t).block_bytes);
  for (size_t off = 0; off < raw.size(); off += static_cast<size_t>(bb)) {
    const size_t at[2] = {t == DType::kQ6_K ? 208u : 0u, 2u};
    for (int k = 0; k < (t == DType::kQ6_K ? 1 : 2); ++k) {
      const uint16_t h = f32_to_fp16(scale(rng));
      raw[off + at[k]] = static_cast<uint8_t>(h & 0xFF);
      raw[off + at[k] + 1] = static_cast<uint8_t>(h >> 8);
    }
  }
  return raw;
}

// The device arrays of one matrix, filled as the repack kernel (weights.cu) fills them:
// kq::repack_sub for each 32-element sub-block, in any order.
struct DeviceLayout {
  std::vector<uint8_t> quants, high;
  std::vector<uint16_t> scales, supers;
  kq::Arrays arrays() { return {quants.data(), high.data(), scales.data(), supers.data()}; }
  kq::Block block(kq::KType t, int64_t b) const {
    kq::Block k;
    for (int i = 0; i < 4; ++i)
      k.q[i] = static_cast<uint32_t>(quants[b * 16 + 4 * i]) |
               static_cast<uint32_t>(quants[b * 16 + 4 * i + 1]) << 8 |
               static_cast<uint32_t>(quants[b * 16 + 4 * i + 2]) << 16 |
               static_cast<uint32_t>(quants[b * 16 + 4 * i + 3]) << 24;
    const int hb = kq::high_bytes(t);
    for (int w = 0; w < 2; ++w) {
      k.hi[w] = 0;
      for (int i = 0; i < 4 && 4 * w + i < hb; ++i)
        k.hi[w] |= static_cast<uint32_t>(high[b * hb + 4 * w + i]) << (8 * i);
    }
    kq::set_factors(t, scales[b], supers[b / 8 * 2], supers[b / 8 * 2 + 1], &k);
    return k;
  }
};

DeviceLayout repack_all(kq::KType t, const std::vector<uint8_t>& raw, int64_t n) {
  DeviceLayout d;
  const int64_t subs = n / 32;
  d.quants.assign(static_cast<size_t>(subs * 16), 0xAA);  // poisoned: every byte is written
  d.high.assign(static_cast<size_t>(subs * kq::high_bytes(t)), 0xAA);
  d.scales.assign(static_cast<size_t>(subs), 0xAAAA);
  d.supers.assign(static_cast<size_t>(n / 256 * 2), 0xAAAA);
  // Backwards, as threads may run: each writes only its own sub-block's bytes.
  for (int64_t s = subs - 1; s >= 0; --s) kq::repack_sub(t, raw.data(), s, 0, d.arrays());
  return d;
}

TEST(CudaKQuantLayout, ElementsAreTheCpusDequantizationBitForBit) {
  std::mt19937 rng(31);
  const int64_t n = 4 * 256;
  for (DType t : kTypes) {
    const kq::KType kt = kq::ktype_of(t);
    ASSERT_NE(kt, kq::KType::kNone);
    EXPECT_EQ(kq::gguf_block_bytes(kt), static_cast<int>(dtype_info(t).block_bytes));
    for (bool random_bytes : {false, true}) {
      const std::vector<uint8_t> raw = gguf_rows(t, n, random_bytes, rng);
      std::vector<float> want(static_cast<size_t>(n));
      ASSERT_TRUE(cpu::dequantize_row(t, raw.data(), want.data(), n));
      DeviceLayout d = repack_all(kt, raw, n);
      for (int64_t b = 0; b < n / 32; ++b) {
        const kq::Block k = d.block(kt, b);
        for (int e = 0; e < 32; ++e) {
          const float got = kq::element(kt, k, e);
          // The dequantization kernel's own read of the arrays gives the same value.
          ASSERT_EQ(bits_from_f32(kq::element_at(kt, d.arrays(), b, e)), bits_from_f32(got));
          ASSERT_EQ(bits_from_f32(got), bits_from_f32(want[static_cast<size_t>(b * 32 + e)]))
              << dtype_name(t) << (random_bytes ? " random bytes" : " quantized") << " element "
              << b * 32 + e << ": " << got << " against " << want[static_cast<size_t>(b * 32 + e)];
        }
      }
    }
  }
}

TEST(CudaKQuantLayout, BlockDotIsTheExactDotOfTheValues) {
  std::mt19937 rng(32);
  std::uniform_int_distribution<int> q8(-127, 127);
  const int64_t n = 8 * 256;
  for (DType t : kTypes) {
    const kq::KType kt = kq::ktype_of(t);
    for (bool random_bytes : {false, true}) {
      const std::vector<uint8_t> raw = gguf_rows(t, n, random_bytes, rng);
      std::vector<float> w(static_cast<size_t>(n));
      ASSERT_TRUE(cpu::dequantize_row(t, raw.data(), w.data(), n));
      const DeviceLayout d = repack_all(kt, raw, n);
      for (int64_t b = 0; b < n / 32; ++b) {
        // 8-bit activations as Q8Act holds them: 32 quants, a scale and their sum.
        int8_t xq[32];
        int c = 0;
        for (int8_t& v : xq) {
          v = static_cast<int8_t>(b % 7 == 0 ? 127 : q8(rng));  // some blocks at the limit
          c += v;
        }
        int xs[8];
        for (int k = 0; k < 8; ++k)
          xs[k] =
              static_cast<int>(static_cast<uint32_t>(static_cast<uint8_t>(xq[4 * k])) |
                               static_cast<uint32_t>(static_cast<uint8_t>(xq[4 * k + 1])) << 8 |
                               static_cast<uint32_t>(static_cast<uint8_t>(xq[4 * k + 2])) << 16 |
                               static_cast<uint32_t>(static_cast<uint8_t>(xq[4 * k + 3])) << 24);
        const float dx = 0.0123f;
        double exact = 0, mag = 0;
        for (int e = 0; e < 32; ++e) {
          const double p = static_cast<double>(w[static_cast<size_t>(b * 32 + e)]) * dx * xq[e];
          exact += p;
          mag += std::fabs(p);
        }
        const float got = kq::dot(kt, d.block(kt, b), xs, dx, c);
        // Integer sums are exact; two f32 products and a sum: a few ulps of the magnitude.
        ASSERT_NEAR(got, exact, 1e-6 * mag + 1e-30)
            << dtype_name(t) << (random_bytes ? " random bytes" : " quantized") << " block " << b;
      }
    }
  }
}

TEST(CudaKQuantLayout, DeviceBytesAreTheArrays) {
  for (DType t : kTypes) {
    const kq::KType kt = kq::ktype_of(t);
    const int64_t n = 4096 * 256;
    // quants + high bits + scale words per 32, two fp16 per 256
    const int64_t arrays = n / 2 + n / 32 * kq::high_bytes(kt) + n / 32 * 2 + n / 256 * 4;
    EXPECT_EQ(cuda_weight_bytes(t, n), arrays) << dtype_name(t);
    // Against the file: at most 3% more (Q6_K: 2 bytes a block).
    const double file = static_cast<double>(row_bytes(t, n));
    EXPECT_GE(static_cast<double>(arrays), file) << dtype_name(t);
    EXPECT_LT(static_cast<double>(arrays), 1.03 * file) << dtype_name(t);
  }
  EXPECT_EQ(cuda_weight_bytes(DType::kQ4_0, 4096),
            static_cast<int64_t>(row_bytes(DType::kQ4_0, 4096)));
}

}  // namespace
}  // namespace pagoda
