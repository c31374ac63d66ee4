// Chooses each next token of one request from the model's logits: penalties, then
// temperature, then the top-k / top-p / min-p filters, then a seeded draw.
#pragma once

#include <cstdint>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/sampling_row.h"
#include "pagoda/sampling_params.h"

namespace pagoda {

class Sampler {
 public:
  Sampler(const SamplingParams& params, const std::vector<int32_t>& prompt);

  // Picks a token from `logits` (n_vocab values; modified in place) and records it.
  int32_t sample(float* logits, int32_t n_vocab);
  // Records a token chosen elsewhere (forced or replayed).
  void accept(int32_t token);

  const SamplingParams& params() const { return params_; }
  // The choice is the argmax of the raw logits (greedy, no penalties), so a device may
  // pick it without sending the logits back.
  bool plain_greedy() const {
    return (params_.temperature <= 0.0f || params_.top_k == 1) &&
           params_.repetition_penalty == 1.0f && params_.presence_penalty == 0.0f &&
           params_.frequency_penalty == 0.0f;
  }
  // The next draw in a device's form (core/sampling_row.h): this request's filters, one
  // uniform from its generator (as sample() draws), and its penalty entries appended to
  // `penalties`. The device's token is then recorded with accept().
  SamplingRow device_row(std::vector<int32_t>* penalties);
  // Restarts the random stream (a forked completion draws its own).
  void reseed(uint64_t seed) { rng_.seed(seed); }

 private:
  void apply_penalties(float* logits, int32_t n_vocab) const;
  // This request's temperature and filters as a row (the rest of the row left default).
  SamplingRow filters() const;

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::unordered_set<int32_t> seen_;             // prompt and output, for repetition
  std::unordered_map<int32_t, int> out_counts_;  // output only, when presence/frequency apply
  std::vector<std::pair<float, int32_t>> cand_;  // reused candidate buffer
};

// The token that uniform `u` in [0, 1) picks from `logits` (penalties already applied)
// under `f`'s temperature, top-k, min-p and top-p (its other fields are not read): the
// most likely token first, the first whose cumulative probability passes u times the kept
// mass. The maximum when the temperature is 0 or top-k 1. `scratch` is reused between calls.
int32_t draw_token(const float* logits, int32_t n_vocab, const SamplingRow& f, double u,
                   std::vector<std::pair<float, int32_t>>* scratch);

// A seed for a request that gave none: different on every call and in every process.
uint64_t random_seed();

// Index of the largest value (the first on ties; cpu::argmax_f32 in token ids' type).
int32_t argmax(const float* v, int32_t n);

}  // namespace pagoda
