// ModelRunner's default pipeline (launch / collect): each step runs at launch.
#include "model/runner.h"

#include <algorithm>
#include <deque>

namespace pagoda {

// The default pipeline's state: the results of the steps launched and not yet collected,
// and the tokens of the step launched last (for the next batch's placeholders).
class SerialPipeline {
 public:
  Status launch(ModelRunner& runner, const Batch& batch, const StepSampling* sampling);
  Status collect(std::vector<int32_t>* tokens);

 private:
  std::deque<Result<std::vector<int32_t>>> launched_;
  std::vector<int32_t> last_tokens_;
  Batch resolved_;  // the batch with its placeholders replaced, reused between steps
};

Status SerialPipeline::launch(ModelRunner& runner, const Batch& batch,
                              const StepSampling* sampling) {
  // Placeholders take the previous step's tokens; then the step runs here and now.
  const Batch* b = &batch;
  if (std::any_of(batch.tokens.begin(), batch.tokens.end(), [](int32_t t) { return t < 0; })) {
    resolved_ = batch;
    for (int32_t& t : resolved_.tokens) {
      if (t >= 0) continue;
      const size_t row = static_cast<size_t>(-(static_cast<int64_t>(t) + 1));
      if (row >= last_tokens_.size()) {
        launched_.emplace_back(internal_error(
            str_format("a batch token refers to row %zu of the step before, which had %zu", row,
                       last_tokens_.size())));
        last_tokens_.clear();
        return Status::ok();
      }
      t = last_tokens_[row];
    }
    b = &resolved_;
  }
  std::vector<int32_t> tokens(b->logit_rows.size());
  const Status s = runner.forward(*b, sampling ? StepOutput::Sampled(tokens.data(), sampling)
                                               : StepOutput::Greedy(tokens.data()));
  if (!s) {
    last_tokens_.clear();
    launched_.emplace_back(s);
  } else {
    last_tokens_ = tokens;
    launched_.emplace_back(std::move(tokens));
  }
  return Status::ok();
}

Status SerialPipeline::collect(std::vector<int32_t>* tokens) {
  if (launched_.empty()) return internal_error("collect() without a launched step");
  Result<std::vector<int32_t>> r = std::move(launched_.front());
  launched_.pop_front();
  if (!r) return r.status();
  *tokens = std::move(r).value();
  return Status::ok();
}

ModelRunner::ModelRunner() = default;
ModelRunner::~ModelRunner() = default;

Status ModelRunner::launch(const Batch& batch, const StepSampling* sampling) {
  if (!serial_) serial_ = std::make_unique<SerialPipeline>();
  return serial_->launch(*this, batch, sampling);
}

Status ModelRunner::collect(std::vector<int32_t>* tokens) {
  if (!serial_) return internal_error("collect() without a launched step");
  return serial_->collect(tokens);
}

}  // namespace pagoda
