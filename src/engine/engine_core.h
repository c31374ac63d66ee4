// The step loop, single-threaded: schedule, execute, update. Everything the Engine's
// thread does between draining its input queue and publishing outputs happens here, so
// it can be driven directly by tests with a fake model (a ModelRunner).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/detokenizer.h"
#include "engine/sampler.h"
#include "kv/kv_cache_manager.h"
#include "model/runner.h"
#include "pagoda/engine.h"
#include "sched/scheduler.h"

namespace pagoda {

struct EngineCoreConfig {
  sched::SchedulerConfig sched;
  int n_blocks = 0;
  int block_size = 16;
  bool enable_prefix_caching = true;
  // Queue each step before handling the previous step's tokens (ModelRunner::launch), so a
  // device runs while the host schedules and detokenizes. Requests that need the logits
  // on the host (log-probabilities, n > 1, penalties, host sampling) run plain steps;
  // while any is live, every step is plain.
  bool async_scheduling = false;
  // Sample on the device where the runner can (PAGODA_DEVICE_SAMPLING=0 in the engine
  // sends every step's logits to the host's sampler instead).
  bool device_sampling = true;
};

class EngineCore {
 public:
  // `tok` may be null (token-only use: no text, no stop strings, no end-of-generation).
  EngineCore(const EngineCoreConfig& config, ModelRunner& runner, const Tokenizer* tok);
  ~EngineCore();

  // Whether a request could ever run; reads only fixed configuration, so any thread may
  // call it while another runs step().
  Status validate(const std::vector<int32_t>& prompt, const SamplingParams& params) const;
  Status add_request(const std::string& id, std::vector<int32_t> prompt,
                     const SamplingParams& params, int priority, double arrival_time);
  // Finishes every completion of `id` with reason abort; outputs go to `out`.
  void abort(const std::string& id, std::vector<RequestOutput>* out);
  // Runs one step (nothing when there is no work), appending outputs.
  void step(std::vector<RequestOutput>* out);
  bool has_work() const { return sched_.has_work() || inflight_.has_value(); }
  EngineStats stats() const;
  const kv::KvCacheManager& kv() const { return kv_; }
  const sched::Scheduler& scheduler() const { return sched_; }

 private:
  struct Req;
  // A pipelined step on the device: its requests, and where each sampled row's
  // placeholder sits in its request's tokens.
  struct InFlight {
    uint64_t id = 0;
    sched::SchedulerOutput so;
    std::vector<Req*> reqs;      // so.seqs order
    std::vector<int64_t> slots;  // per logit row
    Status status;               // a failed launch: the step's requests fail at completion
  };
  // Samples from `logits`, or takes `chosen` (>= 0) when the runner picked the token;
  // the token goes at the end of the request's tokens, or to `slot` (a placeholder).
  void sample_into(Req& r, float* logits, int32_t chosen, std::vector<RequestOutput>* out,
                   double now, int64_t slot = -1);
  // The step's batch from the scheduler's choice (copies blocks first); fills step_reqs_.
  // A failed block copy fails the step as a failed forward pass would.
  Status build_batch(const sched::SchedulerOutput& so);
  void count_waste();
  // Pipelined steps (async_scheduling).
  bool pipelinable(const SamplingParams& p) const;
  void step_pipelined(std::vector<RequestOutput>* out);
  void launch(sched::SchedulerOutput so);
  void complete(InFlight& f, std::vector<RequestOutput>* out);
  // Every sampled row of this step is plain greedy and the runner can pick it.
  bool greedy_step(const sched::SchedulerOutput& so) const;
  // No sampled row of this step needs its logits on the host (log-probabilities, forks),
  // and the runner can draw the tokens itself (EngineCoreConfig::device_sampling).
  bool device_sampling_step(const sched::SchedulerOutput& so) const;
  void finish(Req& r, FinishReason why, std::vector<RequestOutput>* out, double now,
              RequestOutput* pending = nullptr, const std::string& error = {});
  Req* fork(Req& parent, int index);
  // A failed model run: its requests (those not finished already) end with the error.
  void fail_step(const std::vector<Req*>& reqs, const Status& s, std::vector<RequestOutput>* out);
  // The device-sampling rows of the step's sampled requests, in logit-row order.
  void fill_sampling(const sched::SchedulerOutput& so);

  EngineCoreConfig config_;
  ModelRunner& runner_;
  const Tokenizer* tok_;
  kv::KvCacheManager kv_;
  sched::Scheduler sched_;
  std::unordered_map<kv::SeqId, std::unique_ptr<Req>> reqs_;
  std::unordered_map<std::string, std::vector<kv::SeqId>> by_id_;
  kv::SeqId next_seq_ = 1;
  EngineStats stats_;
  double waste_slots_ = 0, reserved_slots_ = 0;
  std::vector<float> logits_;
  std::vector<int32_t> chosen_;
  StepSampling sampling_;
  Batch batch_;
  std::vector<Req*> step_reqs_;  // the step's requests, in SchedulerOutput::seqs order
  std::optional<InFlight> inflight_;
  uint64_t launches_ = 0;
  std::vector<std::unique_ptr<Req>> zombies_;  // finished while a queued step holds them
  int sync_only_ = 0;                          // live requests that need plain steps
};

}  // namespace pagoda
