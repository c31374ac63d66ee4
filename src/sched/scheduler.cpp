#include "sched/scheduler.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace pagoda::sched {

Scheduler::Scheduler(const SchedulerConfig& config, kv::KvCacheManager& kv)
    : config_(config), kv_(kv), waiting_(Order{this}) {}

bool Scheduler::before(const Request* a, const Request* b) const {
  if (config_.policy == Policy::kPriority && a->priority != b->priority)
    return a->priority < b->priority;
  if (a->arrival != b->arrival) return a->arrival < b->arrival;
  return a->id < b->id;
}

Status Scheduler::check_admissible(const Request& r) const {
  if (r.num_prompt_tokens <= 0) return invalid_argument("the prompt has no tokens");
  if (r.max_total_tokens > config_.max_model_len)
    return out_of_range(str_format(
        "this request needs %lld tokens (%lld in the prompt + %lld to generate), over "
        "max_model_len %lld",
        static_cast<long long>(r.max_total_tokens), static_cast<long long>(r.num_prompt_tokens),
        static_cast<long long>(r.max_total_tokens - r.num_prompt_tokens),
        static_cast<long long>(config_.max_model_len)));
  const int64_t need = static_cast<int64_t>(kv_.blocks_for(r.max_total_tokens)) * r.seq_weight;
  if (need > kv_.n_blocks())
    return {StatusCode::kResourceExhausted,
            str_format("this request needs %lld KV blocks and the whole pool has %d (raise "
                       "--kv-cache-memory or lower max_tokens)",
                       static_cast<long long>(need), kv_.n_blocks())};
  if (r.seq_weight > config_.max_num_seqs)
    return invalid_argument(
        str_format("n = %d is over max_num_seqs %d", r.seq_weight, config_.max_num_seqs));
  return Status::ok();
}

void Scheduler::add(Request* r) {
  r->arrival = next_arrival_++;
  r->status = RequestStatus::kWaiting;
  waiting_.insert(r);
}

void Scheduler::add_running(Request* r) {
  r->status = RequestStatus::kRunning;
  running_.push_back(r);
}

int Scheduler::running_weight() const {
  int w = 0;
  for (const Request* r : running_) w += r->seq_weight;
  return w;
}

Request* Scheduler::worst_running() const {
  Request* worst = nullptr;
  for (Request* r : running_)
    if (!worst || before(worst, r)) worst = r;
  return worst;
}

void Scheduler::preempt(Request* r, SchedulerOutput& out, int64_t& budget) {
  // Undo its part of this step, if it had one.
  for (size_t i = 0; i < out.seqs.size(); ++i) {
    if (out.seqs[i].req != r) continue;
    budget += out.seqs[i].num_tokens;
    out.num_tokens -= out.seqs[i].num_tokens;
    out.seqs.erase(out.seqs.begin() + static_cast<std::ptrdiff_t>(i));
    break;
  }
  const std::vector<kv::BlockId>& held = kv_.blocks(r->id);
  std::erase_if(out.copies, [&](const kv::BlockCopy& c) {
    return std::find(held.begin(), held.end(), c.dst) != held.end();
  });
  kv_.free(r->id);
  r->num_computed = 0;
  r->num_offered = 0;
  ++r->num_preemptions;
  ++counters_.preemptions;
  running_.erase(std::find(running_.begin(), running_.end(), r));
  r->status = RequestStatus::kWaiting;
  waiting_.insert(r);
  out.preempted.push_back(r);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;

  // Running requests, in admission order.
  const std::vector<Request*> snapshot = running_;
  for (Request* r : snapshot) {
    if (budget <= 0) break;
    if (r->status != RequestStatus::kRunning) continue;  // preempted earlier in this loop
    if (r->num_tokens() >= r->max_total_tokens || r->num_tokens() >= config_.max_model_len)
      continue;  // complete: its last token is still being picked (pipelined steps)
    const int64_t n = std::min(r->num_tokens() - r->num_computed, budget);
    if (n <= 0) continue;
    bool ok = false;
    for (;;) {
      if (kv_.allocate(r->id, r->num_computed + n, r->num_computed, {}, &out.copies)) {
        ok = true;
        break;
      }
      Request* victim = worst_running();
      preempt(victim, out, budget);
      if (victim == r) break;
    }
    if (!ok) continue;
    out.seqs.push_back({r, static_cast<int>(n), r->num_computed + n == r->num_tokens()});
    out.num_tokens += n;
    budget -= n;
  }

  // Waiting requests, unless the pool was just found short.
  const bool short_of_blocks = !out.preempted.empty();
  const int headroom = static_cast<int>(std::ceil(config_.watermark * kv_.n_blocks()));
  while (!short_of_blocks && budget > 0 && !waiting_.empty()) {
    Request* r = *waiting_.begin();
    const std::vector<kv::BlockId> cached = kv_.find_cached_prefix(r->tokens, r->cache_extra);
    const int64_t num_cached = static_cast<int64_t>(cached.size()) * kv_.block_size();
    const int64_t n = std::min(r->num_tokens() - num_cached, budget);
    const bool seq_room = running_weight() + r->seq_weight <= config_.max_num_seqs;
    // With nothing running there is nothing to keep room for (and a request as large as
    // the pool must still get in).
    if (seq_room && kv_.allocate(r->id, num_cached + n, num_cached, cached, &out.copies,
                                 running_.empty() ? 0 : headroom)) {
      waiting_.erase(waiting_.begin());
      counters_.prefix_queries += r->num_tokens();
      counters_.prefix_hits += num_cached;
      if (r->num_preemptions == 0) r->num_cached_tokens = num_cached;
      r->num_computed = num_cached;
      r->status = RequestStatus::kRunning;
      running_.push_back(r);
      out.seqs.push_back({r, static_cast<int>(n), num_cached + n == r->num_tokens()});
      out.num_tokens += n;
      budget -= n;
      continue;
    }
    // Under the priority policy a more urgent request displaces the least urgent running
    // one; otherwise it waits for room.
    Request* worst = worst_running();
    if (config_.policy != Policy::kPriority || !worst || worst->priority <= r->priority) break;
    preempt(worst, out, budget);
  }
  return out;
}

void Scheduler::step_done(const SchedulerOutput& out) {
  advance(out);
  for (const ScheduledSeq& s : out.seqs) offer_blocks(s.req);
}

void Scheduler::advance(const SchedulerOutput& out) {
  for (const ScheduledSeq& s : out.seqs) s.req->num_computed += s.num_tokens;
}

void Scheduler::offer_blocks(Request* r) {
  // Only when a block has filled since the last offer (most decode steps fill none, and
  // the lookup costs a cache miss or two per sequence).
  const int64_t bs = kv_.block_size();
  if (r->num_computed / bs > r->num_offered / bs)
    kv_.cache_computed_blocks(r->id, r->tokens, r->num_computed, r->cache_extra);
  r->num_offered = r->num_computed;
}

void Scheduler::remove(Request* r) {
  kv_.free(r->id);
  auto it = std::find(running_.begin(), running_.end(), r);
  if (it != running_.end()) running_.erase(it);
  waiting_.erase(r);
  r->status = RequestStatus::kFinished;
}

}  // namespace pagoda::sched
