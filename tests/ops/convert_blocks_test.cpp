// Re-encoding rows for the CUDA and CPU backends (backend/cpu/convert_blocks.h) and the
// rules that pick the types (model/cuda_weight_types.h, model/weight_types.h). Each conversion is
// checked in value space: the dequantized output against the dequantized input, exact where the
// format promises it and within the stated bound elsewhere, on random blocks of every source type.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/convert_blocks.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/quant_blocks.h"
#include "ledger/sources.h"
#include "model/cuda_weight_types.h"
#include "model/fp8_checkpoint.h"
#include "model/weight_types.h"

namespace pagoda::cpu {
namespace {

constexpr int64_t kN = 4 * 256;  // whole blocks of every type

// Random bytes for n elements of `t`, with every fp16 scale field set to a sane value
// (random bytes there would be NaN or huge). Byte offsets of the fp16 fields per type.
std::vector<uint8_t> random_blocks(DType t, int64_t n, std::mt19937& rng) {
  const DTypeInfo& info = dtype_info(t);
  std::vector<uint8_t> raw(row_bytes(t, n));
  for (uint8_t& b : raw) b = static_cast<uint8_t>(rng());
  std::vector<size_t> halves;  // offsets of fp16 fields within a block
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ8_0:
      halves = {0};
      break;
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ8_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
      halves = {0, 2};
      break;
    case DType::kQ2_K:
      halves = {80, 82};
      break;
    case DType::kQ3_K:
      halves = {108};
      break;
    case DType::kQ6_K:
      halves = {208};
      break;
    case DType::kIQ4_NL:
    case DType::kIQ4_XS:
    case DType::kNF4:
    case DType::kQ4_G64:
    case DType::kQ4_G128:
      halves = {0};
      break;
    case DType::kMXFP4:
      break;  // an e8m0 byte, set below
    case DType::kQ8_K:
      break;  // an f32 d, set below
    case DType::kFP8:
      for (size_t b = 0; b < raw.size() / info.block_bytes; ++b) {  // f32 d; no NaN bytes
        uint8_t* blk = raw.data() + b * info.block_bytes;
        const float d = std::ldexp(1.0f + static_cast<float>(rng() % 4096) / 4096.0f,
                                   -static_cast<int>(rng() % 12));
        std::memcpy(blk, &d, 4);
        for (size_t i = 4; i < info.block_bytes; ++i)
          if ((blk[i] & 0x7F) == 0x7F) blk[i] ^= 1;
      }
      break;
    default:
      ADD_FAILURE() << "no scale layout for " << dtype_name(t);
  }
  std::uniform_real_distribution<float> scale(1e-4f, 2e-2f);
  for (size_t b = 0; b < raw.size() / info.block_bytes; ++b)
    for (size_t off : halves) {
      const uint16_t h = f32_to_fp16(scale(rng));
      std::memcpy(raw.data() + b * info.block_bytes + off, &h, 2);
    }
  if (t == DType::kMXFP4)  // 2^-12 .. 2^-4, inside f16's range
    for (size_t b = 0; b < raw.size() / info.block_bytes; ++b)
      raw[b * info.block_bytes] = static_cast<uint8_t>(116 + rng() % 13);
  if (t == DType::kQ8_K)
    for (size_t b = 0; b < raw.size() / info.block_bytes; ++b) {
      const float d = scale(rng);
      std::memcpy(raw.data() + b * info.block_bytes, &d, 4);
    }
  return raw;
}

std::vector<float> values(DType t, const void* data, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  EXPECT_TRUE(dequantize_row(t, data, v.data(), n).is_ok());
  return v;
}

// Converts `raw` (n elements of `from`) to `to`; returns the largest error of each
// `group`-element block divided by that block's largest |value| (0 for an all-zero block).
std::vector<double> converted_errors(DType from, const std::vector<uint8_t>& raw, DType to,
                                     int64_t n, int64_t group = 32) {
  std::vector<uint8_t> out(row_bytes(to, n), 0xAB);
  const Status s = convert_row(from, raw.data(), to, out.data(), n);
  EXPECT_TRUE(s.is_ok()) << s.message();
  const std::vector<float> a = values(from, raw.data(), n), b = values(to, out.data(), n);
  std::vector<double> err;
  for (int64_t b0 = 0; b0 < n; b0 += group) {
    double amax = 0, e = 0;
    for (int64_t i = b0; i < b0 + group; ++i) {
      amax = std::max(amax, std::fabs(static_cast<double>(a[static_cast<size_t>(i)])));
      e = std::max(
          e, std::fabs(static_cast<double>(a[static_cast<size_t>(i)]) - b[static_cast<size_t>(i)]));
    }
    err.push_back(amax > 0 ? e / amax : e);
  }
  return err;
}

TEST(ConvertBlocks, ExactWhereTheTargetHoldsTheValues) {
  std::mt19937 rng(1);
  for (DType from :
       {DType::kQ4_0, DType::kQ5_0, DType::kQ8_1, DType::kIQ4_NL, DType::kMXFP4, DType::kNF4}) {
    const std::vector<uint8_t> raw = random_blocks(from, kN, rng);
    for (double e : converted_errors(from, raw, DType::kQ8_0, kN))
      ASSERT_EQ(e, 0.0) << dtype_name(from);
  }
  // Q3_K's 16-element sub-blocks as Q6_K's, quants offset by 32 (pagoda quantize to Q6_K).
  const std::vector<uint8_t> q3 = random_blocks(DType::kQ3_K, kN, rng);
  for (double e : converted_errors(DType::kQ3_K, q3, DType::kQ6_K, kN)) ASSERT_EQ(e, 0.0);
  // Same type: the bytes themselves.
  const std::vector<uint8_t> raw = random_blocks(DType::kQ6_K, kN, rng);
  std::vector<uint8_t> out(raw.size());
  ASSERT_TRUE(convert_row(DType::kQ6_K, raw.data(), DType::kQ6_K, out.data(), kN).is_ok());
  EXPECT_EQ(out, raw);
}

TEST(ConvertBlocks, Q4KToQ4_1KeepsTheQuantsAndRoundsTheScales) {
  std::mt19937 rng(2);
  const std::vector<uint8_t> raw = random_blocks(DType::kQ4_K, kN, rng);
  // Step and offset each within 2^-11 of themselves after fp16 rounding; a value is at
  // most 15 steps plus the offset, each at most twice the block's largest |value| (the
  // values span [-offset, 15 step - offset]), so the error is below 2^-11 * 3 * amax.
  double worst = 0;
  for (double e : converted_errors(DType::kQ4_K, raw, DType::kQ4_1, kN)) worst = std::max(worst, e);
  EXPECT_LE(worst, 3.0 / 2048);
  // The nibbles are the file's: with scales that fp16 holds exactly (d = 1, dmin = 0.5)
  // the conversion is exact.
  std::vector<uint8_t> exact = raw;
  for (size_t b = 0; b < exact.size() / sizeof(BlockQ4_K); ++b) {
    auto* blk = reinterpret_cast<BlockQ4_K*>(exact.data()) + b;
    blk->d = f32_to_fp16(1.0f);
    blk->dmin = f32_to_fp16(0.5f);
  }
  for (double e : converted_errors(DType::kQ4_K, exact, DType::kQ4_1, kN)) ASSERT_EQ(e, 0.0);
}

// IQ4_XS's per-32 step d * (ls - 32) rounded to f16 once: relative error <= 2^-11 of
// each value. An MXFP4 scale below f16's range flushes values under 12 * 2^-25; one
// above it is an error.
TEST(ConvertBlocks, TableTypesToQ8_0) {
  std::mt19937 rng(11);
  const std::vector<uint8_t> xs = random_blocks(DType::kIQ4_XS, kN, rng);
  double worst = 0;
  for (double e : converted_errors(DType::kIQ4_XS, xs, DType::kQ8_0, kN))
    worst = std::max(worst, e);
  EXPECT_LE(worst, std::ldexp(1.0, -11));
  EXPECT_GT(worst, 0.0);  // random 6-bit scales do not all fit 11 bits
  std::vector<uint8_t> mx = random_blocks(DType::kMXFP4, kN, rng);
  mx[0] = 60;  // 2^-68: no f16
  std::vector<uint8_t> out(row_bytes(DType::kQ8_0, kN));
  ASSERT_TRUE(convert_row(DType::kMXFP4, mx.data(), DType::kQ8_0, out.data(), kN).is_ok());
  const std::vector<float> a = values(DType::kMXFP4, mx.data(), kN),
                           b = values(DType::kQ8_0, out.data(), kN);
  for (int64_t i = 0; i < kN; ++i)
    ASSERT_LE(std::fabs(a[static_cast<size_t>(i)] - b[static_cast<size_t>(i)]),
              i < 32 ? 12 * std::ldexp(1.0, -25) : 0.0)
        << i;
  mx[0] = 150;  // 2^22 * 12: beyond f16
  const Status s = convert_row(DType::kMXFP4, mx.data(), DType::kQ8_0, out.data(), kN);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("MXFP4 block 0"), std::string::npos) << s.message();
}

