// The sampler's filters and penalties against hand-computed expectations, and its
// determinism under a seed.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "engine/sampler.h"

namespace pagoda {
namespace {

std::vector<float> logits_from_probs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

// Draws many samples with fresh seeds and returns the frequency of each token.
std::map<int32_t, double> frequencies(SamplingParams sp, const std::vector<float>& logits, int n) {
  std::map<int32_t, double> f;
  for (int i = 0; i < n; ++i) {
    sp.seed = static_cast<uint64_t>(i) * 7919 + 1;
    Sampler s(sp, {});
    std::vector<float> l = logits;
    f[s.sample(l.data(), static_cast<int32_t>(l.size()))] += 1.0 / n;
  }
  return f;
}

TEST(Sampler, GreedyPicksTheFirstMaximum) {
  SamplingParams sp;
  sp.temperature = 0;
  Sampler s(sp, {});
  std::vector<float> l = {1, 5, 3, 5};
  EXPECT_EQ(s.sample(l.data(), 4), 1);
}

TEST(Sampler, SameSeedSameTokens) {
  SamplingParams sp;
  sp.seed = 1234;
  const std::vector<float> base = logits_from_probs({0.1, 0.2, 0.3, 0.15, 0.25});
  std::vector<int32_t> a, b;
  for (int run = 0; run < 2; ++run) {
    Sampler s(sp, {});
    for (int i = 0; i < 50; ++i) {
      std::vector<float> l = base;
      (run ? b : a).push_back(s.sample(l.data(), 5));
    }
  }
  EXPECT_EQ(a, b);
  EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 2u);  // it does sample
}

TEST(Sampler, FollowsTheDistribution) {
  SamplingParams sp;
  const auto f = frequencies(sp, logits_from_probs({0.5, 0.3, 0.2}), 20000);
  EXPECT_NEAR(f.at(0), 0.5, 0.02);
  EXPECT_NEAR(f.at(1), 0.3, 0.02);
  EXPECT_NEAR(f.at(2), 0.2, 0.02);
}

TEST(Sampler, TemperatureSharpens) {
  SamplingParams sp;
  sp.temperature = 0.5f;  // p^2 renormalised: 0.25/0.38, 0.09/0.38, 0.04/0.38
  const auto f = frequencies(sp, logits_from_probs({0.5, 0.3, 0.2}), 20000);
  EXPECT_NEAR(f.at(0), 0.25 / 0.38, 0.02);
  EXPECT_NEAR(f.at(2), 0.04 / 0.38, 0.015);
}

TEST(Sampler, TopKKeepsOnlyTheLargest) {
  SamplingParams sp;
  sp.top_k = 2;  // 0.4 and 0.3 remain: 4/7 and 3/7
  const auto f = frequencies(sp, logits_from_probs({0.1, 0.4, 0.2, 0.3}), 20000);
  EXPECT_EQ(f.count(0), 0u);
  EXPECT_EQ(f.count(2), 0u);
  EXPECT_NEAR(f.at(1), 4.0 / 7, 0.02);
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  SamplingParams sp;
  sp.top_p = 0.75f;  // 0.5 + 0.3 >= 0.75: tokens 0 and 1, renormalised 5/8 and 3/8
  const auto f = frequencies(sp, logits_from_probs({0.5, 0.3, 0.15, 0.05}), 20000);
  EXPECT_EQ(f.count(2), 0u);
  EXPECT_EQ(f.count(3), 0u);
  EXPECT_NEAR(f.at(0), 5.0 / 8, 0.02);
}

TEST(Sampler, MinPDropsTokensBelowTheFractionOfTheTop) {
  SamplingParams sp;
  sp.min_p = 0.5f;  // keep p >= 0.25: tokens 0 (0.5) and 1 (0.3)
  const auto f = frequencies(sp, logits_from_probs({0.5, 0.3, 0.2 - 1e-6, 1e-6}), 20000);
  EXPECT_EQ(f.count(2), 0u);
  EXPECT_NEAR(f.at(0), 5.0 / 8, 0.02);
}

TEST(Sampler, PenaltiesFollowTheirDefinitions) {
  SamplingParams sp;
  sp.temperature = 0;
  sp.repetition_penalty = 2.0f;
  sp.presence_penalty = 0.5f;
  sp.frequency_penalty = 0.25f;
  Sampler s(sp, {0});  // token 0 is in the prompt
  s.accept(1);
  s.accept(1);  // token 1 generated twice
  std::vector<float> l = {4.0f, -1.0f, 3.9f};
  // We read the penalised logits through greedy picks on crafted inputs:
  // token 0: 4/2 = 2; token 1: -1*2 - 0.5 - 0.5 = -3; token 2: 3.9.
  EXPECT_EQ(s.sample(l.data(), 3), 2);
  EXPECT_FLOAT_EQ(l[0], 2.0f);
  EXPECT_FLOAT_EQ(l[1], -3.0f);
  EXPECT_FLOAT_EQ(l[2], 3.9f);
}

}  // namespace
}  // namespace pagoda
