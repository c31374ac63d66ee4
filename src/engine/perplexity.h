// Perplexity of a model over a token stream, and its KL divergence from a reference
// ("base") model, by the procedure of llama.cpp's llama-perplexity, so the figures compare
// with the ones its users quote: the stream is cut into chunks of n_ctx tokens, each
// evaluated from an empty cache with its first token replaced by BOS (where the
// vocabulary adds one), and only the second half of each chunk is scored (the model
// always has n_ctx / 2 tokens of context): positions n_ctx / 2 .. n_ctx - 2 predicting
// the next token, n_ctx - 1 - n_ctx / 2 tokens a chunk. Runs over any backend (a
// ModelRunner), so the GPU's FP8 KV cache or FP8 weights can be weighed against a 16-bit
// run of the same model.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/runner.h"

namespace pagoda {

struct PerplexityOptions {
  int n_ctx = 512;    // tokens a chunk
  int n_chunks = -1;  // at most this many chunks (-1: as many as the stream holds)
  int n_batch = 512;  // tokens a forward pass
  int32_t bos = -1;   // each chunk's first token becomes this, where >= 0
};

// What runners need to evaluate chunks of these options: pool blocks (of 16 tokens),
// batch tokens and logit rows.
RunnerOptions perplexity_runner_options(const PerplexityOptions& o, RunnerOptions base = {});

struct PerplexityResult {
  int chunks = 0;
  int64_t scored = 0;        // tokens scored
  double nll = 0, nll2 = 0;  // sums of -ln p(token) and its square
  // With a base model: the same sums for it, the KL divergence KL(base || model) of each
  // scored position, and the positions where both rank the same token first.
  bool has_base = false;
  double base_nll = 0, base_nll2 = 0;
  std::vector<float> kld;
  int64_t same_top = 0;

  double ppl() const;
  // The standard error of ppl() from the spread of -ln p (llama.cpp's "+/-").
  double ppl_error() const;
  double base_ppl() const;
  double mean_kld() const;
  double kld_error() const;
  // The q-quantile of the per-position divergences (0.5: median; 1: the largest).
  double kld_quantile(double q) const;
  double same_top_fraction() const;
};

// Evaluates `tokens` (the whole text, tokenized) on `model`, and on `base` when not null
// (the same vocabulary), chunk by chunk; `progress` (may be empty) is called after each
// chunk. At least two chunks' worth of tokens are needed, as llama.cpp asks. The
// runners' pools must hold n_ctx tokens (perplexity_runner_options).
Result<PerplexityResult> evaluate_perplexity(
    ModelRunner& model, ModelRunner* base, const std::vector<int32_t>& tokens,
    const PerplexityOptions& o, ThreadPool& pool,
    const std::function<void(const PerplexityResult&)>& progress = {});

}  // namespace pagoda