TEST(ConvertBlocks, RequantizedToQ8_0WithinHalfAStep) {
  std::mt19937 rng(3);
  // Half a Q8_0 step (amax / 254) plus the fp16 rounding of the step (2^-11 of 127 steps).
  const double bound = 1.0 / 254 + 127.0 / 2048 / 127 + 1e-6;
  for (DType from : {DType::kQ4_1, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                     DType::kQ5_K, DType::kQ6_K}) {
    const std::vector<uint8_t> raw = random_blocks(from, kN, rng);
    double worst = 0;
    for (double e : converted_errors(from, raw, DType::kQ8_0, kN)) worst = std::max(worst, e);
    EXPECT_LE(worst, bound) << dtype_name(from);
    EXPECT_GT(worst, 0.0) << dtype_name(from) << ": requantizing random blocks moved nothing?";
  }
}

TEST(ConvertBlocks, Q2KRequantizedToQ6K) {
  // pagoda quantize from Q2_K to Q6_K: Q6_K's reference quantizer gives each 16-element sub-block
  // the step amax / 31, held as an int8 multiple of d = (the 256-block's amax / 31) / 127. The step
  // is at most the largest one, A / 31, so rounding moves a weight by at most A / 62; a step
  // rounded down clips by at most 31 * d / 2 = A / 254. Bound: A / 62 and fp16.
  std::mt19937 rng(5);
  const std::vector<uint8_t> raw = random_blocks(DType::kQ2_K, kN, rng);
  double worst = 0;
  for (double e : converted_errors(DType::kQ2_K, raw, DType::kQ6_K, kN, 256))
    worst = std::max(worst, e);
  EXPECT_LE(worst, 1.0 / 62 + 1.0 / 1024);
  EXPECT_GT(worst, 0.0) << "requantizing random blocks moved nothing?";
}

