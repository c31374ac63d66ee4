#include "engine/runner_session.h"

#include <algorithm>

namespace pagoda {

RunnerSession::RunnerSession(ModelRunner& runner, int n_ctx, int block_size, int n_batch)
    : runner_(runner), n_ctx_(n_ctx), n_batch_(std::max(1, n_batch)) {
  blocks_.resize(static_cast<size_t>((n_ctx + block_size - 1) / block_size));
  for (size_t i = 0; i < blocks_.size(); ++i) blocks_[i] = static_cast<int32_t>(i);
}

Status RunnerSession::eval(const std::vector<int32_t>& tokens, bool all_logits,
                           std::vector<float>* logits) {
  const int n = static_cast<int>(tokens.size());
  if (n == 0) return invalid_argument("nothing to evaluate");
  if (n_past_ + n > n_ctx_)
    return out_of_range(str_format("%d tokens do not fit in the context: %d of %d already used", n,
                                   n_past_, n_ctx_));
  const int n_vocab = runner_.config().n_vocab;
  if (logits) logits->resize(static_cast<size_t>(all_logits ? n : 1) * n_vocab);
  for (int off = 0; off < n; off += n_batch_) {
    const int chunk = std::min(n_batch_, n - off);
    Batch b;
    b.tokens.assign(tokens.begin() + off, tokens.begin() + off + chunk);
    BatchSeq s;
    s.q_row = 0;
    s.n_q = chunk;
    s.pos0 = n_past_;
    s.blocks = blocks_.data();
    b.seqs.push_back(s);
    float* out = nullptr;
    if (logits && all_logits) {
      for (int i = 0; i < chunk; ++i) b.logit_rows.push_back(i);
      out = logits->data() + static_cast<size_t>(off) * n_vocab;
    } else if (logits && off + chunk == n) {
      b.logit_rows.push_back(chunk - 1);
      out = logits->data();
    }
    PAGODA_RETURN_IF_ERROR(runner_.forward(b, StepOutput::Logits(out)));
    n_past_ += chunk;
  }
  return Status::ok();
}

}  // namespace pagoda
