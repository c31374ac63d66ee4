// A model stand-in for scheduler and KV tests: it keeps token ids as its "KV" in the very
// blocks the engine hands it, and its logits are a function of the whole history it reads
// back through the block table. A wrong block table, a missed copy-on-write or a block
// reused too early changes the history it sees and so the tokens it produces.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/sampler.h"
#include "model/runner.h"

namespace pagoda::testing {

// Token most favoured after `history` (the reference the engine must reproduce).
inline int32_t fake_next(const std::vector<int32_t>& history, int32_t n_vocab) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : history) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  return static_cast<int32_t>((h >> 17) % static_cast<uint64_t>(n_vocab));
}

// Logits peaked at fake_next, smooth enough that sampling at temperature 1 varies.
inline void fake_logits(const std::vector<int32_t>& history, int32_t n_vocab, float* out) {
  const int32_t best = fake_next(history, n_vocab);
  for (int32_t i = 0; i < n_vocab; ++i) {
    const int32_t d = (i - best + n_vocab) % n_vocab;
    out[i] = -0.25f * static_cast<float>(d);
  }
}

class FakeRunner : public ModelRunner {
 public:
  FakeRunner(int n_blocks, int block_size, int32_t n_vocab)
      : bs_(block_size), n_vocab_(n_vocab), slots_(static_cast<size_t>(n_blocks) * block_size, -1) {
    config_.n_vocab = n_vocab;
  }

  const ModelConfig& config() const override { return config_; }
  DeviceKind device_kind() const override { return DeviceKind::kCpu; }
  std::string describe() const override { return "fake"; }
  size_t decode_weight_bytes() const override { return 0; }
  size_t weight_bytes() const override { return 0; }

  Status forward(const Batch& b, const StepOutput& out) override {
    PAGODA_RETURN_IF_ERROR(out.check());
    if (!out.tokens) return run_pass(b, out.logits);
    if (out.sampling) return pick_sampled(b, *out.sampling, out.tokens);
    return pick_greedy(b, out.tokens);
  }

  // With `greedy` set it also picks greedy tokens itself (as the CPU and CUDA runners
  // do): the argmax of the same logits; greedy_steps counts its use. With `sampling` set
  // it also draws sampled ones (as the CUDA runner does): pick_sampled.
  bool picks_tokens(bool sampled) const override { return sampled ? sampling : greedy; }

  // Pipelined steps run through the default pipeline (each step at launch); counted.
  Status launch(const Batch& b, const StepSampling* s) override {
    ++launches;
    return ModelRunner::launch(b, s);
  }

  Status copy_block(int src, int dst) override {
    if (fail_copies) return internal_error("the fake runner's block copy failed");
    for (int i = 0; i < bs_; ++i)
      slots_[static_cast<size_t>(dst) * bs_ + i] = slots_[static_cast<size_t>(src) * bs_ + i];
    ++n_copies;
    return Status::ok();
  }

  std::vector<int64_t> step_tokens;
  std::vector<int> step_seqs;
  int n_copies = 0;
  bool fail_copies = false;  // copy_block fails
  bool greedy = false;
  int greedy_steps = 0;
  bool sampling = false;
  bool host_draws = false;
  int sampling_steps = 0;
  int launches = 0;

 private:
  // The logits, written when `logits` is not null.
  Status run_pass(const Batch& b, float* logits) {
    step_tokens.push_back(static_cast<int64_t>(b.tokens.size()));
    step_seqs.push_back(static_cast<int>(b.seqs.size()));
    for (const BatchSeq& s : b.seqs)
      for (int t = 0; t < s.n_q; ++t)
        slot(s, s.pos0 + t) = b.tokens[static_cast<size_t>(s.q_row + t)];
    for (size_t i = 0; i < b.logit_rows.size(); ++i) {
      const int row = b.logit_rows[i];
      const BatchSeq* seq = nullptr;
      for (const BatchSeq& s : b.seqs)
        if (row >= s.q_row && row < s.q_row + s.n_q) seq = &s;
      if (!seq) return internal_error("logit row outside every sequence");
      if (!logits) continue;
      std::vector<int32_t> hist;
      for (int p = 0; p <= seq->pos0 + (row - seq->q_row); ++p) hist.push_back(slot(*seq, p));
      fake_logits(hist, n_vocab_, logits + i * static_cast<size_t>(n_vocab_));
    }
    return Status::ok();
  }