TEST(ConvertBlocks, ClearErrors) {
  std::mt19937 rng(4);
  std::vector<uint8_t> raw = random_blocks(DType::kQ4_K, 256, rng);
  std::vector<uint8_t> out(row_bytes(DType::kQ8_0, 256));
  // Not whole blocks of the source.
  EXPECT_FALSE(convert_row(DType::kQ4_K, raw.data(), DType::kQ4_1, out.data(), 224).is_ok());
  // A step beyond fp16: d = 65504 times a scale of 63.
  auto* blk = reinterpret_cast<BlockQ4_K*>(raw.data());
  blk->d = 0x7BFF;
  std::memset(blk->scales, 0xFF, sizeof blk->scales);
  const Status s = convert_row(DType::kQ4_K, raw.data(), DType::kQ4_1, out.data(), 256);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("fp16"), std::string::npos) << s.message();
  // A corrupt file's inf scale is refused before requantizing (the CPU's Q2_K -> Q6_K).
  std::vector<uint8_t> q2 = random_blocks(DType::kQ2_K, 256, rng);
  reinterpret_cast<BlockQ2_K*>(q2.data())->d = 0x7C00;  // +inf
  std::vector<uint8_t> q6(row_bytes(DType::kQ6_K, 256));
  const Status inf = convert_row(DType::kQ2_K, q2.data(), DType::kQ6_K, q6.data(), 256);
  EXPECT_FALSE(inf.is_ok());
  EXPECT_NE(inf.message().find("not finite"), std::string::npos) << inf.message();
}

// FP8 -> BF16 (the CUDA loader's conversion) gives the bits the FP8 checkpoint loader
// wrote before DType::kFP8 (fp8_e4m3_blocks_to_bf16, checked by hand in
// fp8_checkpoint_test), block scales one per 32 columns.
TEST(ConvertBlocks, Fp8ToBf16IsTheCheckpointLoadersBf16) {
  std::mt19937 rng(31);
  const int64_t rows = 3, cols = 96;
  const std::vector<uint8_t> raw = random_blocks(DType::kFP8, rows * cols, rng);
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * cols));
  std::vector<float> scales(static_cast<size_t>(rows * cols / 32));
  for (size_t b = 0; b < scales.size(); ++b) {
    std::memcpy(&scales[b], raw.data() + 36 * b, 4);
    std::memcpy(bytes.data() + 32 * b, raw.data() + 36 * b + 4, 32);
  }
  std::vector<uint16_t> want(static_cast<size_t>(rows * cols)), got(want.size());
  fp8_e4m3_blocks_to_bf16(bytes.data(), rows, cols, scales.data(), 1, 32, want.data());
  for (int64_t r = 0; r < rows; ++r)
    ASSERT_TRUE(convert_row(DType::kFP8, raw.data() + r * row_bytes(DType::kFP8, cols),
                            DType::kBF16, got.data() + r * cols, cols)
                    .is_ok());
  EXPECT_EQ(got, want);
}

