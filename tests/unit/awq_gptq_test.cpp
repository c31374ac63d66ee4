// The AWQ/GPTQ config parser's refusals and the block conversions on hand-made codes
// (tests/model/test_awq_gptq.py checks whole checkpoints against AutoAWQ and GPTQModel).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "model/awq_gptq.h"

namespace pagoda {
namespace {

std::string refusal(const std::string& json) {
  auto c = parse_awq_gptq_config(json);
  EXPECT_FALSE(c.is_ok()) << json;
  return c.is_ok() ? "" : c.status().message();
}

TEST(AwqGptqConfig, ReadsAndRefusesByName) {
  auto a = parse_awq_gptq_config(
      R"({"quant_method":"awq","version":"GEMM","bits":4,"group_size":128,"zero_point":true,
          "modules_to_not_convert":["visual"]})");
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_TRUE(a.value().awq);
  EXPECT_EQ(a.value().group_size, 128);
  EXPECT_EQ(a.value().not_convert, std::vector<std::string>{"visual"});
  auto g = parse_awq_gptq_config(
      R"({"quant_method":"gptq","bits":8,"group_size":-1,"desc_act":true,"sym":false,
          "checkpoint_format":"gptq_v2","true_sequential":true,"damp_percent":0.01})");
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_FALSE(g.value().v1_zeros);
  EXPECT_TRUE(g.value().desc_act);
  EXPECT_EQ(g.value().bits, 8);
  EXPECT_NE(refusal(R"({"quant_method":"awq","version":"gemv"})").find("gemv"), std::string::npos);
  EXPECT_NE(refusal(R"({"quant_method":"awq","zero_point":false})").find("zero_point"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"quant_method":"gptq","bits":3})").find("bits 3"), std::string::npos);
  EXPECT_NE(refusal(R"({"quant_method":"gptq","lm_head":true})").find("lm_head"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"quant_method":"gptq","checkpoint_format":"marlin"})").find("marlin"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"quant_method":"gptq","shiny":1})").find("shiny"), std::string::npos);
  EXPECT_NE(refusal(R"({"quant_method":"gptq","group_size":0})").find("group_size"),
            std::string::npos);
}

// The codes converted, then dequantized back through the CPU's own row reader: each
// weight must be s (q - z) of its own group.
std::vector<float> round_trip(const AgCodes& k, int bits, AgPlan* plan) {
  *plan = ag_plan(bits, k.zero, k.group, k.cols);
  std::vector<uint8_t> out(row_bytes(plan->type, k.cols) * k.rows);
  ag_convert(k, bits, *plan, out.data());
  std::vector<float> w(k.rows * k.cols);
  for (int64_t r = 0; r < k.rows; ++r)
    EXPECT_TRUE(cpu::dequantize_row(plan->type, out.data() + r * row_bytes(plan->type, k.cols),
                                    w.data() + r * k.cols, k.cols)
                    .is_ok());
  return w;
}

// Two rows of `cols` codes in groups of `group` columns (or, mixed, alternating between
// two groups), zero point `zero` but for one group of row 1, so the blocks' own zero
// points are read.
AgCodes codes(int bits, bool mixed, uint8_t zero, int64_t cols = 64, int64_t group = 32) {
  AgCodes k;
  k.rows = 2;
  k.cols = cols;
  k.n_groups = mixed ? 2 : cols / group;
  for (int64_t i = 0; i < k.rows * k.cols; ++i)
    k.q.push_back(static_cast<uint8_t>((i * 7 + 3) % (1 << bits)));
  for (int64_t g = 0; g < k.n_groups * k.rows; ++g) {
    k.zero.push_back(zero);
    k.scale.push_back(std::ldexp(1.0f, static_cast<int>(g % 5) - 2));
  }
  if (zero != 8 && zero != 128) k.zero.back() = 1;
  for (int64_t c = 0; c < k.cols; ++c) k.group.push_back(mixed ? c % 2 : c / group);
  return k;
}

float expect_at(const AgCodes& k, int64_t r, int64_t c) {
  const int g = k.group[c];
  return k.scale[g * k.rows + r] * (static_cast<int>(k.q[r * k.cols + c]) - k.zero[g * k.rows + r]);
}

TEST(AwqGptqConvert, ExactTypesAndRequantized) {
  struct Case {
    int bits;
    bool mixed;
    uint8_t zero;
    DType type;
    bool requantized;
    int64_t cols = 64, group = 32;
  };
  for (const Case& c :
       {Case{4, false, 8, DType::kQ4_0, false}, Case{4, false, 3, DType::kQ4_1, false},
        Case{8, false, 128, DType::kQ8_0, false}, Case{8, false, 100, DType::kQ8_0, true},
        Case{4, true, 3, DType::kQ8_0, true}, Case{4, false, 3, DType::kQ4_G64, false, 192, 64},
        Case{4, false, 8, DType::kQ4_G64, false, 64, 64},
        Case{4, false, 3, DType::kQ4_G128, false, 256, 128},
        Case{4, false, 3, DType::kQ4_G128, false, 256, 256},
        Case{4, false, 3, DType::kQ4_G64, false, 192, 192},
        Case{4, false, 3, DType::kQ4_1, false, 96, 96}}) {
    const AgCodes k = codes(c.bits, c.mixed, c.zero, c.cols, c.group);
    AgPlan plan;
    const std::vector<float> w = round_trip(k, c.bits, &plan);
    EXPECT_EQ(plan.type, c.type) << c.bits << " " << c.mixed << " " << c.cols << " " << c.group;
    EXPECT_EQ(plan.requantized, c.requantized);
    for (int64_t r = 0; r < k.rows; ++r)
      for (int64_t i = 0; i < k.cols; ++i) {
        const float want = expect_at(k, r, i);
        // Requantized: half a Q8_0 step of the block's largest weight.
        float amax = 0;
        for (int64_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j)
          amax = std::fmax(amax, std::fabs(expect_at(k, r, j)));
        const float tol = c.requantized ? 0.51f * amax / 127 : 1e-6f;
        EXPECT_NEAR(w[r * k.cols + i], want, tol) << r << " " << i;
      }
  }
}

}  // namespace
}  // namespace pagoda
