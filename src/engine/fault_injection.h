// Fault injection for tests of error paths above the engine: a ModelRunner wrapper that
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

#include "model/runner.h"

namespace pagoda {

struct FaultPlan {
  int64_t forward_fail_after = -1;  // < 0: no forward pass fails
  int64_t forward_fail_count = 1;   // 0: all from then on
  bool active() const { return forward_fail_after >= 0; }
};

inline constexpr const char* kFaultInjectEnv = "PAGODA_FAULT_INJECT";

// Parses the variable's value ("" is no faults).
Result<FaultPlan> parse_fault_plan(const std::string& spec);

// Pipelined steps go through the default pipeline (ModelRunner::launch), which runs each
// step through forward() here, so they are counted and failed alike, even where the
// inner runner queues its own.
class FaultInjectingRunner : public ModelRunner {
 public:
  FaultInjectingRunner(ModelRunner& inner, FaultPlan plan) : inner_(inner), plan_(plan) {}
  const ModelConfig& config() const override { return inner_.config(); }
  DeviceKind device_kind() const override { return inner_.device_kind(); }
  std::string describe() const override { return inner_.describe(); }
  size_t decode_weight_bytes() const override { return inner_.decode_weight_bytes(); }
  size_t weight_bytes() const override { return inner_.weight_bytes(); }
  // Every pass, whatever it hands back (logits, greedy or sampled picks), is counted.
  Status forward(const Batch& batch, const StepOutput& out) override;
  bool picks_tokens(bool sampled) const override { return inner_.picks_tokens(sampled); }
  Status copy_block(int src, int dst) override { return inner_.copy_block(src, dst); }
  int64_t forward_passes() const { return passes_; }

 private:
  // Counts a pass; the injected error when this one is to fail.
  Status next_pass();
  ModelRunner& inner_;
  const FaultPlan plan_;
  int64_t passes_ = 0;
};

}  // namespace pagoda