// Q4_G64/Q4_G128 -> Q4_1 (the CUDA loader's conversion): every weight d (q - z) again, up
// to the f16 rounding of m = -d z (half an f16 ulp of m, checked as 2^-11 relative).
TEST(ConvertBlocks, GroupedQ4ToQ4_1KeepsEachWeight) {
  std::mt19937 rng(37);
  for (DType from : {DType::kQ4_G64, DType::kQ4_G128}) {
    const std::vector<uint8_t> raw = random_blocks(from, kN, rng);
    std::vector<uint8_t> q41(row_bytes(DType::kQ4_1, kN));
    ASSERT_TRUE(convert_row(from, raw.data(), DType::kQ4_1, q41.data(), kN).is_ok());
    std::vector<float> want(kN), got(kN);
    ASSERT_TRUE(dequantize_row(from, raw.data(), want.data(), kN).is_ok());
    ASSERT_TRUE(dequantize_row(DType::kQ4_1, q41.data(), got.data(), kN).is_ok());
    const int64_t be = dtype_info(from).block_elems;
    for (int64_t i = 0; i < kN; ++i) {
      const uint8_t* blk = raw.data() + (i / be) * dtype_info(from).block_bytes;
      uint16_t d;
      std::memcpy(&d, blk, 2);
      const float m = std::fabs(fp16_to_f32(d)) * static_cast<float>(blk[2]);
      EXPECT_NEAR(got[i], want[i], m * 0x1p-11f + 1e-7f) << dtype_name(from) << " " << i;
    }
  }
}

TEST(CudaWeightTypes, StorageAndStacks) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K})
    EXPECT_EQ(cuda_storage_type(t), t) << dtype_name(t);
  for (DType t : {DType::kQ5_0, DType::kQ5_1, DType::kQ8_1, DType::kQ2_K, DType::kQ3_K,
                  DType::kQ8_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4, DType::kNF4})
    EXPECT_EQ(cuda_storage_type(t), DType::kQ8_0) << dtype_name(t);
  // FP8 checkpoints keep their BF16 on CUDA, as before the CPU kept FP8; with the
  // checkpoint's 16-bit layers (lm_head) and stacks of FP8 alike.
  EXPECT_EQ(cuda_storage_type(DType::kFP8), DType::kBF16);
  EXPECT_EQ(cuda_stack_type({DType::kFP8, DType::kFP8, DType::kFP8}), DType::kBF16);
  EXPECT_EQ(cuda_stack_type({DType::kFP8, DType::kBF16}), DType::kBF16);
  EXPECT_EQ(cuda_storage_type(DType::kF64), DType::kF64);  // for the loader to refuse
  // AWQ/GPTQ groups go to Q4_1 on CUDA, as before the CPU kept them.
  EXPECT_EQ(cuda_storage_type(DType::kQ4_G64), DType::kQ4_1);
  EXPECT_EQ(cuda_stack_type({DType::kQ4_G128, DType::kQ4_G128, DType::kQ4_G128}), DType::kQ4_1);
  // A Q4_K_M layer: Q4_K q and k beside a Q6_K v meet at Q8_0; all Q4_K stay Q4_K.
  EXPECT_EQ(cuda_stack_type({DType::kQ4_K, DType::kQ4_K, DType::kQ6_K}), DType::kQ8_0);
  EXPECT_EQ(cuda_stack_type({DType::kQ4_K, DType::kQ4_K}), DType::kQ4_K);
  EXPECT_EQ(cuda_stack_type({DType::kQ4_0, DType::kQ8_0}), DType::kQ8_0);
  EXPECT_EQ(cuda_stack_type({DType::kF16, DType::kF16}), DType::kF16);
  EXPECT_FALSE(cuda_stack_type({DType::kF16, DType::kF32}).has_value());
  EXPECT_FALSE(cuda_stack_type({DType::kF16, DType::kQ8_0}).has_value());
  EXPECT_FALSE(cuda_stack_type({}).has_value());
  EXPECT_EQ(cuda_stack_name("blk.12.attn_v.weight"), "blk.12.qkv");
  EXPECT_EQ(cuda_stack_name("blk.3.ffn_up.weight"), "blk.3.gate_up");
  EXPECT_EQ(cuda_stack_name("blk.3.ffn_down.weight"), "blk.3.ffn_down.weight");
  EXPECT_EQ(cuda_stack_name("output.weight"), "output.weight");
}

