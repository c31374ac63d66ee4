#include "server/generation.h"

#include "server/metrics.h"

namespace pagoda::server {

ApiResult<std::unique_ptr<Generation>> Generation::start(Engine& engine, Metrics& metrics,
                                                         const GenerationRequest& req,
                                                         const std::string& id) {
  std::unique_ptr<Generation> g(new Generation(engine, metrics, req.params.n));
  for (size_t p = 0; p < req.prompts.size(); ++p) {
    std::string rid = id + "-" + std::to_string(p);
    auto s = engine.add_request(rid, req.prompts[p], req.params, req.priority);
    if (!s) {
      g->abort();  // the prompts already queued
      return from_status(s.status());
    }
    g->ids_.push_back(std::move(rid));
    g->streams_.push_back(*s);
  }
  int64_t prompt_tokens = 0;
  for (const auto& p : req.prompts) prompt_tokens += static_cast<int64_t>(p.size());
  metrics.add_prompt_tokens(prompt_tokens);
  g->last_time_.assign(static_cast<size_t>(g->num_choices()), 0.0);
  g->ended_.assign(static_cast<size_t>(g->num_choices()), false);
  g->started_ = true;
  return g;
}

Generation::~Generation() {
  set_listener({});  // the engine's thread calls nothing of ours from here on
  if (!done()) abort();
  if (!started_ || failed_) return;  // error responses, counted as such
  for (bool ended : ended_)
    if (!ended) metrics_.completion_finished(RequestMetrics{}, FinishReason::kAbort);
}

void Generation::abort() {
  if (aborted_) return;
  aborted_ = true;
  for (const std::string& id : ids_) engine_.abort(id);
}

bool Generation::done() const {
  for (const auto& s : streams_)
    if (!s->done()) return false;
  return true;
}

std::optional<GenerationEvent> Generation::poll() {
  for (size_t k = 0; k < streams_.size(); ++k) {
    const size_t p = (rr_ + k) % streams_.size();
    if (auto o = streams_[p]->next_for(0)) {
      rr_ = p + 1;
      GenerationEvent e{static_cast<int>(p) * n_ + o->index, std::move(*o)};
      account(e);
      return e;
    }
  }
  return std::nullopt;
}

void Generation::set_listener(const std::function<void()>& fn) {
  for (const auto& s : streams_) s->set_listener(fn);
}

void Generation::account(const GenerationEvent& e) {
  const RequestOutput& o = e.out;
  const int64_t n = static_cast<int64_t>(o.token_ids.size());
  if (n > 0) {
    metrics_.add_generation_tokens(n);
    double& last = last_time_.at(static_cast<size_t>(e.choice));
    if (last > 0) metrics_.observe_inter_token(o.time - last, n);
    last = o.time;
  }
  if (o.finished) {
    ended_.at(static_cast<size_t>(e.choice)) = true;
    failed_ |= o.finish_reason == FinishReason::kError;
    if (o.finish_reason != FinishReason::kError)
      metrics_.completion_finished(o.metrics, o.finish_reason);
  }
}

}  // namespace pagoda::server
