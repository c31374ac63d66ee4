#include <cpuid.h>
#include <gtest/gtest.h>

#include <immintrin.h>

#include <atomic>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "core/device.h"
#include "core/dtype.h"
#include "core/settings.h"
#include "core/thread_pool.h"

namespace pagoda {
namespace {

TEST(Fp16, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_fp16(f), h) << h;
  }
}

__attribute__((target("f16c"))) uint16_t hw_to_fp16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float hw_to_f32(uint16_t h) {
  return _cvtsh_ss(h);
}

TEST(Fp16, MatchesHardwareConversion) {
  // CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports knows no "f16c").
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 29))) GTEST_SKIP() << "no F16C";
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = fp16_to_f32(static_cast<uint16_t>(h)), b = hw_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(a)) {
      EXPECT_TRUE(std::isnan(b));
      continue;
    }
    EXPECT_EQ(bits_from_f32(a), bits_from_f32(b)) << h;
  }
  // Every float whose top 19 bits vary covers the rounding boundaries of each half.
  for (uint64_t u = 0; u < (1ull << 32); u += 4093) {
    const float f = f32_from_bits(static_cast<uint32_t>(u));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_fp16(f), hw_to_fp16(f)) << std::hex << u;
  }
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808000)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f818000)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808001)), 0x3f81);
  EXPECT_EQ(bf16_to_f32(0xc040), -3.0f);
}

TEST(Settings, TakeWholeIntegersInRangeOnly) {
  EXPECT_EQ(*parse_setting("X", "0", 0, 5), 0);
  EXPECT_EQ(*parse_setting("X", "5", 0, 5), 5);
  EXPECT_EQ(*parse_setting("X", "-3", -3, 5), -3);
  // atoi read each of these as a number (0, 1, 4 or 0); each is an error now.
  for (const char* bad : {"", "yes", "1x", "4 ", " ", "0x5", "6", "-1", "99999999999999999999"}) {
    const Result<int64_t> r = parse_setting("PAGODA_X", bad, 0, 5);
    ASSERT_FALSE(r.is_ok()) << "'" << bad << "'";
    EXPECT_NE(r.status().message().find("PAGODA_X="), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("from 0 to 5"), std::string::npos) << r.status().message();
  }
}

TEST(Settings, UnsetOrEmptyVariableGivesTheDefault) {
  std::map<std::string, std::string> env;
  const auto lookup = [&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  Result<Settings> s = read_settings(lookup);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->cuda.fuse, CudaSwitches::kFuseAll);
  EXPECT_EQ(s->cuda.split_keys, 256);
  EXPECT_TRUE(s->device_sampling);
  env["PAGODA_CUDA_SPLIT_KEYS"] = "";
  env["PAGODA_CUDA_FUSE"] = "rope,norm_ffn";
  env["PAGODA_DEVICE_SAMPLING"] = "0";
  env["PAGODA_CUDA_OMIT"] = "attention,down";
  s = read_settings(lookup);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(s->cuda.split_keys, 256);
  EXPECT_EQ(s->cuda.fuse, CudaSwitches::kFuseRope | CudaSwitches::kFuseNormFfn);
  EXPECT_EQ(s->cuda.omit, CudaSwitches::kOmitAttention | CudaSwitches::kOmitDown);
  EXPECT_FALSE(s->device_sampling);
  const std::string table = describe_settings(*s);
  EXPECT_NE(table.find("rope,norm_ffn"), std::string::npos) << table;
  env["PAGODA_CUDA_FUSE"] = "none";
  EXPECT_EQ(read_settings(lookup)->cuda.fuse, 0u);
}

TEST(Settings, MalformedValueIsAnErrorNamingIt) {
  const std::pair<const char*, const char*> bad[] = {
      {"PAGODA_CUDA_FUSE", "29"},      {"PAGODA_CUDA_FUSE", "rope,,quant"},
      {"PAGODA_CUDA_OMIT", "nothing"}, {"PAGODA_CUDA_SPLIT_KEYS", "256k"},
      {"PAGODA_CUDA_Q8_UNROLL", "3"},  {"PAGODA_CUDA_GRAPHS", "off"},
      {"PAGODA_DEVICE_SAMPLING", "2"}, {"PAGODA_ISA", "avx3"},
      {"PAGODA_LOG", "loud"}};
  for (const auto& entry : bad) {
    // Named copies: clang 14 lambdas may not capture structured bindings.
    const char* const name = entry.first;
    const char* const value = entry.second;
    const auto lookup = [&](const char* n) -> const char* {
      return std::string_view(n) == name ? value : nullptr;
    };
    const Result<Settings> s = read_settings(lookup);
    ASSERT_FALSE(s.is_ok()) << name << "=" << value;
    EXPECT_NE(s.status().message().find(std::string(name) + "="), std::string::npos)
        << s.status().message();
  }
  // Every variable of the table is named once.
  std::set<std::string> names;
  for (const SettingSpec& spec : setting_table()) EXPECT_TRUE(names.insert(spec.name).second);
}

TEST(Device, TakesCpuCudaAndCudaN) {
  auto cpu = parse_device_spec("cpu");
  ASSERT_TRUE(cpu.is_ok());
  EXPECT_EQ(cpu->kind, DeviceKind::kCpu);
  auto cuda = parse_device_spec("cuda");
  ASSERT_TRUE(cuda.is_ok());
  EXPECT_TRUE(cuda->is_cuda());
  EXPECT_EQ(cuda->index, 0);
  auto third = parse_device_spec("cuda:3");
  ASSERT_TRUE(third.is_ok());
  EXPECT_TRUE(third->is_cuda());
  EXPECT_EQ(third->index, 3);
}

TEST(Device, RefusesEveryOtherSpellingWithOneMessage) {
  for (const char* bad : {"", "gpu", "GPU", "CPU", "cuda:", "cuda:-1", "cuda:+1", "cuda:1x",
                          "cuda1", "cuda:12345", "cpu:0", " cuda", "tpu"}) {
    auto d = parse_device_spec(bad);
    ASSERT_FALSE(d.is_ok()) << bad;
    EXPECT_EQ(d.status().message(),
              std::string("--device must be cpu, cuda or cuda:N, not '") + bad + "'");
  }
}

TEST(ThreadPool, RunsEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 200; ++rep) {
      std::vector<std::atomic<int>> hits(1000);
      pool.parallel_for(1000, 7, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    }
    std::atomic<int> seen{0};
    pool.run([&](int ith, int nth) {
      EXPECT_EQ(nth, threads);
      seen.fetch_or(1 << ith);
    });
    EXPECT_EQ(seen.load(), (1 << threads) - 1);
  }
}

}  // namespace
}  // namespace pagoda