TEST(CpuWeightTypes, EveryBlockTypeEndsInOneTheKernelsTake) {
  for (DType t : {DType::kF32,   DType::kF16,  DType::kBF16, DType::kQ4_0,   DType::kQ4_1,
                  DType::kQ5_0,  DType::kQ5_1, DType::kQ8_0, DType::kQ2_K,   DType::kQ3_K,
                  DType::kQ4_K,  DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS,
                  DType::kMXFP4, DType::kNF4,  DType::kFP8,  DType::kQ4_G64, DType::kQ4_G128})
    EXPECT_EQ(cpu_storage_type(t), t) << dtype_name(t);
  for (DType t : {DType::kQ8_1, DType::kQ8_K})
    EXPECT_EQ(cpu_storage_type(t), DType::kQ8_0) << dtype_name(t);
  EXPECT_EQ(cpu_storage_type(DType::kF64), DType::kF64);  // for the loader to refuse
  // Every block type converts into a type the kernels take, on random blocks.
  std::mt19937 rng(6);
  for (DType t : {DType::kQ8_1, DType::kQ8_K}) {
    const DType to = cpu_storage_type(t);
    EXPECT_TRUE(is_supported_weight_type(to)) << dtype_name(t);
    const std::vector<uint8_t> raw = random_blocks(t, kN, rng);
    std::vector<uint8_t> out(row_bytes(to, kN));
    EXPECT_TRUE(convert_row(t, raw.data(), to, out.data(), kN).is_ok()) << dtype_name(t);
  }
}

