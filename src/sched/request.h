// A request as the scheduler sees it: its tokens so far, how many of them have KV in the
// cache, its priority and arrival order. Sampling, text and streaming belong to the
// engine, which wraps this.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_cache_manager.h"

namespace pagoda::sched {

enum class RequestStatus { kWaiting, kRunning, kFinished };

struct Request {
  kv::SeqId id = 0;
  int priority = 0;             // lower runs first (priority policy)
  uint64_t arrival = 0;         // admission order; ties in priority go to the earlier
  std::vector<int32_t> tokens;  // prompt, then the tokens generated so far
  int64_t num_prompt_tokens = 0;
  int64_t max_total_tokens = 0;  // prompt + max_tokens: the most this request will hold
  int64_t num_computed = 0;      // leading tokens whose KV is in the cache
  int64_t num_offered = 0;       // leading tokens whose full blocks went to the prefix cache
  uint64_t cache_extra = 0;      // extra prefix-cache key (cache salt)
  // Sequences this request stands for: n completions of one prompt run as one request
  // until the prompt is computed, then fork; max_num_seqs counts all of them.
  int seq_weight = 1;
  RequestStatus status = RequestStatus::kWaiting;
  int num_preemptions = 0;
  int64_t num_cached_tokens = 0;  // prefix-cache hit at first admission

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
};

}  // namespace pagoda::sched
