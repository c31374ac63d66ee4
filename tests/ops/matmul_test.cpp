// matmul() on every ISA level this machine has, for every weight type, against a plain
// reference: weights dequantized to f32, activations quantized to the kernel's activation
// type by the reference quantizer and dequantized, products summed in double. Since the
// kernels see exactly those values, what is left is f32 rounding in the block scaling and
// accumulation, so the bounds can be tight enough to catch a wrong scale rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/gemm_kernels.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/packed_weights.h"
#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_ref.h"
#include "core/thread_pool.h"
#include "op_test_util.h"

namespace pagoda::cpu {
namespace {

ThreadPool& pool(int threads) {
  static std::unique_ptr<ThreadPool> pools[4];
  if (!pools[threads]) pools[threads] = std::make_unique<ThreadPool>(threads);
  return *pools[threads];
}

DType act_type(DType w) {
  switch (w) {
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ8_0:
    case DType::kIQ4_NL:
    case DType::kIQ4_XS:
    case DType::kMXFP4:
    case DType::kNF4:
    case DType::kQ4_G64:
    case DType::kQ4_G128:
      return DType::kQ8_0;
    case DType::kQ4_1:
    case DType::kQ5_1:
      return DType::kQ8_1;
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return DType::kQ8_K;
    case DType::kFP8:
      return DType::kF32;  // FP8 weights take F32's activations
    default:
      return w;
  }
}

bool is_quant(DType t) {
  return dtype_info(t).block_elems > 1;
}

std::vector<int64_t> cols_for(DType t) {
  if (dtype_info(t).block_elems == 256) return {256, 1536};
  if (t == DType::kFP8) return {32, 96, 160, 576, 1536};  // 96, 160: not whole 64s
  if (t == DType::kQ4_G64) return {64, 192, 576, 1536};
  if (t == DType::kQ4_G128) return {128, 384, 640, 1536};
  if (is_quant(t)) return {32, 64, 256, 576, 1536};
  return {7, 32, 64, 256, 576, 1536};  // float types take any width
}

// Offsets of the f16 scale fields of a block, which random bytes must not make inf/nan.
std::vector<int> half_fields(DType t) {
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ8_0:
    case DType::kIQ4_NL:
    case DType::kIQ4_XS:
    case DType::kNF4:
    case DType::kQ4_G64:
    case DType::kQ4_G128:
      return {0};
    case DType::kQ4_1:
    case DType::kQ5_1:
      return {0, 2};
    case DType::kQ4_K:
    case DType::kQ5_K:
      return {0, 2};
    case DType::kQ6_K:
      return {208};
    case DType::kQ3_K:
      return {108};
    case DType::kQ2_K:
      return {80, 82};
    default:
      return {};
  }
}

// MXFP4's scale 2^(e - 128), made small as half_fields' f16 scales (2^-12 .. 2^-4): a
// random byte would overflow f32 products.
void set_small_e8m0(std::mt19937& rng, DType t, uint8_t* block) {
  if (t == DType::kMXFP4) block[0] = static_cast<uint8_t>(116 + rng() % 13);
}

// A GGUF tensor: quantized from N(0,1) values, or (random_bits) arbitrary quant bytes
// with small random scales, which reaches every nibble pattern, 6-bit scale and i8
// scale (including -128) that a file may hold. Q2_K, Q3_K and the table types (IQ4_NL,
// IQ4_XS, MXFP4, NF4) have no reference quantizer (files come from llama.cpp), nor have
// Q4_G64/Q4_G128 (checkpoint loaders make them): always random bits, which their fields
// can all be (a Q4_G zero point above 15 included).
std::vector<uint8_t> make_weights(std::mt19937& rng, DType t, int64_t rows, int64_t cols,
                                  bool random_bits) {
  std::vector<uint8_t> w(row_bytes(t, cols) * rows);
  const bool quantizer = t != DType::kQ2_K && t != DType::kQ3_K && !is_table4(t) &&
                         t != DType::kFP8 && q4g_sub_blocks(t) == 0;
  if (!random_bits && quantizer) {
    const auto f = testing::random_floats(rng, static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      EXPECT_TRUE(
          quantize_row(t, f.data() + r * cols, w.data() + r * row_bytes(t, cols), cols).is_ok());
    return w;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
  const size_t bb = dtype_info(t).block_bytes;
  for (size_t off = 0; off < w.size(); off += bb) {
    for (int f : half_fields(t)) {
      const uint16_t h = f32_to_fp16(scale(rng) * (byte(rng) & 1 ? 1.0f : -1.0f));
      std::memcpy(&w[off + f], &h, 2);
    }
    set_small_e8m0(rng, t, &w[off]);
    if (t == DType::kFP8) {  // a small f32 scale; NaN bytes (a loader refuses them) to 448
      const float d = scale(rng) * (byte(rng) & 1 ? 1.0f : -1.0f);
      std::memcpy(&w[off], &d, 4);
      for (size_t i = 4; i < bb; ++i)
        if ((w[off + i] & 0x7F) == 0x7F) w[off + i] ^= 1;
    }
  }
  return w;
}

std::vector<float> dequant_rows(DType t, const uint8_t* data, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_TRUE(
        dequantize_row(t, data + r * row_bytes(t, cols), out.data() + r * cols, cols).is_ok());
  return out;
}

// y[t][r] in double, from the values the kernel is meant to see.
std::vector<double> reference(DType t, const std::vector<uint8_t>& w, int64_t rows, int64_t cols,
                              const float* x, int64_t n, int64_t x_stride) {
  const auto wf = dequant_rows(t, w.data(), rows, cols);
  const DType at = act_type(t);
  std::vector<double> y(static_cast<size_t>(n * rows));
  std::vector<uint8_t> xq(std::max(row_bytes(at, cols), row_bytes(DType::kQ8_1, cols)));
  std::vector<float> xf(static_cast<size_t>(cols));
  for (int64_t i = 0; i < n; ++i) {
    if (at == DType::kQ8_0 || at == DType::kQ8_1) {
      // Activations are quantized with llama.cpp's x86 activation rule.
      for (int64_t b = 0; b < cols / kQK; ++b)
        quantize_block_q8_act(x + i * x_stride + b * kQK,
                              reinterpret_cast<BlockQ8_1*>(xq.data()) + b);
      EXPECT_TRUE(dequantize_row(DType::kQ8_1, xq.data(), xf.data(), cols).is_ok());
    } else {
      EXPECT_TRUE(quantize_row(at, x + i * x_stride, xq.data(), cols).is_ok());
      EXPECT_TRUE(dequantize_row(at, xq.data(), xf.data(), cols).is_ok());
    }
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(wf[r * cols + c]) * xf[c];
      if (t == DType::kQ4_1 || t == DType::kQ5_1) {
        // llama.cpp's Q4_1/Q5_1 x Q8_1 adds m * s with s = f16(d * sum q) from the f32 d,
        // not m * d16 * sum q as the dequantized product above has it. m follows d in both
        // blocks.
        const size_t wbytes = dtype_info(t).block_bytes;
        for (int64_t b = 0; b < cols / kQK; ++b) {
          uint16_t wm;
          BlockQ8_1 xb;
          std::memcpy(&wm, w.data() + r * row_bytes(t, cols) + b * wbytes + 2, 2);
          std::memcpy(&xb, xq.data() + b * sizeof(xb), sizeof(xb));
          int sum = 0;
          for (int e = 0; e < kQK; ++e) sum += xb.qs[e];
          s +=
              static_cast<double>(fp16_to_f32(wm)) * (static_cast<double>(fp16_to_f32(xb.s)) -
                                                      static_cast<double>(fp16_to_f32(xb.d)) * sum);
        }
      }
      y[static_cast<size_t>(i * rows + r)] = s;
    }
  }
  return y;
}

// Kernel vs reference: the integer block dots are exact, leaving a few f32 roundings per
// block (scale product, int->float, accumulate) or per column for float weights; for
// random signs that is nmse ~ 1e-14 .. 1e-12 at these sizes. 1e-9 keeps a wide margin yet
// fails on any real mistake: one wrong block of 48 gives ~2e-2, skipping the f16 rounding
// of an activation or scale ~1e-7.
constexpr double kRefBound = 1e-9;
// ISA levels against each other: same values, different summation order.
constexpr double kCrossIsaBound = 1e-10;

class MatmulTest : public ::testing::TestWithParam<DType> {};

// PAGODA_TEST_VERBOSE=1 prints the worst error per ISA level, to re-derive the bounds.
bool verbose() {
  static const bool v = std::getenv("PAGODA_TEST_VERBOSE") != nullptr;
  return v;
}

TEST_P(MatmulTest, MatchesReferenceOnEveryIsa) {
  const DType t = GetParam();
  const auto isas = testing::available_isas();
  std::mt19937 rng(static_cast<uint32_t>(t) * 7919u + 1);
  MatmulScratch scratch;
  int case_index = 0;
  std::vector<double> worst(isas.size(), 0.0), worst_cross(isas.size(), 0.0);
  for (int64_t cols : cols_for(t)) {
    for (int64_t rows : {1, 3, 37, 100}) {
      for (bool random_bits : {false, true}) {
        if (random_bits && (!is_quant(t) || rows != 37)) continue;
        const auto wbytes = make_weights(rng, t, rows, cols, random_bits);
        auto wm = WeightMatrix::from_gguf(t, wbytes.data(), rows, cols);
        ASSERT_TRUE(wm.is_ok()) << wm.status().message();
        ASSERT_EQ(wm->rows(), rows);
        ASSERT_EQ(wm->cols(), cols);
        for (int64_t n : {1, 2, 3, 5, 8, 17, 64, 130}) {
          const int64_t x_stride = cols + 5, y_stride = rows + 3;
          auto x = testing::random_floats(rng, static_cast<size_t>(n * x_stride));
          const auto ref = reference(t, wbytes, rows, cols, x.data(), n, x_stride);
          std::vector<std::vector<float>> outs;
          for (Isa isa : isas) {
            const int threads = 1 + case_index++ % 3;
            testing::IsaScope scope(isa);
            std::vector<float> y(static_cast<size_t>(n * y_stride),
                                 std::numeric_limits<float>::quiet_NaN());
            matmul(*wm, x.data(), n, x_stride, y.data(), y_stride, pool(threads), scratch);
            std::vector<float> packed(static_cast<size_t>(n * rows));
            bool gap_untouched = true;
            for (int64_t i = 0; i < n; ++i) {
              for (int64_t r = 0; r < rows; ++r) packed[i * rows + r] = y[i * y_stride + r];
              for (int64_t r = rows; r < y_stride; ++r)
                gap_untouched &= std::isnan(y[i * y_stride + r]);
            }
            const std::string where = std::string(dtype_name(t)) + " " +
                                      std::string(isa_name(isa)) + " rows=" + std::to_string(rows) +
                                      " cols=" + std::to_string(cols) + " n=" + std::to_string(n) +
                                      " threads=" + std::to_string(threads) +
                                      (random_bits ? " random-bits" : "");
            EXPECT_TRUE(gap_untouched) << where << ": wrote outside the output rows";
            const double e = testing::nmse(packed.data(), ref.data(), packed.size());
            ASSERT_LE(e, kRefBound) << where;
            worst[outs.size()] = std::max(worst[outs.size()], e);
            if (!outs.empty()) {
              const double c = testing::nmse(packed.data(), outs[0].data(), packed.size());
              EXPECT_LE(c, kCrossIsaBound) << where << " vs " << isa_name(isas[0]);
              worst_cross[outs.size()] = std::max(worst_cross[outs.size()], c);
            }
            outs.push_back(std::move(packed));
          }
        }
      }
    }
  }
  for (size_t i = 0; verbose() && i < isas.size(); ++i) {
    std::printf("%s %s: kernel %s, worst nmse vs reference %.3g, vs %s %.3g\n",
                std::string(dtype_name(t)).c_str(), std::string(isa_name(isas[i])).c_str(),
                gemm_kernel(t, isas[i]) == gemm_kernel_generic(t) ? "generic" : "own", worst[i],
                std::string(isa_name(isas[0])).c_str(), worst_cross[i]);
  }
}

TEST_P(MatmulTest, DequantizeRowMatchesGgufRow) {
  const DType t = GetParam();
  std::mt19937 rng(99);
  for (bool random_bits : {false, true}) {
    if (random_bits && !is_quant(t)) continue;
    const int64_t rows = 19, cols = cols_for(t).back();
    const auto wbytes = make_weights(rng, t, rows, cols, random_bits);
    auto wm = WeightMatrix::from_gguf(t, wbytes.data(), rows, cols);
    ASSERT_TRUE(wm.is_ok());
    const auto want = dequant_rows(t, wbytes.data(), rows, cols);
    std::vector<float> got(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      wm->dequantize_row(r, got.data());
      ASSERT_EQ(std::memcmp(got.data(), want.data() + r * cols, cols * sizeof(float)), 0) << r;
    }
  }
}

// Every ISA's activation converter must produce the reference quantizer's bits. Slots
// of tokens past n are unspecified: bytes the scalar converter leaves alone (they differ
// between two fills) are not compared.
TEST_P(MatmulTest, ActivationConversionIsBitExact) {
  const DType t = GetParam();
  std::mt19937 rng(5);
  for (Isa isa : testing::available_isas()) {
    const GemmKernel* k = gemm_kernel(t, isa);
    ASSERT_NE(k, nullptr);
    const int g = k->token_group;
    const bool bf16_pairs = t == DType::kBF16 && isa == Isa::kAvx512 && k == gemm_kernel_avx512(t);
    for (int64_t cols : cols_for(t)) {
      const int64_t xs = cols + 3;
      for (int n : {1, 3, g}) {
        if (n > g) continue;
        auto x = testing::random_floats(rng, static_cast<size_t>(n * xs));
        // Ties of the roundings, and an all-zero block.
        for (int64_t c = 0; c < std::min<int64_t>(cols, 32); ++c) x[c] = c % 2 ? 0.5f : 0.0f;
        if (cols >= 64) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
        const size_t bytes = k->act_group_bytes(cols + (t == DType::kBF16 ? cols & 1 : 0));
        auto expected = [&](uint8_t fill) {
          std::vector<uint8_t> want(bytes, fill);
          if (is_quant(t) && act_type(t) != DType::kF32) {
            if (act_type(t) == DType::kQ8_K) {
              convert_q8k_scalar(x.data(), xs, n, cols, g, want.data());
            } else {
              const Q8Aux aux = t == DType::kQ4_0 || t == DType::kQ5_0 || q4g_sub_blocks(t) > 0
                                    ? Q8Aux::kSumTimesMinus8
                                : t == DType::kQ8_0 || is_table4(t) ? Q8Aux::kSumTimesMinus128
                                                                    : Q8Aux::kS;
              convert_q8_scalar(x.data(), xs, n, cols, g, aux, want.data());
            }
          } else if (bf16_pairs) {
            uint16_t* w16 = reinterpret_cast<uint16_t*>(want.data());
            for (int i = 0; i < n; ++i)
              for (int64_t c = 0; c < (cols + 1) / 2 * 2; ++c)
                w16[chunked_index(c / 2, i, g) * 2 + c % 2] =
                    c < cols ? f32_to_bf16(x[i * xs + c]) : 0;
          } else {
            const FloatRound r = t == DType::kF16    ? FloatRound::kF16
                                 : t == DType::kBF16 ? FloatRound::kBF16
                                                     : FloatRound::kNone;
            convert_f32_scalar(x.data(), xs, n, cols, g, r, want.data());
          }
          return want;
        };
        const auto want0 = expected(0x00), want1 = expected(0xFF);
        // Converters may use aligned stores: matmul's scratch is 64-byte aligned.
        AlignedBytes got_buf = aligned_bytes(bytes);
        uint8_t* got = got_buf.get();
        std::memset(got, 0x55, bytes);
        k->convert(x.data(), xs, n, cols, got);
        size_t mismatches = 0, first = 0;
        for (size_t i = 0; i < bytes; ++i) {
          if (want0[i] == want1[i] && got[i] != want0[i] && mismatches++ == 0) first = i;
        }
        EXPECT_EQ(mismatches, 0u) << dtype_name(t) << " " << isa_name(isa) << " cols=" << cols
                                  << " n=" << n << " first bad byte " << first;
      }
    }
  }
}

std::string type_name(const ::testing::TestParamInfo<DType>& info) {
  return std::string(dtype_name(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, MatmulTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0,
                                           DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                                           DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
                                           DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS,
                                           DType::kMXFP4, DType::kNF4, DType::kFP8, DType::kQ4_G64,
                                           DType::kQ4_G128),
                         type_name);

// Largest quants against the largest activations: integer partial sums at their peak,
// where a kernel that widens 16-bit sums too late saturates (random inputs stay far
// below it). All quant bits set, small positive scales, every activation 1.
TEST_P(MatmulTest, ExtremeQuantsDoNotSaturate) {
  const DType t = GetParam();
  if (!is_quant(t) || t == DType::kFP8) GTEST_SKIP() << "no integer sums";
  std::mt19937 rng(9);
  const int64_t rows = 16, cols = 1536;
  std::vector<uint8_t> wbytes = make_weights(rng, t, rows, cols, true);
  // IQ4_NL/IQ4_XS: nibble 0 is their largest magnitude (-127); elsewhere all bits set.
  const bool iq4 = t == DType::kIQ4_NL || t == DType::kIQ4_XS;
  std::fill(wbytes.begin(), wbytes.end(), iq4 ? 0x00 : 0xFF);
  const size_t bb = dtype_info(t).block_bytes;
  for (size_t off = 0; off < wbytes.size(); off += bb)
    for (int f : half_fields(t)) {
      const uint16_t h = f32_to_fp16(0.01f);
      std::memcpy(&wbytes[off + f], &h, 2);
    }
  for (size_t off = 0; t == DType::kMXFP4 && off < wbytes.size(); off += bb)
    wbytes[off] = 120;  // 2^-8
  auto wm = WeightMatrix::from_gguf(t, wbytes.data(), rows, cols);
  ASSERT_TRUE(wm.is_ok());
  MatmulScratch scratch;
  for (int64_t n : {1, 4, 13}) {
    const std::vector<float> x(static_cast<size_t>(n * cols), 1.0f);
    const auto ref = reference(t, wbytes, rows, cols, x.data(), n, cols);
    for (Isa isa : testing::available_isas()) {
      testing::IsaScope scope(isa);
      std::vector<float> y(static_cast<size_t>(n * rows));
      matmul(*wm, x.data(), n, cols, y.data(), rows, pool(1), scratch);
      EXPECT_LE(testing::nmse(y.data(), ref.data(), y.size()), kRefBound)
          << dtype_name(t) << " " << isa_name(isa) << " n=" << n;
    }
  }
}

// Once a scratch has served a shape, the same call must not touch the allocator again
// (the buffer, and so its address, stays put).
TEST(Matmul, SteadyStateReusesScratch) {
  std::mt19937 rng(8);
  const int64_t rows = 64, cols = 256;
  for (DType t : {DType::kQ4_0, DType::kQ4_K, DType::kF16}) {
    const auto wbytes = make_weights(rng, t, rows, cols, false);
    auto w = WeightMatrix::from_gguf(t, wbytes.data(), rows, cols);
    ASSERT_TRUE(w.is_ok());
    MatmulScratch scratch;
    const auto x = testing::random_floats(rng, static_cast<size_t>(cols * 40));
    std::vector<float> y(static_cast<size_t>(rows * 40));
    matmul(*w, x.data(), 40, cols, y.data(), rows, pool(2), scratch);
    const uint8_t* before = scratch.get(1);
    for (int64_t n : {40, 1, 17, 40})
      matmul(*w, x.data(), n, cols, y.data(), rows, pool(2), scratch);
    EXPECT_EQ(scratch.get(1), before) << dtype_name(t);
  }
}

TEST(Matmul, RejectsBadShapesAndTypes) {
  std::vector<uint8_t> w(1024);
  EXPECT_FALSE(WeightMatrix::from_gguf(DType::kQ4_0, w.data(), 2, 48).is_ok());  // 48 % 32
  EXPECT_FALSE(WeightMatrix::from_gguf(DType::kQ8_K, w.data(), 1, 256).is_ok());
  EXPECT_FALSE(WeightMatrix::from_gguf(DType::kF32, w.data(), 0, 8).is_ok());
  EXPECT_TRUE(is_supported_weight_type(DType::kQ6_K));
  EXPECT_FALSE(is_supported_weight_type(DType::kQ8_K));
}

}  // namespace
}  // namespace pagoda::cpu