TEST(CudaWeightTypes, LedgerCountsTheConvertedBytes) {
  using ledger::SourceTensor;
  ledger::ModelSource src;
  src.kind = "gguf";
  auto add = [&](const std::string& name, DType t, int64_t elements, bool matrix = true) {
    SourceTensor s;
    s.name = name;
    s.type = t == DType::kF32 ? "fp32" : std::string(dtype_name(t));
    for (char& c : s.type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    s.bytes = static_cast<int64_t>(row_bytes(t, elements));
    s.matrix = matrix;
    src.tensors.push_back(s);
  };
  const int64_t e = 4096 * 256;
  add("blk.0.attn_q.weight", DType::kQ4_K, e);  // stacked with a Q6_K v: Q8_0
  add("blk.0.attn_k.weight", DType::kQ4_K, e);
  add("blk.0.attn_v.weight", DType::kQ6_K, e);
  add("blk.0.ffn_gate.weight", DType::kQ4_K, e);  // gate/up both Q4_K: kept
  add("blk.0.ffn_up.weight", DType::kQ4_K, e);
  add("blk.0.ffn_down.weight", DType::kQ6_K, e);  // kept
  add("output.weight", DType::kQ8_0, e);          // kept
  add("blk.0.attn_norm.weight", DType::kF32, 4096, false);
  EXPECT_EQ(ledger::restate_for_cuda(&src), 3);
  // The device layout (backend/cuda/kquant_layout.h): per 32 weights 16 quant bytes,
  // the high bits (Q6_K: 8 bytes) and a 2-byte scale word; 4 bytes per 256.
  const int64_t q8 = e / 32 * 34, q4k = e / 32 * 18 + e / 256 * 4, q6k = e / 32 * 26 + e / 256 * 4;
  const std::vector<int64_t> want = {q8, q8, q8, q4k, q4k, q6k, q8, 4096 * 4};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(src.tensors[i].bytes, want[i]) << i;
  EXPECT_EQ(src.tensors[0].type, "q8_0");
  EXPECT_EQ(src.tensors[3].type, "q4_k");
  ASSERT_EQ(src.notes.size(), 2u);
  EXPECT_NE(src.notes[0].find("CUDA backend repacks"), std::string::npos) << src.notes[0];
  EXPECT_NE(src.notes[1].find("q4_k -> q8_0 (2 tensors)"), std::string::npos) << src.notes[1];
  EXPECT_NE(src.notes[1].find("q6_k -> q8_0 (1 tensors)"), std::string::npos) << src.notes[1];
  // Other sources are left alone.
  src.kind = "config.json";
  EXPECT_EQ(ledger::restate_for_cuda(&src), 0);

  // The CPU converts tensor by tensor, without stacking rules.
  ledger::ModelSource cpu;
  cpu.kind = "gguf";
  src.tensors.clear();
  add("blk.0.attn_q.weight", DType::kQ8_1, e);  // -> Q8_0
  add("blk.0.attn_k.weight", DType::kQ8_1, e);
  add("blk.0.attn_v.weight", DType::kQ5_0, e);    // kept
  add("blk.0.ffn_down.weight", DType::kQ8_K, e);  // -> Q8_0
  add("blk.0.ffn_up.weight", DType::kQ2_K, e);    // kept
  add("blk.0.ffn_gate.weight", DType::kQ3_K, e);  // kept, scales repacked: more bytes
  cpu.tensors = src.tensors;
  EXPECT_EQ(ledger::restate_for_cpu(&cpu), 3);
  // What the loader's matrices hold (4,096 rows of 256), from the matrices themselves.
  std::mt19937 rng(11);
  auto held = [&](DType t) {
    const std::vector<uint8_t> raw = random_blocks(t, e, rng);
    auto w = WeightMatrix::from_gguf(t, raw.data(), 4096, 256);
    EXPECT_TRUE(w.is_ok()) << w.status().message();
    return w.is_ok() ? static_cast<int64_t>(w->bytes()) : int64_t{-1};
  };
  const std::vector<int64_t> want_cpu = {held(DType::kQ8_0), held(DType::kQ8_0),
                                         held(DType::kQ5_0), held(DType::kQ8_0),
                                         held(DType::kQ2_K), held(DType::kQ3_K)};
  for (size_t i = 0; i < want_cpu.size(); ++i) EXPECT_EQ(cpu.tensors[i].bytes, want_cpu[i]) << i;
  EXPECT_GT(cpu.tensors[5].bytes, static_cast<int64_t>(row_bytes(DType::kQ3_K, e)));
  ASSERT_EQ(cpu.notes.size(), 2u);
  EXPECT_NE(cpu.notes[0].find("CPU backend repacks"), std::string::npos) << cpu.notes[0];
  EXPECT_NE(cpu.notes[1].find("CPU backend"), std::string::npos) << cpu.notes[1];
  EXPECT_NE(cpu.notes[1].find("q8_1 -> q8_0 (2 tensors)"), std::string::npos) << cpu.notes[1];
  const int64_t total = [&] {
    int64_t n = 0;
    for (const auto& t : cpu.tensors) n += t.bytes;
    return n;
  }();
  EXPECT_EQ(ledger::restate_for_cpu(&cpu), 0);  // already in the kernels' types
  int64_t again = 0;
  for (const auto& t : cpu.tensors) again += t.bytes;
  EXPECT_EQ(again, total);  // counting twice does not grow the figures
}

// The ledger's per-weight count for the CPU is what a loaded matrix holds, for every type
// the CPU multiplies (rows in whole 16-row groups).
TEST(CpuLedger, PackedBytesAreTheMatricesBytes) {
  std::mt19937 rng(12);
  for (DType t : {DType::kF32,   DType::kF16,  DType::kBF16, DType::kQ4_0,   DType::kQ4_1,
                  DType::kQ5_0,  DType::kQ5_1, DType::kQ8_0, DType::kQ2_K,   DType::kQ3_K,
                  DType::kQ4_K,  DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS,
                  DType::kMXFP4, DType::kNF4,  DType::kFP8,  DType::kQ4_G64, DType::kQ4_G128}) {
    for (int64_t cols : {256, 576 * 4, 4096}) {
      const int64_t rows = 48;
      // The plain types' values do not matter here: zeros.
      const std::vector<uint8_t> raw = is_block_type(t)
                                           ? random_blocks(t, rows * cols, rng)
                                           : std::vector<uint8_t>(row_bytes(t, rows * cols));
      auto w = WeightMatrix::from_gguf(t, raw.data(), rows, cols);
      ASSERT_TRUE(w.is_ok()) << dtype_name(t) << ": " << w.status().message();
      EXPECT_EQ(packed_weight_bytes(t, rows * cols), static_cast<int64_t>(w->bytes()))
          << dtype_name(t) << " cols " << cols;
    }
  }
}

}  // namespace
}  // namespace pagoda::cpu