  Status pick_greedy(const Batch& b, int32_t* tokens) {
    if (!greedy) return unsupported("the fake runner picks no greedy tokens (greedy unset)");
    std::vector<float> logits(b.logit_rows.size() * static_cast<size_t>(n_vocab_));
    PAGODA_RETURN_IF_ERROR(run_pass(b, logits.data()));
    for (size_t i = 0; i < b.logit_rows.size(); ++i) {
      const float* row = logits.data() + i * static_cast<size_t>(n_vocab_);
      tokens[i] = static_cast<int32_t>(std::max_element(row, row + n_vocab_) - row);
    }
    greedy_steps++;
    return Status::ok();
  }

  // Draws on the "device": the penalty entries the engine sent, applied as the CUDA
  // kernel applies them, then the argmax for greedy rows, or token floor(u * n_vocab) for
  // the others (so a test sees which uniform the engine drew), or with `host_draws` the
  // host sampler's own draw (draw_token), so that a request's tokens do not depend on
  // which path a step took; sampling_steps counts its use.
  Status pick_sampled(const Batch& b, const StepSampling& s, int32_t* tokens) {
    if (!sampling) return unsupported("the fake runner draws no sampled tokens (sampling unset)");
    if (s.rows.size() != b.logit_rows.size()) return internal_error("one row per logit row");
    std::vector<float> logits(b.logit_rows.size() * static_cast<size_t>(n_vocab_));
    PAGODA_RETURN_IF_ERROR(run_pass(b, logits.data()));
    for (size_t i = 0; i < b.logit_rows.size(); ++i) {
      float* x = logits.data() + i * static_cast<size_t>(n_vocab_);
      const SamplingRow& r = s.rows[i];
      for (int e = r.pen_begin; e < r.pen_begin + r.pen_count; ++e) {
        const int32_t t = s.penalties[3 * static_cast<size_t>(e)];
        const int32_t count = s.penalties[3 * static_cast<size_t>(e) + 1];
        float& v = x[t];
        if (s.penalties[3 * static_cast<size_t>(e) + 2] && r.repetition_penalty != 1.0f)
          v = v > 0 ? v / r.repetition_penalty : v * r.repetition_penalty;
        if (count > 0) v -= r.presence_penalty + r.frequency_penalty * static_cast<float>(count);
      }
      if (r.temperature <= 0.0f || r.top_k == 1) {
        tokens[i] = static_cast<int32_t>(std::max_element(x, x + n_vocab_) - x);
      } else {
        if (!(r.u >= 0.0 && r.u < 1.0)) return internal_error("uniform draw outside [0, 1)");
        tokens[i] = host_draws ? draw_token(x, n_vocab_, r, r.u, &scratch_)
                               : std::min(n_vocab_ - 1, static_cast<int32_t>(r.u * n_vocab_));
      }
    }
    sampling_steps++;
    return Status::ok();
  }

  int32_t& slot(const BatchSeq& s, int pos) {
    return slots_[static_cast<size_t>(s.blocks[pos / bs_]) * bs_ + pos % bs_];
  }
  int bs_;
  int32_t n_vocab_;
  ModelConfig config_;
  std::vector<std::pair<float, int32_t>> scratch_;
  std::vector<int32_t> slots_;
};

// What a request generates when it runs alone, greedily, straight from fake_next.
inline std::vector<int32_t> fake_greedy(std::vector<int32_t> prompt, int max_tokens,
                                        int32_t n_vocab) {
  std::vector<int32_t> out;
  for (int i = 0; i < max_tokens; ++i) {
    out.push_back(fake_next(prompt, n_vocab));
    prompt.push_back(out.back());
  }
  return out;
}

}  // namespace pagoda::testing
