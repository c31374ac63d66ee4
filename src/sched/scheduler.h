// Continuous batching: every step picks which requests run and how many of their tokens,
// under a token budget shared by decodes and chunked prefills, and preempts (frees and
// later recomputes) rather than fails when the KV pool runs out.
//
// Each step: running requests first, in admission order, each asking for all its
// uncomputed tokens (one for a decode) within what is left of the budget; when the pool
// cannot give a request its blocks, the lowest-priority, latest running request is
// preempted (possibly the one asking); a request already holding all the tokens it may
// have (its last one still being picked by a queued step) asks for nothing. Then, if
// nothing was preempted, waiting requests
// are admitted in policy order while budget, max_num_seqs and blocks allow, starting
// from their longest cached prefix. Under the priority policy a waiting request may also
// preempt running ones of strictly lower priority to get in.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "kv/kv_cache_manager.h"
#include "sched/request.h"

namespace pagoda::sched {

enum class Policy { kFcfs, kPriority };

struct SchedulerConfig {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  int64_t max_model_len = 4096;
  Policy policy = Policy::kFcfs;
  // Free blocks kept back when admitting a new request, so that running requests can
  // grow for a while before anything must be preempted (vLLM's watermark, 1%).
  double watermark = 0.01;
};

struct ScheduledSeq {
  Request* req;
  int num_tokens;  // tokens [req->num_computed, + num_tokens) run this step
  bool samples;    // the step reaches the request's last token, so it yields logits
};

struct SchedulerOutput {
  std::vector<ScheduledSeq> seqs;
  std::vector<kv::BlockCopy> copies;  // run before the forward pass
  int64_t num_tokens = 0;
  std::vector<Request*> preempted;
  bool empty() const { return seqs.empty(); }
};

struct SchedulerCounters {
  int64_t preemptions = 0;
  int64_t prefix_queries = 0;  // tokens looked up in the prefix cache
  int64_t prefix_hits = 0;     // of which found cached
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, kv::KvCacheManager& kv);

  // Why a request can never run (too long for max_model_len or for the whole pool).
  Status check_admissible(const Request& r) const;
  void add(Request* r);
  // A sequence forked off a running request (already holding blocks) runs from now on.
  void add_running(Request* r);
  SchedulerOutput schedule();
  // Marks the scheduled tokens computed and offers their full blocks to the prefix cache.
  void step_done(const SchedulerOutput& out);
  // The two halves of step_done, for pipelined steps: the tokens count as computed when
  // the step is queued (so the next step can be scheduled), and blocks are offered once
  // the tokens in them are known (every token below num_computed).
  void advance(const SchedulerOutput& out);
  void offer_blocks(Request* r);
  // The request leaves (finished or aborted): everything it holds is freed.
  void remove(Request* r);

  int num_running() const { return static_cast<int>(running_.size()); }
  const std::vector<Request*>& running() const { return running_; }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  const SchedulerCounters& counters() const { return counters_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  // Order of service: true when a should run before b.
  bool before(const Request* a, const Request* b) const;
  struct Order {
    const Scheduler* s;
    bool operator()(const Request* a, const Request* b) const { return s->before(a, b); }
  };
  void preempt(Request* r, SchedulerOutput& out, int64_t& budget);
  Request* worst_running() const;
  int running_weight() const;

  SchedulerConfig config_;
  kv::KvCacheManager& kv_;
  std::vector<Request*> running_;
  std::set<Request*, Order> waiting_;
  uint64_t next_arrival_ = 0;
  SchedulerCounters counters_;
};

}  // namespace pagoda::sched
