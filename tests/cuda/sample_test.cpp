// Sampling on the GPU (sample_rows) against the exact filtered distribution computed here
// in plain C++ (penalties, temperature, top-k, min-p, top-p over the sorted vocabulary,
// as engine/sampler.cpp defines them). The same logit row is drawn N times with the
// stratified uniforms u_j = (j + 0.5) / N: an exact inverse-CDF draw then picks token i
// floor or ceil of N * p_i times, whatever order it walks the tokens in, so every count
// must be within 2 of N * p_i and no token outside the kept set may appear.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>

#include "backend/cuda/kernels.h"
#include "harness.h"

namespace pagoda::cuda::testing {
namespace {

class CudaSample : public CudaTest {};

// Probabilities of the filtered distribution (0 outside the kept set).
std::vector<double> reference_probs(std::vector<float> x, const SamplingRow& r,
                                    const std::vector<int32_t>& pen) {
  for (int e = r.pen_begin; e < r.pen_begin + r.pen_count; ++e) {
    const int32_t t = pen[3 * e], count = pen[3 * e + 1], seen = pen[3 * e + 2];
    float v = x[t];
    if (seen && r.repetition_penalty != 1.0f)
      v = v > 0 ? v / r.repetition_penalty : v * r.repetition_penalty;
    if (count > 0) v -= r.presence_penalty + r.frequency_penalty * static_cast<float>(count);
    x[t] = v;
  }
  const int n = static_cast<int>(x.size());
  const float inv_t = 1.0f / r.temperature;
  std::vector<float> v(x.size());
  for (int i = 0; i < n; ++i) v[i] = x[i] * inv_t;
  std::vector<int> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  int keep = r.top_k > 0 ? std::min(r.top_k, n) : n;
  const float vmax = v[order[0]];
  double z = 0;
  for (int i = 0; i < keep; ++i) z += std::exp(static_cast<double>(v[order[i]] - vmax));
  if (r.min_p > 0.0f) {
    const float cut = vmax + std::log(r.min_p);
    int k = 0;
    while (k < keep && v[order[k]] >= cut) ++k;
    keep = std::max(k, 1);
  }
  if (r.top_p < 1.0f) {
    double cum = 0;
    int k = 0;
    while (k < keep) {
      cum += std::exp(static_cast<double>(v[order[k]] - vmax)) / z;
      ++k;
      if (cum >= r.top_p) break;
    }
    keep = k;
  }
  std::vector<double> p(x.size(), 0.0);
  double total = 0;
  for (int i = 0; i < keep; ++i) total += std::exp(static_cast<double>(v[order[i]] - vmax));
  for (int i = 0; i < keep; ++i)
    p[order[i]] = std::exp(static_cast<double>(v[order[i]] - vmax)) / total;
  return p;
}

// Draws `rows` copies of `logits` on the GPU with row parameters `r` (u set per row).
std::vector<int32_t> draw(const std::vector<float>& logits, int rows, SamplingRow r,
                          const std::vector<int32_t>& pen) {
  const size_t v = logits.size();
  std::vector<float> all(v * rows);
  for (int j = 0; j < rows; ++j) std::copy(logits.begin(), logits.end(), all.begin() + j * v);
  std::vector<SamplingRow> rs(rows, r);
  for (int j = 0; j < rows; ++j) rs[j].u = (j + 0.5) / rows;
  DeviceBuffer d_x = to_device(all), d_rows = to_device(rs), d_out = poisoned(rows * 4);
  DeviceBuffer d_pen = to_device(pen.empty() ? std::vector<int32_t>{0, 0, 0} : pen);
  EXPECT_OK(sample_rows(d_x.as<float>(), rows, static_cast<int>(v), d_rows.as<SamplingRow>(),
                        d_pen.as<int32_t>(), d_out.as<int32_t>(), nullptr));
  return to_host<int32_t>(d_out, rows);
}

TEST_F(CudaSample, sample_matches_filtered_distribution) {
  std::mt19937 rng(21);
  const int vocab = 32000, rows = 2048;
  std::vector<float> logits = random_floats(rng, vocab, 2.5f);
  // Penalty entries: 50 distinct tokens, some seen only (prompt), some with counts.
  std::vector<int32_t> pen;
  std::vector<int> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  for (int i = 0; i < 50; ++i) pen.insert(pen.end(), {ids[i], i % 3, 1});
  // The three largest logits are penalised too, so the penalties move the top.
  std::vector<int> top(vocab);
  std::iota(top.begin(), top.end(), 0);
  std::partial_sort(top.begin(), top.begin() + 3, top.end(),
                    [&](int a, int b) { return logits[a] > logits[b]; });
  for (int i = 0; i < 3; ++i)
    if (std::find(ids.begin(), ids.begin() + 50, top[i]) == ids.begin() + 50)
      pen.insert(pen.end(), {top[i], 2, 1});

  struct Case {
    const char* name;
    SamplingRow r;
    bool penalties;
  };
  auto row = [](float t, int k, float p, float mp) {
    SamplingRow r;
    r.temperature = t;
    r.top_k = k;
    r.top_p = p;
    r.min_p = mp;
    return r;
  };
  SamplingRow pr = row(1.0f, 0, 0.95f, 0.0f);
  pr.repetition_penalty = 1.3f;
  pr.presence_penalty = 0.5f;
  pr.frequency_penalty = 0.25f;
  pr.pen_count = static_cast<int32_t>(pen.size() / 3);
  const Case cases[] = {
      {"plain T=1", row(1.0f, 0, 1.0f, 0.0f), false},
      {"T=0.7 top_k=40", row(0.7f, 40, 1.0f, 0.0f), false},
      {"T=1 top_p=0.9", row(1.0f, 0, 0.9f, 0.0f), false},
      {"T=1.3 min_p=0.05", row(1.3f, 0, 1.0f, 0.05f), false},
      {"T=0.9 top_k=100 top_p=0.8 min_p=0.01", row(0.9f, 100, 0.8f, 0.01f), false},
      {"penalties + top_p=0.95", pr, true},
  };
  for (const Case& c : cases) {
    const std::vector<int32_t> no_pen;
    const std::vector<int32_t>& p_list = c.penalties ? pen : no_pen;
    const std::vector<double> p = reference_probs(logits, c.r, p_list);
    // A top-p set whose boundary sits within rounding of top_p may gain or lose a token.
    SamplingRow lo = c.r, hi = c.r;
    lo.top_p = std::max(0.0f, c.r.top_p - 1e-5f);
    hi.top_p = std::min(1.0f, c.r.top_p + 1e-5f);
    const bool edge = c.r.top_p < 1.0f &&
                      reference_probs(logits, lo, p_list) != reference_probs(logits, hi, p_list);
    const std::vector<int32_t> got = draw(logits, rows, c.r, p_list);
    std::vector<int> count(vocab, 0);
    int outside = 0, kept = 0;
    for (int32_t t : got) {
      if (t < 0 || t >= vocab || p[t] == 0.0) {
        ++outside;
        continue;
      }
      ++count[t];
    }
    double worst = 0;
    for (int i = 0; i < vocab; ++i) {
      if (p[i] == 0.0) continue;
      ++kept;
      worst = std::max(worst, std::abs(count[i] - rows * p[i]));
    }
    std::printf("  sample %-38s kept %5d, outside %d, worst |count - N p| %.2f%s\n", c.name, kept,
                outside, worst, edge ? " (top-p boundary within rounding)" : "");
    if (outside > (edge ? rows / 100 : 0))
      ADD_FAILURE() << std::string(c.name) + ": tokens outside the kept set were drawn";
    if (!edge && worst > 2.0)
      ADD_FAILURE() << std::string(c.name) + ": frequencies off the distribution";
    if (kept < 2)
      ADD_FAILURE() << std::string(c.name) + ": the case keeps too few tokens to test anything";
  }
}

TEST_F(CudaSample, sample_greedy_applies_penalties) {
  // Temperature 0 (and top_k 1): the first maximum after the penalties, as the CPU picks.
  std::mt19937 rng(22);
  const int vocab = 50257, rows = 8;
  std::vector<float> all;
  std::vector<SamplingRow> rs(rows);
  std::vector<int32_t> pen, want(rows);
  for (int j = 0; j < rows; ++j) {
    std::vector<float> x = random_floats(rng, vocab, 3.0f);
    const int best = static_cast<int>(std::max_element(x.begin(), x.end()) - x.begin());
    SamplingRow& r = rs[j];
    r.temperature = j % 2 ? 0.0f : 0.8f;
    r.top_k = j % 2 ? 0 : 1;
    r.repetition_penalty = 1.0f + 0.2f * static_cast<float>(j % 4);
    r.presence_penalty = 0.4f;
    r.frequency_penalty = 0.1f;
    r.pen_begin = static_cast<int32_t>(pen.size() / 3);
    pen.insert(pen.end(), {best, j % 3, 1});
    for (int i = 0; i < 20; ++i) pen.insert(pen.end(), {(best + 1 + i * 97) % vocab, i % 4, i % 2});
    r.pen_count = static_cast<int32_t>(pen.size() / 3) - r.pen_begin;
    std::vector<double> ref = reference_probs(
        x,
        [&] {
          SamplingRow g = r;  // the reference's greedy: top_k = 1 keeps the maximum alone
          g.temperature = 1.0f;
          g.top_k = 1;
          return g;
        }(),
        pen);
    want[j] = static_cast<int32_t>(std::max_element(ref.begin(), ref.end()) - ref.begin());
    all.insert(all.end(), x.begin(), x.end());
  }
  DeviceBuffer d_x = to_device(all), d_rows = to_device(rs), d_pen = to_device(pen),
               d_out = poisoned(rows * 4);
  EXPECT_OK(sample_rows(d_x.as<float>(), rows, vocab, d_rows.as<SamplingRow>(), d_pen.as<int32_t>(),
                        d_out.as<int32_t>(), nullptr));
  const std::vector<int32_t> got = to_host<int32_t>(d_out, rows);
  int moved = 0;
  for (int j = 0; j < rows; ++j) {
    if (got[j] != want[j])
      ADD_FAILURE() << "greedy row " + std::to_string(j) + ": " + std::to_string(got[j]) + " vs " +
                           std::to_string(want[j]);
    moved += want[j] != static_cast<int32_t>(std::max_element(all.begin() + j * vocab,
                                                              all.begin() + (j + 1) * vocab) -
                                             (all.begin() + j * vocab));
  }
  std::printf("  sample greedy: %d rows, %d moved off the raw maximum by penalties\n", rows, moved);
  if (moved == 0) ADD_FAILURE() << "no penalty changed the greedy choice: the test has no teeth";
}

TEST_F(CudaSample, sample_large_vocab) {
  // A 128k vocabulary at a serving batch: only kept tokens come out.
  std::mt19937 rng(23);
  const int vocab = 128256, rows = 256;
  std::vector<float> logits = random_floats(rng, vocab, 2.0f);
  SamplingRow r;
  r.temperature = 0.8f;
  r.top_p = 0.95f;
  r.top_k = 500;
  const std::vector<double> p = reference_probs(logits, r, {});
  const std::vector<int32_t> got = draw(logits, rows, r, {});
  int outside = 0;
  for (int32_t t : got) outside += t < 0 || t >= vocab || p[t] == 0.0;
  std::printf("  sample 128k vocab x %d rows: %d outside the kept set\n", rows, outside);
  if (outside) ADD_FAILURE() << "large vocabulary: tokens outside the kept set";
}

}  // namespace
}  // namespace pagoda::cuda::testing
