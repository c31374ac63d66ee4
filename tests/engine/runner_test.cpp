// The backend boundary (ModelRunner) over the CPU model: one forward() gives exactly what
// the Model gives, hands back logits or greedy picks as StepOutput asks, and the default
// pipeline (launch / collect) gives the tokens plain steps give. The CUDA backend plugs
// into the engine through the same interface.
#include <gtest/gtest.h>

#include "../unit/shared_dir.h"

#include "engine/runner_session.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "model/gguf.h"
#include "model/runner.h"

namespace pagoda {
namespace {

const std::string kModel = test::shared_dir() + "/models/stories260K.gguf";

std::unique_ptr<Model> load_model() {
  auto file = GgufFile::open(kModel);
  EXPECT_TRUE(file) << file.status().message();
  if (!file) return nullptr;
  auto model = Model::load(**file);
  EXPECT_TRUE(model) << model.status().message();
  return model ? std::move(model).value() : nullptr;
}

TEST(ModelRunner, CpuRunnerMatchesTheModelAndSession) {
  const std::unique_ptr<Model> model = load_model();
  ASSERT_TRUE(model);
  const int V = model->config().n_vocab;
  ThreadPool pool(2);
  RunnerOptions o;
  o.n_kv_blocks = 8;
  // The Model with its own pool, as the engine drove it before the runner did.
  KvStorage kv(model->config(), o.n_kv_blocks, o.kv_block_size);
  Model::WorkspacePtr ws = model->make_workspace();
  std::unique_ptr<ModelRunner> run = make_cpu_runner(*model, pool, o);
  EXPECT_EQ(run->config().n_vocab, V);
  EXPECT_TRUE(run->picks_tokens(false));
  EXPECT_FALSE(run->picks_tokens(true));
  const std::vector<int32_t> table = {3, 1, 7, 0};
  Batch b;
  b.tokens = {1, 403, 407, 261, 378, 5, 9};
  b.seqs.push_back({0, 7, 0, table.data()});
  b.logit_rows = {6, 2};
  std::vector<float> a(2 * static_cast<size_t>(V)), c(a.size());
  ASSERT_TRUE(model->forward(b, kv, a.data(), *ws, pool));
  ASSERT_TRUE(run->forward(b, StepOutput::Logits(c.data())));
  EXPECT_EQ(a, c);
  // Copy-on-write: block 3 to 5, then a step through the copy sees the same context.
  kv.copy_block(3, 5);
  ASSERT_TRUE(run->copy_block(3, 5));
  const std::vector<int32_t> table2 = {5, 1};
  Batch d;
  d.tokens = {42};
  d.seqs.push_back({0, 1, 7, table2.data()});
  d.logit_rows = {0};
  ASSERT_TRUE(model->forward(d, kv, a.data(), *ws, pool));
  ASSERT_TRUE(run->forward(d, StepOutput::Logits(c.data())));
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + V, c.begin()));
  // A bad copy is refused at once; the runner goes on.
  EXPECT_FALSE(run->copy_block(3, 99));
  EXPECT_TRUE(run->forward(d, StepOutput::Logits(c.data())));

  // What a step hands back: never both; no sampled draws on the CPU; nothing at all.
  int32_t pick = -1;
  EXPECT_EQ(run->forward(d, {c.data(), &pick, nullptr}).code(), StatusCode::kInvalidArgument);
  StepSampling sampling;
  sampling.rows.resize(1);
  EXPECT_EQ(run->forward(d, StepOutput::Sampled(&pick, &sampling)).code(),
            StatusCode::kUnsupported);
  EXPECT_EQ(pick, -1);
  EXPECT_TRUE(run->forward(d, StepOutput{}));

  // RunnerSession and Session: the same greedy tokens.
  Session s1(*model, pool, 64);
  RunnerSession s2(*run, 64, o.kv_block_size);
  std::vector<float> l1, l2;
  ASSERT_TRUE(s1.eval({1, 403, 407}, false, &l1));
  ASSERT_TRUE(s2.eval({1, 403, 407}, false, &l2));
  EXPECT_EQ(l1, l2);
  int32_t greedy = -1;
  Batch g;
  g.tokens = {9};
  const std::vector<int32_t> t0 = {0, 1, 2, 3};
  g.seqs.push_back({0, 1, 3, t0.data()});
  g.logit_rows = {0};
  ASSERT_TRUE(run->forward(g, StepOutput::Greedy(&greedy)));
  ASSERT_TRUE(s1.eval({9}, false, &l1));
  EXPECT_EQ(greedy, argmax(l1.data(), V));
}

// One sequence on blocks {0, 1}: `tokens` at position pos0, its last row's token wanted.
Batch one_seq(std::vector<int32_t> tokens, int pos0, const std::vector<int32_t>& table) {
  Batch b;
  const int n = static_cast<int>(tokens.size());
  b.tokens = std::move(tokens);
  b.seqs.push_back({0, n, pos0, table.data()});
  b.logit_rows = {n - 1};
  return b;
}

TEST(ModelRunner, DefaultPipelineGivesThePlainStepsTokens) {
  const std::unique_ptr<Model> model = load_model();
  ASSERT_TRUE(model);
  ThreadPool pool(2);
  RunnerOptions o;
  o.n_kv_blocks = 4;
  std::unique_ptr<ModelRunner> plain = make_cpu_runner(*model, pool, o);
  std::unique_ptr<ModelRunner> piped = make_cpu_runner(*model, pool, o);
  const std::vector<int32_t> table = {0, 1}, prompt = {1, 403, 407};
  constexpr int kSteps = 5;

  // Plain greedy steps: the prompt, then each pick fed back.
  std::vector<int32_t> want;
  int32_t t = -1;
  ASSERT_TRUE(plain->forward(one_seq(prompt, 0, table), StepOutput::Greedy(&t)));
  want.push_back(t);
  for (int i = 1; i < kSteps; ++i) {
    ASSERT_TRUE(plain->forward(one_seq({t}, 2 + i, table), StepOutput::Greedy(&t)));
    want.push_back(t);
  }

  // Pipelined: each step launched before the one before it is collected, its input the
  // placeholder -1 (row 0 of the previous step's picks).
  std::vector<int32_t> got, picks;
  EXPECT_FALSE(piped->collect(&picks));  // nothing launched
  ASSERT_TRUE(piped->launch(one_seq(prompt, 0, table), nullptr));
  for (int i = 1; i < kSteps; ++i) {
    ASSERT_TRUE(piped->launch(one_seq({-1}, 2 + i, table), nullptr));
    ASSERT_TRUE(piped->collect(&picks));
    ASSERT_EQ(picks.size(), 1u);
    got.push_back(picks[0]);
  }
  ASSERT_TRUE(piped->collect(&picks));
  got.push_back(picks[0]);
  EXPECT_EQ(got, want);

  // Failures wait for collect(): a placeholder past the previous step's picks, and a
  // sampled draw the CPU runner cannot make.
  EXPECT_TRUE(piped->launch(one_seq({-2}, 2 + kSteps, table), nullptr));
  EXPECT_FALSE(piped->collect(&picks));
  StepSampling sampling;
  sampling.rows.resize(1);
  EXPECT_TRUE(piped->launch(one_seq({9}, 2 + kSteps, table), &sampling));
  const Status s = piped->collect(&picks);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.message();
  // A failed step leaves no picks behind: a later placeholder is refused too.
  EXPECT_TRUE(piped->launch(one_seq({-1}, 2 + kSteps, table), nullptr));
  EXPECT_FALSE(piped->collect(&picks));
}

}  // namespace
}  // namespace pagoda
