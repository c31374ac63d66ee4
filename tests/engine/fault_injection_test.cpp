// PAGODA_FAULT_INJECT's parser and runner wrapper, and what the step loop does with a
// failed forward pass: the step's requests end with an error, their blocks are freed, and
// the stats say the engine is failing until a step runs again.
#include "engine/fault_injection.h"

#include <gtest/gtest.h>

#include "engine/engine_core.h"
#include "fake_runner.h"

namespace pagoda {
namespace {

constexpr int32_t kVocab = 97;

TEST(FaultInjection, ParsesTheVariable) {
  EXPECT_FALSE(parse_fault_plan("")->active());
  auto p = parse_fault_plan("forward_fail_after=3");
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->forward_fail_after, 3);
  EXPECT_EQ(p->forward_fail_count, 1);
  p = parse_fault_plan("forward_fail_after=0,forward_fail_count=0");
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->forward_fail_after, 0);
  EXPECT_EQ(p->forward_fail_count, 0);
  for (const char* bad : {"forward_fail_after", "forward_fail_after=-1", "forward_fail_after=x",
                          "forward_fail_after=2x", "backward_fail=1"})
    EXPECT_FALSE(parse_fault_plan(bad).is_ok()) << bad;
}

// Which of the first `n` forward passes fail under `spec`.
std::vector<bool> failures(const std::string& spec, int n) {
  testing::FakeRunner inner(4, 16, kVocab);
  FaultInjectingRunner runner(inner, *parse_fault_plan(spec));
  std::vector<bool> out;
  Batch empty;
  for (int i = 0; i < n; ++i) out.push_back(!runner.forward(empty, StepOutput{}).is_ok());
  return out;
}

TEST(FaultInjection, FailsTheChosenPasses) {
  EXPECT_EQ(failures("forward_fail_after=2", 5),
            (std::vector<bool>{false, false, true, false, false}));
  EXPECT_EQ(failures("forward_fail_after=1,forward_fail_count=2", 5),
            (std::vector<bool>{false, true, true, false, false}));
  EXPECT_EQ(failures("forward_fail_after=3,forward_fail_count=0", 6),
            (std::vector<bool>{false, false, false, true, true, true}));
  EXPECT_EQ(failures("", 3), (std::vector<bool>{false, false, false}));
}

// 64 blocks of 16, 4 sequences, 256 tokens a step.
EngineCoreConfig small_config(bool async) {
  EngineCoreConfig c;
  c.n_blocks = 64;
  c.block_size = 16;
  c.sched.max_num_seqs = 4;
  c.sched.max_num_batched_tokens = 256;
  c.sched.max_model_len = 1024;
  c.async_scheduling = async;
  return c;
}

SamplingParams greedy50() {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 50;
  return p;
}

TEST(FaultInjection, AFailedStepEndsItsRequestsWithAnErrorAndFreesTheirBlocks) {
  testing::FakeRunner inner(64, 16, kVocab);
  FaultInjectingRunner runner(inner, *parse_fault_plan("forward_fail_after=3"));
  EngineCore core(small_config(false), runner, nullptr);
  const SamplingParams p = greedy50();
  ASSERT_TRUE(core.add_request("a", std::vector<int32_t>(20, 5), p, 0, 0.0).is_ok());
  std::vector<RequestOutput> outs;
  for (int i = 0; i < 3; ++i) core.step(&outs);  // prefill and two decodes
  EXPECT_FALSE(core.stats().last_step_failed);
  EXPECT_GT(core.stats().kv_blocks_used, 0);
  outs.clear();
  core.step(&outs);  // the fourth pass fails
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_TRUE(outs[0].finished);
  EXPECT_EQ(outs[0].finish_reason, FinishReason::kError);
  EXPECT_NE(outs[0].error.find("injected fault"), std::string::npos) << outs[0].error;
  EngineStats s = core.stats();
  EXPECT_TRUE(s.last_step_failed);
  EXPECT_EQ(s.failed_steps, 1);
  EXPECT_EQ(s.num_running, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_FALSE(core.has_work());

  // The next step that runs the model clears the failing state.
  ASSERT_TRUE(core.add_request("b", std::vector<int32_t>(20, 6), p, 0, 0.0).is_ok());
  outs.clear();
  core.step(&outs);
  EXPECT_FALSE(core.stats().last_step_failed);
  EXPECT_EQ(core.stats().failed_steps, 1);
}

TEST(FaultInjection, AFailedPipelinedStepEndsItsRequestsToo) {
  // Pipelined steps: the failure surfaces when the step is collected (a call later), the
  // step queued meanwhile fails with it, and nothing is left holding blocks.
  testing::FakeRunner inner(64, 16, kVocab);
  inner.greedy = true;
  FaultInjectingRunner runner(inner, *parse_fault_plan("forward_fail_after=3"));
  EngineCore core(small_config(true), runner, nullptr);
  const SamplingParams p = greedy50();
  ASSERT_TRUE(core.add_request("a", std::vector<int32_t>(20, 5), p, 0, 0.0).is_ok());
  ASSERT_TRUE(core.add_request("b", std::vector<int32_t>(30, 7), p, 0, 0.0).is_ok());
  std::vector<RequestOutput> outs;
  int errors = 0;
  for (int i = 0; i < 8 && core.has_work(); ++i) {
    outs.clear();
    core.step(&outs);
    for (const RequestOutput& o : outs) {
      if (!o.finished) continue;
      EXPECT_EQ(o.finish_reason, FinishReason::kError);
      EXPECT_NE(o.error.find("injected fault"), std::string::npos) << o.error;
      ++errors;
    }
  }
  EXPECT_EQ(errors, 2);
  EXPECT_FALSE(core.has_work());
  const EngineStats s = core.stats();
  EXPECT_TRUE(s.last_step_failed);
  EXPECT_GE(s.failed_steps, 1);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_GT(s.pipelined_steps, 0);
}

}  // namespace
}  // namespace pagoda
