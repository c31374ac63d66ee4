// Fault injection for tests of error paths above the engine: an Executor wrapper that
// makes chosen forward passes fail, as a device or model fault would.
//
// The Engine takes the plan from EngineConfig::settings.fault_inject (the CLI's
// PAGODA_FAULT_INJECT), when it is created:
//
//   forward_fail_after=N[,forward_fail_count=K]
//
// The first N forward passes run normally; the K passes after them (default 1; 0: every
// one from then on) return an internal error without running the model. The engine then
// fails the requests of those steps (finish reason error), as for a real fault. Unset or
// empty: no wrapper, no cost. A malformed value makes Engine::create fail.
#pragma once

#include <cstdint>
#include <string>

#include "engine/executor.h"

namespace pagoda {

struct FaultPlan {
  int64_t forward_fail_after = -1;  // < 0: no forward pass fails
  int64_t forward_fail_count = 1;   // 0: all from then on
  bool active() const { return forward_fail_after >= 0; }
};

inline constexpr const char* kFaultInjectEnv = "PAGODA_FAULT_INJECT";

// Parses the variable's value ("" is no faults).
Result<FaultPlan> parse_fault_plan(const std::string& spec);

class FaultInjectingExecutor : public Executor {
 public:
  FaultInjectingExecutor(Executor& inner, FaultPlan plan) : inner_(inner), plan_(plan) {}
  int32_t n_vocab() const override { return inner_.n_vocab(); }
  Status execute(const Batch& batch, float* logits) override;
  // The device-side greedy path is a forward pass too: counted and failed alike.
  bool has_greedy() const override { return inner_.has_greedy(); }
  Status execute_greedy(const Batch& batch, int32_t* tokens) override;
  bool has_sampling() const override { return inner_.has_sampling(); }
  Status execute_sample(const Batch& batch, const StepSampling& sampling, int32_t* tokens) override;
  void copy_blocks(const std::vector<kv::BlockCopy>& copies) override {
    inner_.copy_blocks(copies);
  }
  int64_t forward_passes() const { return passes_; }

 private:
  // Counts a pass; the injected error when this one is to fail.
  Status next_pass();
  Executor& inner_;
  const FaultPlan plan_;
  int64_t passes_ = 0;
};

}  // namespace pagoda
