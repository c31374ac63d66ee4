#include "engine/sampler.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "backend/cpu/vec.h"
#include "core/arith.h"

namespace pagoda {

int32_t argmax(const float* v, int32_t n) {
  return static_cast<int32_t>(cpu::argmax_f32(n, v));
}

uint64_t random_seed() {
  // One read of the system's entropy per process: std::random_device costs a system call
  // or more per construction, and the engine thread seeded every unseeded request so.
  static const uint64_t base = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  static std::atomic<uint64_t> count{0};
  // splitmix64 over base + golden * count: distinct, well-mixed seeds from consecutive counts.
  return splitmix64(base + 0x9e3779b97f4a7c15ull * count.fetch_add(1, std::memory_order_relaxed));
}

Sampler::Sampler(const SamplingParams& params, const std::vector<int32_t>& prompt)
    : params_(params), rng_(params.seed ? *params.seed : random_seed()) {
  if (params_.repetition_penalty != 1.0f) seen_.insert(prompt.begin(), prompt.end());
}

void Sampler::accept(int32_t token) {
  if (params_.repetition_penalty != 1.0f) seen_.insert(token);
  // Counts feed only the presence and frequency penalties. Kept for every request, the
  // map's insert was the largest host cost of a 512-sequence greedy step
  // (bench/bench_engine_host), and its nodes' frees the next one when a request ended.
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) out_counts_[token]++;
}

void Sampler::apply_penalties(float* logits, int32_t n_vocab) const {
  const float rp = params_.repetition_penalty;
  if (rp != 1.0f) {
    for (int32_t t : seen_) {
      if (t < 0 || t >= n_vocab) continue;
      logits[t] = logits[t] > 0 ? logits[t] / rp : logits[t] * rp;
    }
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    for (const auto& [t, count] : out_counts_) {
      if (t < 0 || t >= n_vocab) continue;
      logits[t] -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(count);
    }
  }
}

SamplingRow Sampler::filters() const {
  SamplingRow r;
  r.temperature = params_.temperature;
  r.top_k = params_.top_k;
  r.top_p = params_.top_p;
  r.min_p = params_.min_p;
  return r;
}

SamplingRow Sampler::device_row(std::vector<int32_t>* penalties) {
  SamplingRow r = filters();
  r.repetition_penalty = params_.repetition_penalty;
  r.presence_penalty = params_.presence_penalty;
  r.frequency_penalty = params_.frequency_penalty;
  r.pen_begin = static_cast<int32_t>(penalties->size() / 3);
  const auto add = [&](int32_t token, int count, bool seen) {
    penalties->insert(penalties->end(), {token, count, seen ? 1 : 0});
  };
  const bool rep = params_.repetition_penalty != 1.0f;
  if (rep) {  // seen_ holds every output token too
    for (int32_t t : seen_) {
      const auto it = out_counts_.find(t);
      add(t, it == out_counts_.end() ? 0 : it->second, true);
    }
  } else if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    for (const auto& [t, count] : out_counts_) add(t, count, false);
  }
  r.pen_count = static_cast<int32_t>(penalties->size() / 3) - r.pen_begin;
  if (!(params_.temperature <= 0.0f || params_.top_k == 1))
    r.u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  return r;
}

int32_t draw_token(const float* logits, int32_t n_vocab, const SamplingRow& f, double u,
                   std::vector<std::pair<float, int32_t>>* scratch) {
  if (f.temperature <= 0.0f || f.top_k == 1) return argmax(logits, n_vocab);
  std::vector<std::pair<float, int32_t>>& cand = *scratch;
  const float inv_t = 1.0f / f.temperature;
  // Candidates sorted by logit, most likely first; only as many as the filters can keep
  // are sorted (a full sort of a 150k vocabulary would cost more than a decode step).
  cand.resize(static_cast<size_t>(n_vocab));
  for (int32_t i = 0; i < n_vocab; ++i) cand[static_cast<size_t>(i)] = {logits[i] * inv_t, i};
  size_t keep = cand.size();
  if (f.top_k > 0) keep = std::min(keep, static_cast<size_t>(f.top_k));
  const auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  // Softmax normaliser over all candidates before top-p/min-p (they refer to the full
  // tempered distribution, after top-k).
  if (keep < cand.size())  // the top-k set first, in any order
    std::nth_element(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(keep), cand.end(),
                     by_logit);
  size_t sorted = std::min(keep, static_cast<size_t>(256));
  std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(sorted),
                    cand.begin() + static_cast<std::ptrdiff_t>(keep), by_logit);
  const float max_logit = cand[0].first;
  double z = 0;
  for (size_t i = 0; i < keep; ++i) z += std::exp(static_cast<double>(cand[i].first - max_logit));
  const auto prob = [&](size_t i) {
    return std::exp(static_cast<double>(cand[i].first - max_logit)) / z;
  };
  if (f.min_p > 0.0f) {
    // p_i >= min_p * p_max  <=>  logit_i >= max_logit + log(min_p)
    const float cut = max_logit + std::log(f.min_p);
    size_t n = 0;
    for (size_t i = 0; i < keep; ++i)
      if (cand[i].first >= cut) cand[n++] = cand[i];
    keep = std::max<size_t>(n, 1);
    sorted = std::min(sorted, keep);
  }
  if (f.top_p < 1.0f) {
    double cum = 0;
    size_t i = 0;
    for (;; ++i) {
      if (i == sorted && sorted < keep) {  // need more of the order: sort further
        const size_t more = std::min(keep, sorted * 4);
        std::partial_sort(cand.begin() + static_cast<std::ptrdiff_t>(sorted),
                          cand.begin() + static_cast<std::ptrdiff_t>(more),
                          cand.begin() + static_cast<std::ptrdiff_t>(keep), by_logit);
        sorted = more;
      }
      if (i >= keep) break;
      cum += prob(i);
      if (cum >= f.top_p) {
        ++i;
        break;
      }
    }
    keep = std::max<size_t>(std::min(i, keep), 1);
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += prob(i);
  const double target = u * total;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += prob(i);
    if (target < acc) return cand[i].second;
  }
  return cand[keep - 1].second;
}

int32_t Sampler::sample(float* logits, int32_t n_vocab) {
  apply_penalties(logits, n_vocab);
  // One uniform per draw that is not the maximum, as device_row takes it.
  const bool greedy = params_.temperature <= 0.0f || params_.top_k == 1;
  const double u = greedy ? 0.0 : static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  const int32_t chosen = draw_token(logits, n_vocab, filters(), u, &cand_);
  accept(chosen);
  return chosen;
}

}  // namespace pagoda
